"""``toe run configs/prophet-arena.toml``: the forecast task's config sections.

::

    task = "forecast"
    [data]        path (folder or CSV; relative paths resolve against the current directory),
                  categories, n_evo, split_seed, use_train_files
    [run]         methods, max_questions, evolve, workspace, scorer, checkpoint
    [agent]       engine.forecast.agent.AgentConfig
    [subagent]    mode ("llm" | "pipeline"), max_steps, max_tokens
    [sandbox]     engine.forecast.sandbox.SandboxLimits
    [evolution]   engine.forecast.evolution.EvolutionConfig
    [memory_baselines] engine.forecast.memory_baselines.MemoryBaselinesConfig (methods mem0, memrl, reme, flex)
    [embed]       engine.embed.EmbedConfig (search embeddings; default hashing)
    [llm]         engine.llm.config.LLMConfig ("simulated" = the forecasting test harness)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import check, from_dict, split_tables
from engine.forecast.agent import MODES, AgentConfig
from engine.forecast.evolution import EvolutionConfig
from engine.forecast.evidence_memory import MemoryBaselinesConfig
from engine.forecast.sandbox import SandboxLimits
from engine.templates import PromptsConfig, check_files

# foredreamer / full_text / rag, then the memory baselines applied to the retrieved evidence
# (engine.forecast.memory_baselines; rows "Mem0 (evidence)", "MemRL (evidence)", "ReMe (evidence)", "FLEX (evidence)")
METHODS = MODES  # every agent mode is a method row


@dataclass(frozen=True)
class DataConfig:
    path: str = ""
    categories: tuple[str, ...] = ()
    n_evo: int = 5
    split_seed: int = 0
    use_train_files: bool = True  # evolution pool = ids of *_train_*.csv files when the folder has them
    # search provider (C.4): "sources" = the dataset's own source summaries (offline), "tavily" or
    # "tavily+firecrawl" = the paper's web providers (keys: TAVILY_API_KEY, FIRECRAWL_API_KEY)
    search: str = "sources"
    tavily_url: str = "https://api.tavily.com"
    firecrawl_url: str = "https://api.firecrawl.dev"

    def __post_init__(self):
        check(self.search in ("sources", "tavily", "tavily+firecrawl"),
              f"data.search must be 'sources', 'tavily' or 'tavily+firecrawl', got {self.search!r}")
        check(bool(self.path.strip()), "data.path must name a folder of Prophet Arena CSV files "
                                       "(e.g. ../shared/data/forecast/prophet_arena), got ''")
        check(self.n_evo >= 1, f"data.n_evo must be >= 1, got {self.n_evo}")


@dataclass(frozen=True)
class RunConfig:
    methods: tuple[str, ...] = ("foredreamer",)
    max_questions: int = 2  # evaluation questions per category for the model rows (0 = all)
    evolve: bool = False
    workspace: str = ""  # "" = <run folder>/workspace
    scorer: str = "pm_rank"  # "pm_rank" (upstream's scorer) | "listed" (the engine's earlier definitions)
    checkpoint: bool = False  # checkpoint every round under OUT/checkpoint; rerunning a killed run resumes it

    def __post_init__(self):
        check(self.scorer in ("pm_rank", "listed"), f"run.scorer must be 'pm_rank' or 'listed', got {self.scorer!r}")
        bad = [m for m in self.methods if m not in METHODS]
        check(not bad and bool(self.methods), f"run.methods must be a non-empty subset of {list(METHODS)}, got {list(self.methods)}")
        check(self.max_questions >= 0, f"run.max_questions must be >= 0, got {self.max_questions}")


@dataclass(frozen=True)
class SubagentConfig:
    mode: str = "llm"
    max_steps: int = 4
    max_tokens: int = 256  # per subagent reply
    max_chars: int = 4000  # factual memory kept per item

    def __post_init__(self):
        check(self.mode in ("llm", "pipeline"), f"subagent.mode must be 'llm' or 'pipeline', got {self.mode!r}")
        check(self.max_steps >= 1, f"subagent.max_steps must be >= 1, got {self.max_steps}")
        check(self.max_tokens >= 16, f"subagent.max_tokens must be >= 16, got {self.max_tokens}")
        check(self.max_chars >= 100, f"subagent.max_chars must be >= 100, got {self.max_chars}")


@dataclass(frozen=True, kw_only=True)
class AgentSections:
    """The sections both forecasting tasks share (Prophet Arena's :class:`ForecastConfig`, FutureX's
    ``FutureXConfig``): the agent, its memory subagent, the sandbox, MemGuide evolution and prompt files."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    subagent: SubagentConfig = field(default_factory=SubagentConfig)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)  # the user's template files (docs/prompts.md)


@dataclass(frozen=True, kw_only=True)
class ForecastConfig(AgentSections):
    data: DataConfig
    run: RunConfig = field(default_factory=RunConfig)
    memory_baselines: MemoryBaselinesConfig = field(default_factory=MemoryBaselinesConfig)


# The forecasting tasks' own top-level keys ([memory]: the budget every memory method shares, read into
# [memory_baselines]).
KEYS = ("data", "run", "agent", "subagent", "sandbox", "evolution", "memory_baselines", "memory", "prompts")


def load_forecast_config(config: dict) -> ForecastConfig:
    """Validate the forecast sections of a whole config dict (``task``, ``title``, ``llm``, ``embed`` are read elsewhere)."""
    sections = {k: v for k, v in split_tables(config, KEYS, "forecast").items() if k != "memory"}
    if "memory_baselines" in config or "memory" in config:  # [memory]: the budget every memory method shares
        from engine.forecast.evidence_memory import memory_baselines_table

        sections["memory_baselines"] = memory_baselines_table(config)
    if "data" not in sections:
        from engine.errors import ConfigError

        raise ConfigError("the forecast task needs a [data] table with path = <folder of Prophet Arena CSV files>")
    cfg = from_dict(ForecastConfig, sections, "forecast")
    check_files(cfg.prompts, "forecast")
    return cfg
