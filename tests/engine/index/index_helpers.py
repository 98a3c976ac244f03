"""Helpers for index tests: low-rank vectors, brute-force top-k, recall."""

import numpy as np


def lowrank(rng, n, dim, rank=None, decay=0.8):
    """``f4[n, dim]`` rows drawn with singular values ~ i**-decay (like sentence embeddings)."""
    rank = rank or dim
    scales = (np.arange(1, rank + 1, dtype=np.float64) ** -decay).astype(np.float32)
    z = rng.standard_normal((n, rank)).astype(np.float32) * scales
    basis = np.linalg.qr(rng.standard_normal((dim, rank)))[0].T.astype(np.float32)  # [rank, dim]
    return z @ basis + 0.02 * rng.standard_normal((n, dim)).astype(np.float32)


def brute_topk(x, q, k, space="cosine"):
    """Exact top-k ids of q against rows of x (obviously correct reference)."""
    if space == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        s = q @ x.T
    elif space == "ip":
        s = q @ x.T
    else:
        s = -((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(s, order, axis=1)


def recall(found, truth):
    k = truth.shape[1]
    return float(np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / k for f, t in zip(found, truth)]))
