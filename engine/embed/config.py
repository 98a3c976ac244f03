"""``[embed]`` TOML table -> :class:`EmbedConfig` -> :func:`make_embedder`.

Example (any experiment file)::

    [embed]
    backend = "minilm"        # "hashing" | "minilm" | "openai"
    runtime = "numpy"         # minilm: "numpy" (no torch) | "torch" (sentence-transformers, device = "cuda" ...)
    batch_size = 64
    cache_size = 100000

    # backend = "openai" (vLLM / llama.cpp / any /v1/embeddings server)
    # base_url = "http://127.0.0.1:8000/v1"
    # model = "BAAI/bge-small-en-v1.5"
    # dim = 384                # 0 = take the width the server returns

Build it with ``make_embedder(from_dict(EmbedConfig, data["embed"], "embed"))``
or ``embedder_from_table(data.get("embed"))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from engine.config import check, from_dict

BACKENDS = ("hashing", "minilm", "openai")


@dataclass(frozen=True)
class EmbedConfig:
    """Which embedder to build and how.

    backend: "hashing" (lexical, no model; default so the engine runs with no
        extra installed), "minilm" (all-MiniLM-L6-v2, 384-d, semantic: what cosine
        thresholds such as ToE's lam = 0.8 assume; engine/embed/minilm.py) or
        "openai" (an OpenAI-compatible ``/v1/embeddings`` server).
    dim: width for "hashing" (default 384, MiniLM's width); for "openai" the
        expected width (0 = whatever the server returns); must be 384 or 0 for "minilm".
    batch_size: texts per backend call; cache_size: LRU entries (0 = no cache).
    disk_cache: "minilm" with runtime "numpy" only: "" (off), "auto" (``$TOE_CACHE_DIR/embed``, else
        ``~/.cache/toe/embed``) or a directory: a machine-wide cache file every process (each Ray worker)
        reads and fills, so the machine embeds a text once (engine/embed/disk_cache.py).
    word_ngrams, char_ngram_min, char_ngram_max, char_weight, seed: "hashing" only.
    runtime: "minilm" only: "numpy" (the forward pass in NumPy, no torch; CPU) or "torch"
        (sentence-transformers, extra ``embed``); the same vectors.
    device: torch device for "minilm" with runtime "torch" ("cpu", "cuda", ...).
    base_url, model, api_key_env, timeout_s, max_retries: "openai" only; the
        key is read from the environment variable named by ``api_key_env`` (may be unset).
    """

    backend: Literal["hashing", "minilm", "openai"] = "hashing"
    dim: int = 384
    batch_size: int = 64
    cache_size: int = 100_000
    disk_cache: str = ""
    word_ngrams: int = 2
    char_ngram_min: int = 3
    char_ngram_max: int = 5
    char_weight: float = 0.5
    seed: int = 0
    runtime: Literal["numpy", "torch"] = "numpy"
    device: str = "cpu"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    max_retries: int = 3

    def __post_init__(self):
        check(self.backend in BACKENDS, f"embed.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        check(self.dim >= 0, f"embed.dim must be >= 0, got {self.dim}")
        check(self.backend != "hashing" or self.dim > 0, f"embed.dim must be > 0 for backend 'hashing', got {self.dim}")
        check(self.backend != "minilm" or self.dim in (0, 384), f"embed.dim must be 384 (or 0) for backend 'minilm', got {self.dim}")
        check(self.runtime in ("numpy", "torch"), f"embed.runtime must be 'numpy' or 'torch', got {self.runtime!r}")
        check(self.runtime == "torch" or self.device == "cpu",
              f"embed.device = {self.device!r} needs embed.runtime = 'torch' (the numpy runtime runs on the CPU)")
        check(self.batch_size > 0, f"embed.batch_size must be > 0, got {self.batch_size}")
        check(self.cache_size >= 0, f"embed.cache_size must be >= 0, got {self.cache_size}")
        check(not self.disk_cache or (self.backend == "minilm" and self.runtime == "numpy"),
              f"embed.disk_cache is for backend 'minilm' with runtime 'numpy' (a backend whose vector of a text "
              f"does not depend on its batch), got backend {self.backend!r}, runtime {self.runtime!r}")
        check(1 <= self.word_ngrams <= 8, f"embed.word_ngrams must be in [1, 8], got {self.word_ngrams}")
        check(
            1 <= self.char_ngram_min <= self.char_ngram_max <= 16,
            f"embed.char_ngram_min/max must satisfy 1 <= min <= max <= 16, got {self.char_ngram_min}, {self.char_ngram_max}",
        )
        check(0.0 <= self.char_weight <= 1.0, f"embed.char_weight must be in [0, 1], got {self.char_weight}")
        check(self.seed >= 0, f"embed.seed must be >= 0, got {self.seed}")
        check(self.timeout_s > 0, f"embed.timeout_s must be > 0, got {self.timeout_s}")
        check(self.max_retries >= 0, f"embed.max_retries must be >= 0, got {self.max_retries}")
        check(
            self.backend != "openai" or self.base_url.startswith(("http://", "https://")),
            f"embed.base_url must start with http:// or https://, got {self.base_url!r}",
        )
        check(self.backend != "openai" or bool(self.model), "embed.model must name the server's embedding model for backend 'openai'")


def make_embedder(cfg: EmbedConfig):
    """Build the :class:`~engine.embed.base.Embedder` that ``cfg`` describes (models load lazily)."""
    if cfg.backend == "hashing":
        from engine.embed.hashing import HashingEmbedder

        return HashingEmbedder(
            cfg.dim,
            word_ngrams=cfg.word_ngrams,
            char_ngram_range=(cfg.char_ngram_min, cfg.char_ngram_max),
            char_weight=cfg.char_weight,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
            cache_size=cfg.cache_size,
        )
    if cfg.backend == "minilm":
        from engine.embed.minilm import MiniLMEmbedder

        return MiniLMEmbedder(runtime=cfg.runtime, device=cfg.device, batch_size=cfg.batch_size,
                              cache_size=cfg.cache_size, disk_cache=cfg.disk_cache)
    from engine.embed.openai_embed import OpenAIEmbedder

    return OpenAIEmbedder(
        base_url=cfg.base_url,
        model=cfg.model,
        dim=cfg.dim or None,
        api_key_env=cfg.api_key_env,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        batch_size=cfg.batch_size,
        cache_size=cfg.cache_size,
    )


def load_embed_config(config: Mapping[str, Any] | None) -> EmbedConfig:
    """The ``[embed]`` of a whole config (the one parser of the section; a run parses it once,
    engine.run_options.with_engine_sections)."""
    return from_dict(EmbedConfig, (config or {}).get("embed"), "embed")


def embedder_from_table(table: Mapping[str, Any] | None, where: str = "embed"):
    """``make_embedder`` straight from a TOML table (None or {} = defaults)."""
    return make_embedder(from_dict(EmbedConfig, table, where))
