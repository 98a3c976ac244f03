"""Client for an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

vLLM (``--task embed``), llama.cpp's ``llama-server --embeddings`` and the
OpenAI API all answer ``{"model": m, "input": [texts]}`` with
``{"data": [{"index": i, "embedding": [...]}, ...]}``. This client sends one
request per batch (``batch_size`` texts) through the engine's one HTTP layer
(:mod:`engine.http`: pooled keep-alive connections, the one retry policy:
connection errors, timeouts, HTTP 408, 425, 429 and 5xx retried ``max_retries``
times with exponential back-off and ``Retry-After``), and raises
:class:`BackendError` naming the endpoint and the last failure otherwise.
"""

from __future__ import annotations

import os

import numpy as np

from engine.embed.base import CachedEmbedder, check_texts
from engine.errors import BackendError, InputError
from engine.http import HTTPClient, RetryPolicy


class OpenAIEmbedder(CachedEmbedder):
    """Embeddings from an OpenAI-compatible server.

    ``dim=None`` takes the width of the first response (one probe request when
    ``.dim`` is read before any ``embed`` call); a given ``dim`` is checked
    against every response.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        batch_size: int = 64,
        cache_size: int = 100_000,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise InputError("model must name the server's embedding model, got ''")
        if dim is not None and dim <= 0:
            raise InputError(f"dim must be > 0 or None, got {dim}")
        if timeout_s <= 0:
            raise InputError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise InputError(f"max_retries must be >= 0, got {max_retries}")
        self._dim_known = dim is not None
        super().__init__(dim=dim or 1, batch_size=batch_size, cache_size=cache_size)
        self.endpoint = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.name = f"openai:{model}"
        key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.client = HTTPClient(base_url, api_key=key or None, name=f"embedding model {model!r}",
                                 policy=RetryPolicy(self.max_retries, self.backoff_s, 30.0))

    @property
    def dim(self) -> int:  # type: ignore[override]
        if not self._dim_known:
            vec = self._request(["dimension probe"])
            self._dim = vec.shape[1]
            self._dim_known = True
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._dim = int(value)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        vecs = self._request(texts)
        if not self._dim_known:
            self._dim = vecs.shape[1]
            self._dim_known = True
        return vecs

    def embed(self, texts):
        texts = check_texts(texts)
        if not self._dim_known and texts:
            _ = self.dim  # fix the width before the base allocates its output
        return super().embed(texts)

    def _request(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        return self._parse(self.client.call_json_sync("embeddings", body, self.timeout_s), len(texts))

    def _parse(self, payload, n: int) -> np.ndarray:
        try:
            data = payload["data"]
            rows = sorted(data, key=lambda d: d.get("index", 0))
            vecs = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackendError(
                f"embedding endpoint {self.endpoint} returned a malformed body "
                f"(expected {{'data': [{{'index', 'embedding'}}]}}): {str(payload)[:200]}"
            ) from exc
        if vecs.ndim != 2 or vecs.shape[0] != n:
            raise BackendError(f"embedding endpoint {self.endpoint} returned {vecs.shape} for {n} inputs")
        if self._dim_known and vecs.shape[1] != self._dim:
            raise BackendError(
                f"embedding endpoint {self.endpoint} returned width {vecs.shape[1]}; expected dim={self._dim}"
            )
        return vecs
