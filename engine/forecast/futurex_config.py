"""``toe run configs/futurex.toml``: the FutureX task's config sections.

::

    task = "futurex"
    [data]        path (FutureX JSON/JSONL file, or "example" = the shipped format example),
                  documents (documents JSONL for the cutoff-aware corpus search, "example", or "" = none),
                  n_evo, split_seed, numeric_rel_tol, search_provider ("module:factory" for web search)
    [run]         methods, max_questions, evolve, workspace
    [agent]       engine.forecast.agent.AgentConfig
    [subagent]    mode ("llm" | "pipeline"), max_steps
    [sandbox]     engine.forecast.sandbox.SandboxLimits
    [evolution]   engine.forecast.evolution.EvolutionConfig
    [memory_baselines]  engine.forecast.memory_baselines.MemoryBaselinesConfig (methods mem0, memrl, reme, flex)
    [embed]       engine.embed.EmbedConfig (search embeddings; default hashing)
    [llm]         engine.llm.config.LLMConfig ("simulated" = the forecasting test harness)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.config import check, from_dict, split_tables
from engine.errors import ConfigError
from engine.forecast.config import AgentSections, RunConfig
from engine.templates import check_files

EXAMPLE = "example"  # data.path / data.documents value naming the files shipped in engine/data


@dataclass(frozen=True)
class FutureXDataConfig:
    path: str = ""
    documents: str = ""  # "" = no corpus: search finds nothing, Full Text / RAG get no evidence
    n_evo: int = 20  # paper C.3: 20 of the 208 resolved questions for evolution + validation
    split_seed: int = 0
    numeric_rel_tol: float = 0.0  # numerical answers: |a - g| <= tol * |g| counts as correct (0 = same number)
    search_provider: str = ""  # "package.module:factory" -> a SearchProvider (web search); "" = the local corpus

    def __post_init__(self):
        check(bool(self.path.strip()), "data.path must name a FutureX JSON/JSONL file (or \"example\" for the "
                                       "shipped format example), got ''")
        check(self.n_evo >= 1, f"data.n_evo must be >= 1, got {self.n_evo}")
        check(math.isfinite(self.numeric_rel_tol) and self.numeric_rel_tol >= 0.0,
              f"data.numeric_rel_tol must be a finite number >= 0, got {self.numeric_rel_tol}")


@dataclass(frozen=True)
class FutureXRunConfig(RunConfig):
    """``[run]`` as for Prophet Arena (:class:`engine.forecast.config.RunConfig`), but every evaluation item by default."""

    max_questions: int = 0


@dataclass(frozen=True, kw_only=True)
class FutureXConfig(AgentSections):
    data: FutureXDataConfig
    run: FutureXRunConfig = field(default_factory=FutureXRunConfig)


def load_memory_baselines_config(config: dict):
    """``[memory_baselines]`` validated by its own dataclass (imported only when a memory baseline runs or the
    section is present, so the FutureX runner does not depend on the baselines' extras otherwise)."""
    from engine.forecast.evidence_memory import MemoryBaselinesConfig, memory_baselines_table

    return from_dict(MemoryBaselinesConfig, memory_baselines_table(config), "futurex.memory_baselines")


def load_futurex_config(config: dict) -> FutureXConfig:
    """Validate the FutureX sections of a whole config dict (``task``, ``title``, ``llm``, ``embed`` are read elsewhere)."""
    from engine.forecast.config import KEYS

    sections = {k: v for k, v in split_tables(config, KEYS, "futurex").items() if k not in ("memory", "memory_baselines")}
    if "data" not in sections:
        raise ConfigError("the futurex task needs a [data] table with path = <FutureX JSON/JSONL file> "
                          "(or path = \"example\" for the shipped format example)")
    cfg = from_dict(FutureXConfig, sections, "futurex")
    check_files(cfg.prompts, "forecast")
    return cfg
