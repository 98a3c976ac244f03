"""The all-MiniLM-L6-v2 forward pass in NumPy: no torch, the same vectors as sentence-transformers.

A BERT encoder (``BertModel``: token + position + segment embeddings, LayerNorm,
then ``num_hidden_layers`` blocks of 12-head self-attention and a GELU feed-forward
layer, each with a residual connection and a post-LayerNorm), mean pooling over the
attention mask and L2 normalisation: sentence-transformers' ``Transformer ->
Pooling(mean) -> Normalize`` stack of this model. Weights come from the model's
``model.safetensors`` (parsed here: an 8-byte header length, a JSON header, raw
little-endian tensors), the tokenizer from its ``tokenizer.json`` through the
``tokenizers`` wheel, truncated at ``max_seq_length`` (256, ``sentence_bert_config.json``)
as sentence-transformers truncates. Everything runs in float32 on the CPU; a test
checks the vectors against sentence-transformers' (tests/engine/embed/test_minilm.py).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

from engine.errors import BackendError

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a NumPy array (float tensors as ``f4``)."""
    path = Path(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < 8:
        raise BackendError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", raw[:8].tobytes())
    if n <= 0 or 8 + n > raw.size:
        raise BackendError(f"{path}: header length {n} does not fit a {raw.size}-byte file")
    header = json.loads(raw[8: 8 + n].tobytes())
    data = raw[8 + n:]
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dt = _DTYPES.get(spec["dtype"])
        if dt is None:
            raise BackendError(f"{path}: tensor {name!r} has dtype {spec['dtype']}; expected one of {', '.join(_DTYPES)}")
        lo, hi = spec["data_offsets"]
        arr = np.frombuffer(data[lo:hi], dtype=np.dtype(dt).newbyteorder("<")).reshape(spec["shape"])
        out[name] = arr.astype(np.float32) if arr.dtype.kind == "f" else arr.astype(np.int64)
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    """erf, elementwise: Numerical Recipes' Chebyshev fit of erfc (fractional error < 1.2e-7
    everywhere, below float32's resolution of GELU's output; NumPy has no erf and scipy is not a dependency)."""
    z = np.minimum(np.abs(x), np.float32(9.0))  # erfc(9) < 1e-36: 1 - erfc is 1; exp(-z^2) stays a normal float32
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * z)
    poly = (-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0)


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (``hidden_act = "gelu"``)."""
    return 0.5 * x * (1.0 + _erf(x * np.float32(1.0 / math.sqrt(2.0))))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mu).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class BertEncoder:
    """Sentence embeddings ``f4[n, hidden]`` from a BERT sentence-transformers folder (mean pooling, unit norm).

    ``model_path`` holds ``config.json``, ``model.safetensors`` and ``tokenizer.json``;
    ``max_seq_length`` defaults to the folder's ``sentence_bert_config.json``.
    """

    def __init__(self, model_path: str | Path, max_seq_length: int | None = None, chunk_tokens: int = 4096):
        from engine.errors import require

        tokenizers = require("tokenizers", "embed")
        path = Path(model_path)
        cfg = json.loads((path / "config.json").read_text())
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
            raise BackendError(f"{path}: expected a BERT model with GELU (config.json), got model_type="
                               f"{cfg.get('model_type')!r}, hidden_act={cfg.get('hidden_act')!r}")
        if max_seq_length is None:
            st = path / "sentence_bert_config.json"
            max_seq_length = int(json.loads(st.read_text())["max_seq_length"]) if st.is_file() else 512
        self.max_seq_length = int(min(max_seq_length, cfg["max_position_embeddings"]))
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg["layer_norm_eps"])
        self.chunk_tokens = int(chunk_tokens)
        w = read_safetensors(path / "model.safetensors")
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        try:
            self.word = w["embeddings.word_embeddings.weight"]
            self.pos = w["embeddings.position_embeddings.weight"]
            self.type0 = w["embeddings.token_type_embeddings.weight"][0]
            self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
            self.layers = []
            for i in range(int(cfg["num_hidden_layers"])):
                p = f"encoder.layer.{i}."
                qkv_w = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
                qkv_b = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
                self.layers.append((
                    np.ascontiguousarray(qkv_w.T), qkv_b,  # [hidden, 3 hidden]: one matmul for Q, K, V
                    np.ascontiguousarray(w[p + "attention.output.dense.weight"].T), w[p + "attention.output.dense.bias"],
                    (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                    np.ascontiguousarray(w[p + "intermediate.dense.weight"].T), w[p + "intermediate.dense.bias"],
                    np.ascontiguousarray(w[p + "output.dense.weight"].T), w[p + "output.dense.bias"],
                    (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                ))
        except KeyError as exc:
            raise BackendError(f"{path}/model.safetensors has no tensor {exc}; not a BertModel checkpoint") from exc
        self.tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_seq_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        """``f4[len(texts), hidden]`` unit rows, about ``chunk_tokens`` tokens per forward pass."""
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        out = np.empty((len(ids), self.hidden), dtype=np.float32)
        start, n = 0, 0
        for r, x in enumerate(ids):
            n += len(x)
            if n >= self.chunk_tokens or r == len(ids) - 1:
                out[start: r + 1] = self._forward(ids[start: r + 1])
                start, n = r + 1, 0
        return out

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        """Token ids of ``b`` texts -> pooled, normalised ``f4[b, hidden]``.

        The texts' tokens are packed, without padding, into one ``[n_tokens, hidden]`` matrix for the
        per-token layers; attention runs per text over its own tokens, which is what the padded,
        masked computation gives (a masked key's weight is exactly 0 there)."""
        lens = np.fromiter((len(x) for x in ids), np.int64, len(ids))
        bounds = np.concatenate([[0], np.cumsum(lens)])
        tok = np.fromiter((t for x in ids for t in x), np.int64, int(bounds[-1]))
        pos = np.concatenate([np.arange(m) for m in lens.tolist()])
        H, D = self.heads, self.hidden // self.heads
        scale = np.float32(1.0 / math.sqrt(D))
        x = layer_norm(self.word[tok] + self.pos[pos] + self.type0, *self.emb_ln, self.eps)  # [n_tokens, hidden]
        ctx = np.empty_like(x)
        for qkv_w, qkv_b, o_w, o_b, ln1, i_w, i_b, f_w, f_b, ln2 in self.layers:
            qkv = (x @ qkv_w + qkv_b).reshape(-1, 3, H, D)
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                # [H, m, D] per text; 2-D matmuls (BLAS), much faster than NumPy's stacked matmul here
                q, k, v = (np.ascontiguousarray(qkv[a:b, j].transpose(1, 0, 2)) for j in range(3))
                for h in range(H):
                    s = (q[h] @ k[h].T) * scale  # [m, m]
                    s = np.exp(s - s.max(axis=-1, keepdims=True))
                    s /= s.sum(axis=-1, keepdims=True)
                    ctx[a:b, h * D: (h + 1) * D] = s @ v[h]
            x = layer_norm(x + (ctx @ o_w + o_b), *ln1, self.eps)
            x = layer_norm(x + (gelu(x @ i_w + i_b) @ f_w + f_b), *ln2, self.eps)
        pooled = np.add.reduceat(x, bounds[:-1], axis=0) / lens[:, None].astype(np.float32)  # mean pooling
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
