"""Client for an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

vLLM (``--task embed``), llama.cpp's ``llama-server --embeddings`` and the
OpenAI API all answer ``{"model": m, "input": [texts]}`` with
``{"data": [{"index": i, "embedding": [...]}, ...]}``. This client sends one
request per batch (``batch_size`` texts), retries connection errors, timeouts,
HTTP 429 and 5xx with exponential back-off (``max_retries`` times), and raises
:class:`BackendError` naming the endpoint and the last failure otherwise. It uses
only the standard library (urllib), so it needs no extra.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import numpy as np

from engine.embed.base import CachedEmbedder, check_texts
from engine.errors import BackendError, InputError

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


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
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.name = f"openai:{model}"

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
        body = json.dumps({"model": self.model, "input": texts, "encoding_format": "float"}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            req = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    payload = resp.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                last = f"HTTP {exc.code}: {detail}"
                if exc.code in _RETRY_STATUS:
                    continue
                break
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            return self._parse(payload, len(texts))
        raise BackendError(
            f"embedding endpoint {self.endpoint} (model {self.model!r}) failed after "
            f"{attempt + 1} attempt(s): {last}"
        )

    def _parse(self, payload: bytes, n: int) -> np.ndarray:
        try:
            data = json.loads(payload)["data"]
            rows = sorted(data, key=lambda d: d.get("index", 0))
            vecs = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendError(
                f"embedding endpoint {self.endpoint} returned a malformed body "
                f"(expected {{'data': [{{'index', 'embedding'}}]}}): {payload[:200]!r}"
            ) from exc
        if vecs.ndim != 2 or vecs.shape[0] != n:
            raise BackendError(f"embedding endpoint {self.endpoint} returned {vecs.shape} for {n} inputs")
        if self._dim_known and vecs.shape[1] != self._dim:
            raise BackendError(
                f"embedding endpoint {self.endpoint} returned width {vecs.shape[1]}; expected dim={self._dim}"
            )
        return vecs
