"""ForeDreamer (seed 001) on Prophet Arena and FutureX-format questions.

Modules: ``data`` (loaders, splits), ``metrics`` (Brier, accuracy, market
return, reference rows), ``search`` (cutoff-aware local corpus search),
``sandbox`` + ``memtools`` (bubblewrap-sandboxed MemTools, guide/tool
validation and atomic publication), ``subagent`` (memory-processing subagent),
``agent`` (main multi-turn agent), ``evolution`` (textual and procedural
tracks), ``similarity`` (Appendix E.1 tool-similarity analysis),
``experiment`` (``toe run configs/prophet-arena.toml``).
"""
