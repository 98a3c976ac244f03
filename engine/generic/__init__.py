"""The generic task (``task = "generic"``): your own problems with answers, a named checker, every memory method.

* :mod:`engine.generic.data`: the JSONL problem file and the example the engine generates;
* :mod:`engine.generic.checkers`: ``exact``, ``numeric`` or a Python function ``module:attr``;
* :mod:`engine.generic.method`: one prompt per problem, with or without a memory (FLEX, Mem0, MemRL, ReMe);
* :mod:`engine.generic.task`: the :class:`engine.runner.Task` (config, runs, summary, table, plots);
* :mod:`engine.generic.simulated`: the simulated policy (a harness, labelled simulated).
"""
