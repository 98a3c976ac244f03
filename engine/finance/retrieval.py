"""What Pipe+ToE's retrieval did, and whether the embedder can make it fire at all.

* :func:`retrieval_figures`: from a method's usage counters (summed over its episodes
  and seeds, ``summary.json`` ``meta.usage``) the **retrieval rate** (share of the
  (news, industry) items with at least one candidate left after the leaf cut
  ``cosine >= lam``), **candidates per item**, and the **share of updates from
  retrieval** (experiences a prediction used, each giving one delayed update per
  horizon, eq. (7), that the reranker selected among retrieved candidates) against
  those from the proposer (a new direction, or an existing one whose text the
  proposer wrote).
* :func:`channel_cosines`: on synthetic data, the cosine of every retained (news,
  industry) item with the direction of its own channel and with the other channels'
  directions (as the industry's analyst writes them,
  :func:`engine.finance.channels.direction_text`), under the run's embedder: the
  distributions that say whether ``lam`` can separate them.
"""

from __future__ import annotations

import numpy as np

# per-episode counters of Pipe+ToE (engine.finance.methods.STAT_KEYS)
RETRIEVAL_KEYS = ("items", "retrieved_items", "candidates", "updates_retrieved", "updates_proposed")


def retrieval_figures(usage: dict | None) -> dict | None:
    """``{"rate", "candidates_per_item", "from_retrieval", "items", ...}`` from a method's usage counters;
    None when the method counts no retrieval (not a ToE method, or a run from before the counters)."""
    if not usage or not usage.get("items"):
        return None
    items = float(usage["items"])
    upd = float(usage.get("updates_retrieved", 0)) + float(usage.get("updates_proposed", 0))
    return {
        "items": int(items),
        "rate": float(usage.get("retrieved_items", 0)) / items,
        "candidates_per_item": float(usage.get("candidates", 0)) / items,
        "from_retrieval": float(usage.get("updates_retrieved", 0)) / upd if upd else None,
        "updates": int(upd),
    }


def format_retrieval(usage: dict | None) -> tuple[str, str, str]:
    """Table cells: retrieval rate, candidates per item, updates from retrieval / from the proposer ("-" if none)."""
    f = retrieval_figures(usage)
    if f is None:
        return "-", "-", "-"
    share = "-" if f["from_retrieval"] is None else f"{100 * f['from_retrieval']:.1f}% / {100 * (1 - f['from_retrieval']):.1f}%"
    return f"{100 * f['rate']:.1f}%", f"{f['candidates_per_item']:.2f}", share


def _dist(x: np.ndarray, lam: float) -> dict:
    if not x.size:
        return {"n": 0}
    return {"n": int(x.size), "median": float(np.median(x)), "p5": float(np.percentile(x, 5)),
            "p95": float(np.percentile(x, 95)), "min": float(x.min()), "max": float(x.max()),
            "share_at_or_above_lam": float(np.mean(x >= lam))}


def channel_cosines(market, pairs, news_text, embedder, lam: float) -> dict | None:
    """Own-channel vs other-channel cosines of the retained ``pairs`` ((news k, industry i), each once)
    under ``embedder``; None without ground-truth channels (real data)."""
    from engine.finance.channels import CHANNELS, direction_text

    if market.truth is None or market.news.channel is None or not pairs:
        return None
    pairs = sorted(set(pairs))
    news = np.asarray([k for k, _ in pairs], np.int64)
    ind = np.asarray([i for _, i in pairs], np.int64)
    x = embedder.embed([news_text(int(k)) for k in news.tolist()])
    d = embedder.embed([direction_text(c, name) for name in market.industries for c in CHANNELS])
    d = d.reshape(len(market.industries), len(CHANNELS), -1)
    sims = np.einsum("nd,ncd->nc", x, d[ind])  # [pairs, channels]
    own = np.asarray(market.news.channel, np.int64)[news]
    mine = np.zeros(sims.shape, bool)
    mine[np.arange(len(pairs)), own] = True
    return {"embedder": getattr(embedder, "name", type(embedder).__name__), "lam": float(lam),
            "own": _dist(sims[mine], lam), "other": _dist(sims[~mine], lam)}
