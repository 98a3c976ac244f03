"""ToE over text perspectives on a FinEvolveBench-style news stream (``task = "finance"``).

Modules: ``data`` (input schema, loaders, forward excess returns), ``channels``
and ``synthetic`` (the seeded synthetic market with ground truth), ``prompts``,
``simulated`` (the simulated finance policy, a test harness), ``methods`` and
``toe`` (Baseline, Pipe, Pipe+Mem0, Pipe+MemRL, Pipe+ToE as round-loop methods;
the tree is an :class:`engine.store.ExperienceStore` with its ``FeedbackLedger``),
``metrics`` (csIC / tsIC), ``report``, ``task`` (the :class:`engine.runner.Task`)
and ``experiment`` (``toe run``).
"""
