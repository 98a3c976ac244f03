"""The model's own token counts: one ``count_tokens`` per backend (``[llm] tokenizer``).

The memory budget (``[memory] max_experience_tokens``), context fitting, the
experience-token columns and the per-choice completion counts of a server whose
usage covers one choice all count through ``backend.count_tokens``
(:func:`engine.memory_budget.token_counter`). :func:`attach` gives a backend the
counter its config names:

==================  ==========================================================
``"auto"``          the backend's own: llama.cpp's ``/tokenize`` for ``local``;
                    for ``openai`` the server's ``/tokenize`` (vLLM and
                    llama.cpp servers have one), asked once, else the estimate;
                    vLLM's tokenizer in process; the estimate for ``simulated``,
                    ``replay`` and ``server_model`` (their policies count so)
``"server"``        the server's ``/tokenize``, required (an error names the URL)
``"estimate"``      words and punctuation marks (:mod:`engine.llm.tokens`)
a file path         a Hugging Face ``tokenizer.json`` (the ``tokenizers`` package)
``"tiktoken:NAME"`` a tiktoken encoding (``cl100k_base``, ``o200k_base``, ...)
==================  ==========================================================

:func:`label_of` says which one counts; a run records it in
``summary.json`` (``meta.provenance.token_counter``). Counts are cached per text (bounded), so a prompt counted by
the budget and again by the backend costs one request.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from engine.errors import BackendError, ConfigError, MissingExtraError
from engine.llm.tokens import count_prompt_tokens

ESTIMATE = "estimate (words and punctuation marks)"
_MAX_CACHED = 1 << 16


class CountCache:
    """``count(text)`` through a bounded per-text cache (emptied when full); thread-safe enough for counts."""

    def __init__(self, count: Callable[[str], int], label: str = ""):
        self._count, self._label = count, label
        self._cache: dict[str, int] = {}

    @property
    def label(self) -> str:
        """What counts (a server tokenizer's own label, which says so when it fell back to the estimate)."""
        return getattr(self._count, "label", None) or self._label

    def __call__(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            n = int(self._count(text))
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            self._cache[text] = n
        return n


class ServerTokenizer:
    """``POST {root}/tokenize`` of a llama.cpp or vLLM server (``{"tokens": [...]}``, vLLM also ``count``).

    ``required = False`` (``tokenizer = "auto"``): a server without the endpoint (OpenAI itself, SGLang) is
    asked once; from then on the estimate counts and :attr:`label` says so."""

    def __init__(self, base_url: str, model: str = "", api_key: str | None = None, required: bool = True,
                 timeout_s: float = 30.0):
        from engine.http import HTTPClient, RetryPolicy

        root = base_url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.client = HTTPClient(root, api_key=api_key, max_in_flight=64, name="tokenizer")
        self.model, self.required, self.timeout_s = model, required, float(timeout_s)
        self.policy = RetryPolicy(2, 0.2, 2.0)
        self.available: bool | None = None if not required else True
        self.label = f"server /tokenize ({self.client.url('tokenize')})"
        self._lock = threading.Lock()

    def __call__(self, text: str) -> int:
        if self.available is False:
            return count_prompt_tokens(text)
        payload = {"content": text, "prompt": text, "add_special": False, "add_special_tokens": False}
        if self.model:
            payload["model"] = self.model
        try:
            out = self.client.call_json_sync("tokenize", payload, self.timeout_s, self.policy)
            n = _token_count(out)
        except (BackendError, ValueError) as exc:
            if self.required or self.available:
                raise BackendError(f"token count from {self.client.url('tokenize')} failed: {exc}") from None
            with self._lock:
                self.available = False
                self.label = f"{ESTIMATE}: {self.client.url('tokenize')} did not answer ({str(exc)[:120]})"
            return count_prompt_tokens(text)
        self.available = True
        return n


def _token_count(out) -> int:
    if isinstance(out, dict):
        if isinstance(out.get("count"), int):
            return int(out["count"])
        if isinstance(out.get("tokens"), list):
            return len(out["tokens"])
    raise ValueError(f"a /tokenize answer without tokens: {str(out)[:120]}")


def hf_tokenizer(path: str) -> CountCache:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise MissingExtraError("tokenizers (llm.tokenizer names a tokenizer.json)", "dev") from None
    if not Path(path).is_file():
        raise ConfigError(f"llm.tokenizer {path!r} is not a file (a Hugging Face tokenizer.json)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the library's own message names what is wrong
        raise ConfigError(f"llm.tokenizer {path!r} is not a readable tokenizer.json: {exc}") from None
    return CountCache(lambda text: len(tok.encode(text, add_special_tokens=False).ids), f"tokenizer.json ({path})")


def tiktoken_tokenizer(name: str) -> CountCache:
    try:
        import tiktoken
    except ImportError:
        raise MissingExtraError("tiktoken (llm.tokenizer = 'tiktoken:...')", "dev") from None
    try:
        enc = tiktoken.get_encoding(name)
    except Exception as exc:  # noqa: BLE001 - unknown name, or its file could not be downloaded
        raise ConfigError(f"llm.tokenizer 'tiktoken:{name}': {exc}") from None
    return CountCache(lambda text: len(enc.encode(text, disallowed_special=())), f"tiktoken {name}")


def check_spec(spec: str) -> None:
    """Config-time check of ``llm.tokenizer`` (the file and the library are checked when a backend is built)."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"llm.tokenizer must be 'auto', 'server', 'estimate', a tokenizer.json path or "
                          f"'tiktoken:NAME', got {spec!r}")
    if spec.startswith("tiktoken:") and not spec[len("tiktoken:"):]:
        raise ConfigError("llm.tokenizer 'tiktoken:' names no encoding (e.g. 'tiktoken:cl100k_base')")


def attach(backend, cfg) -> None:
    """Give ``backend`` (built from ``cfg``) the ``count_tokens`` that ``cfg.tokenizer`` names (a counter with a
    ``label``, :func:`label_of`); the estimate needs nothing (``engine.memory_budget`` falls back to it)."""
    import os

    spec, kind = cfg.tokenizer, cfg.backend
    if spec == "estimate" or (spec == "auto" and kind in ("simulated", "replay", "server_model")):
        return
    if spec in ("auto", "server"):
        if kind == "vllm" and spec == "auto":
            counter = backend.tokenizer_counter()
        elif kind in ("openai", "local"):
            url = backend.base_url if kind == "local" else cfg.openai.base_url
            key = os.environ.get(cfg.openai.api_key_env) or None if kind == "openai" else None
            counter = CountCache(ServerTokenizer(url, cfg.model if kind == "openai" else "", key,
                                                 required=spec == "server" or kind == "local"))
        else:
            raise ConfigError(f"llm.tokenizer = 'server' needs an openai or local backend, not {kind!r}")
    elif spec.startswith("tiktoken:"):
        counter = tiktoken_tokenizer(spec[len("tiktoken:"):])
    else:
        counter = hf_tokenizer(spec)
    backend.count_tokens = counter


def label_of(backend) -> str:
    """What counts ``backend``'s tokens (through wrappers): its counter's label, else the estimate."""
    from engine.llm.base import through

    return getattr(through(backend, "count_tokens"), "label", None) or ESTIMATE


def describe(cfg) -> str:
    """Who counts tokens under ``cfg`` (``summary.json`` ``meta.provenance.token_counter``), from the config alone."""
    spec, kind = cfg.tokenizer, cfg.answering
    if spec == "estimate" or (spec == "auto" and kind in ("simulated", "replay", "server_model")):
        return ESTIMATE
    if spec.startswith("tiktoken:"):
        return f"tiktoken {spec[len('tiktoken:'):]}"
    if spec not in ("auto", "server"):
        return f"tokenizer.json ({spec})"
    if kind == "vllm" and spec == "auto":
        return "vLLM tokenizer"
    if kind == "local" or spec == "server":
        return "server /tokenize"
    return f"server /tokenize where it answers, else the {ESTIMATE}"
