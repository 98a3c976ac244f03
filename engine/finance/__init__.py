"""ToE over text perspectives on a FinEvolveBench-style news stream (``task = "finance"``).

Modules: ``data`` (input schema, loaders, forward excess returns), ``channels``
and ``synthetic`` (the seeded synthetic market with ground truth), ``prompts``,
``simulated`` (the simulated finance policy, a test harness), ``tree`` (the
industry > factor > direction experience tree), ``ledger`` (delayed feedback),
``methods`` and ``toe`` (Baseline, Pipe, Pipe+Mem0, Pipe+MemRL, Pipe+ToE),
``metrics`` (csIC / tsIC), ``report`` and ``experiment`` (``toe run``).
"""
