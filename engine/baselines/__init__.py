"""Baseline experience memories (task-agnostic, text in / text out): Mem0, MemRL, ReMe, FLEX.

* :mod:`engine.baselines.mem0`: the real ``mem0ai`` library's own pipeline, offline (extra ``baselines``);
* :mod:`engine.baselines.memrl`: MemRL (arXiv 2601.03192), re-implemented from MemTensor/MemRL's HLE setup;
* :mod:`engine.baselines.reme`: ReMe task memory, re-implemented from modelscope/ReMe's flows;
* :mod:`engine.baselines.simulated`: simulated answers to these prompts (for a simulated task policy);
* FLEX (seed 002) is a method of its own: :mod:`engine.flex` (it uses this package's records and tables).
* :mod:`engine.baselines.hipporag`, ``memoryos``, ``amem``, ``lightmem``, ``langmem``: the
  ForeDreamer paper's document memories (HippoRAG 2, MemoryOS, A-MEM, LightMem, LangMem),
  re-implemented from their code; interface and batched driver in :mod:`engine.baselines.docmem`
  (``add`` jobs, ``retrieve``), simulated replies in :mod:`engine.baselines.paper_simulated`.
  They are not re-exported here (docs/forecast_baselines.md).

Each memory has ``snapshot()``, ``reader(snapshot)`` (``retrieve``, ``format``,
``observe``) and ``apply(updates)``, fitted to the round contract of
:mod:`engine.rounds`; see :mod:`engine.baselines.common`. Task adapters:
:mod:`engine.game24.baseline_methods` (Game of 24); the finance task builds its own.
Importing this package never imports ``mem0ai``; :class:`Mem0Memory` does, when built.
"""

from engine.baselines.common import Attempt, Hit, Outcome, resolve_extraction
from engine.baselines.mem0 import Mem0Config, Mem0Memory
from engine.baselines.memrl import MemRLConfig, MemRLMemory
from engine.baselines.reme import ReMeConfig, ReMeMemory

__all__ = [
    "Attempt",
    "Hit",
    "Mem0Config",
    "Mem0Memory",
    "MemRLConfig",
    "MemRLMemory",
    "Outcome",
    "ReMeConfig",
    "ReMeMemory",
    "resolve_extraction",
]
