"""Finance ToE's per-news-item retrieval: the exact product vs the node index, under one prefix.

``PipeToE._candidates`` on a real ExperienceStore holding ``n`` directions under one (industry,
factor) prefix, queried with fresh news vectors, once per news item (the episode's pattern):

* brute force: the shipped exact path (``toe.index_min = 0``): the prefix's direction texts, their
  vectors from the embedder's cache (warm, large enough to hold them all: the best case), one
  product and the k1 / lam rule;
* node index: the same call with the prefix above ``toe.index_min`` (engine/finance/toe_index.py:
  hnswlib graph, re-ranked exactly by the mirror vectors);
* for reference, the product alone over the prefix's matrix held in memory (NumPy, 1 BLAS thread).

Reported per size: p50 / p99 latency per call (single-threaded, after a warm-up), recall@8 of the
node index's k1 = 8 candidates against the brute force's (lam = -1: no leaf cut, so the whole
first level is compared). Vectors: 384-d (MiniLM width), topic centres plus noise with a
power-law spectrum (benchmarks/test_index.py's ``realistic_vectors``), not uniform random.

Also measured: the crossover (the smallest prefix where the node index beats brute force, which
sets ``toe.index_min``), and, at 10^5 rows, the choice of one index per prefix over one shared
index searched with hnswlib's ``filter`` callable.

    TOE_BENCH_RETRIEVAL=1 .venv/bin/python -m pytest benchmarks/test_finance_retrieval.py -s -q -p no:cacheprovider

Heavy (the 10^6 index: minutes of build, ~8 GB of memory): marked ``heavy`` and opt-in with
``TOE_BENCH_RETRIEVAL=1``; ``TOE_BENCH_RETRIEVAL_SIZES`` (comma list, default 1000,100000,1000000)
and ``TOE_BENCH_CROSSOVER`` (comma list) override the sizes for a smoke run; ``TOE_BENCH_LOAD_WAIT``
(seconds, default 180) is the pause between load checks.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import record  # noqa: E402  (benchmarks/_results.py)
from test_index import _one_blas_thread, realistic_vectors  # noqa: E402

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(os.environ.get("TOE_BENCH_RETRIEVAL") != "1",
                                 reason="opt-in: TOE_BENCH_RETRIEVAL=1 (builds a 10^6 index)")]

DIM = 384
K1 = 8
SIZES = [int(v) for v in os.environ.get("TOE_BENCH_RETRIEVAL_SIZES", "1000,100000,1000000").split(",")]
CROSSOVER = [int(v) for v in os.environ.get("TOE_BENCH_CROSSOVER", "16,32,64,128,256,512,1024,2048").split(",")]
N_QUERIES = 300
EF_SWEEP = (32, 64, 128, 256)


def _embedder(x: np.ndarray):
    """A CachedEmbedder whose backend returns the benchmark's vectors for its texts ``d<row>``."""
    from engine.embed import CachedEmbedder

    class Table(CachedEmbedder):
        name = "table"

        def _embed_batch(self, texts):
            return x[[int(t[1:]) for t in texts]]

    return Table(dim=x.shape[1], batch_size=4096, cache_size=x.shape[0] + 10)


def _method(x: np.ndarray):
    """A PipeToE whose store holds ``len(x)`` directions under one prefix; returns (method, view, fnode)."""
    from engine.finance.config import ProtocolConfig, SamplingConfig, ToEConfig
    from engine.finance.methods import StreamContext
    from engine.finance.synthetic import SyntheticConfig, generate_market
    from engine.finance.toe import PipeToE, _FastView
    from engine.store import ExperienceStore

    market = generate_market(SyntheticConfig(n_industries=2, n_days=40, seed=0))
    ctx = StreamContext(market, ProtocolConfig(horizons=market.horizons), SamplingConfig(), 0, _embedder(x))
    m = PipeToE(ctx, [35], ToEConfig(k1=K1, lam=-1.0, index_min=0))
    n = x.shape[0]
    ind = market.industries[0]
    step = 200_000
    for s in range(0, n, step):
        rows = range(s, min(n, s + step))
        m.store.add_paths([[ind, "Macroeconomy", f"d{r}"] for r in rows],
                          keys=[[1, 2, 10 + r] for r in rows], created=np.zeros(len(rows)))
    view = _FastView(ExperienceStore.from_snapshot(m.store.snapshot()), m._text_cache, m._dir_cache)
    fnode = int(m.store.paths[0, 1])
    return m, view, fnode


def _switch(m, on: bool, threads: int = 1):
    """The method's node index: off (toe.index_min = 0: brute force) or on for every prefix size."""
    from dataclasses import replace

    from engine.finance.config import ToEConfig
    from engine.finance.toe_index import prefix_index

    ix = prefix_index(ToEConfig(k1=K1, index_min=1 if on else 0, index_ef=m.cfg.index_ef))
    ix.config = replace(ix.config, num_threads=threads)  # the benchmark builds on 2 threads; a run on 1
    return ix


def _lat(fn, queries, warmup=5) -> np.ndarray:
    for q in queries[:warmup]:
        fn(q)
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        t = time.perf_counter()
        fn(q)
        out[i] = time.perf_counter() - t
    return out


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


_WAITED = []


def _wait_for_quiet(limit=3.0, tries=2, pause=float(os.environ.get("TOE_BENCH_LOAD_WAIT", "180"))):
    """The issue's rule: with load > 3, wait a few minutes and retry, at most twice, then measure anyway
    (once per session: the load is recorded with every measurement)."""
    if _WAITED:
        return _load()
    _WAITED.append(True)
    for _ in range(tries):
        if os.getloadavg()[0] <= limit:
            break
        time.sleep(pause)
    return _load()


def _compare(n: int, n_bf: int, nq: int = N_QUERIES) -> dict:
    from engine.embed import l2_normalise

    x = realistic_vectors(n, DIM, seed=n)
    qs = realistic_vectors(nq, DIM, seed=n + 1)
    m, view, fnode = _method(x)
    off, on = _switch(m, False), _switch(m, True, threads=2)
    m.node_index = off
    m._candidates(view, fnode, qs[0])  # warms the embedder's cache with every direction
    m.node_index = on
    t = time.perf_counter()
    m._candidates(view, fnode, qs[0])  # builds the prefix's index (the lazy first sync)
    build_s = time.perf_counter() - t
    load = _wait_for_quiet()
    with _one_blas_thread():
        m.node_index = off
        lat_bf = _lat(lambda q: m._candidates(view, fnode, q), qs[:n_bf], warmup=2)
        m.node_index = on
        lat_ix = _lat(lambda q: m._candidates(view, fnode, q), qs)
        e = l2_normalise(x)  # the embedder's vectors: the brute force's rule on them, matrix held in memory
        rank = np.arange(n)

        def product(q):  # the brute-force rule without the texts: top k1 (ties: older first), creation order
            s = e @ q
            return np.sort(np.lexsort((rank, -s))[:K1])

        lat_np = _lat(product, qs[:n_bf], warmup=2)
        truth = [set(product(q).tolist()) for q in qs]
        hits = sum(len(set(m._candidates(view, fnode, q).tolist()) & t) for q, t in zip(qs, truth))
        ix = on.index(fnode)
        sweep = []  # the query beam's recall / latency trade-off on the same graph (toe.index_ef)
        for ef in EF_SWEEP:
            ix.set_ef(ef)
            lat = _lat(lambda q: m._candidates(view, fnode, q), qs)
            rec = sum(len(set(m._candidates(view, fnode, q).tolist()) & t) for q, t in zip(qs, truth)) / (nq * K1)
            sweep.append({"ef": ef, "p50_ms": float(np.percentile(lat, 50) * 1e3),
                          "p99_ms": float(np.percentile(lat, 99) * 1e3), "recall@8": rec})
        ix.set_ef(on.config.ef_search)
    return {"n": n, "dim": DIM, "k1": K1, "queries_index": nq, "queries_brute_force": n_bf,
            "index_build_s": build_s, "index_threads": 2, "M": ix.config.M, "ef_construction": ix.config.ef_construction,
            "ef_search": ix._ef, "fetch": on.fetch, "load_before_timing": load, "load_after": _load(),
            "brute_force": {"p50_ms": float(np.percentile(lat_bf, 50) * 1e3), "p99_ms": float(np.percentile(lat_bf, 99) * 1e3)},
            "product_only": {"p50_ms": float(np.percentile(lat_np, 50) * 1e3), "p99_ms": float(np.percentile(lat_np, 99) * 1e3)},
            "node_index": {"p50_ms": float(np.percentile(lat_ix, 50) * 1e3), "p99_ms": float(np.percentile(lat_ix, 99) * 1e3),
                           "recall@8": hits / (nq * K1)}, "ef_sweep": sweep}


def test_crossover():
    """p50 of brute force and node index per prefix size; the crossover sets toe.index_min."""
    rows = []
    for n in CROSSOVER:
        r = _compare(n, n_bf=200, nq=200)
        rows.append({"n": n, "brute_force_p50_ms": r["brute_force"]["p50_ms"],
                     "node_index_p50_ms": r["node_index"]["p50_ms"], "recall@8": r["node_index"]["recall@8"],
                     "product_only_p50_ms": r["product_only"]["p50_ms"], "load": r["load_after"]})
        print(rows[-1])
    faster = [r["n"] for r in rows if r["node_index_p50_ms"] < r["brute_force_p50_ms"]]
    record("finance_retrieval", "crossover", {"rows": rows, "first_faster": faster[0] if faster else None})


def test_filter_vs_prefix_index():
    """One shared index + hnswlib filter callable vs NodeIndex.search(within=) vs one index per prefix,
    for a prefix holding 10% of 10^5 directions."""
    from engine.index import IndexConfig, NodeIndex

    n, frac = 100_000, 0.1
    x = realistic_vectors(n, DIM, seed=n)
    qs = realistic_vectors(N_QUERIES, DIM, seed=n + 1)
    member = np.zeros(n, bool)
    member[np.random.default_rng(7).choice(n, int(n * frac), replace=False)] = True
    rows_p = np.flatnonzero(member)
    cfg = IndexConfig(num_threads=2, exact_max=0)
    t = time.perf_counter()
    shared = NodeIndex(DIM, cfg, capacity=n)
    shared.add(np.arange(n), x)
    t_shared = time.perf_counter() - t
    t = time.perf_counter()
    own = NodeIndex(DIM, cfg, capacity=rows_p.size)
    own.add(rows_p, x[rows_p])
    t_own = time.perf_counter() - t
    truth = [set(rows_p[np.argsort(-(x[rows_p] @ q), kind="stable")[:K1]].tolist()) for q in qs]
    h = shared._hnsw
    ways = {
        "one shared index, hnswlib filter callable": lambda q: h.knn_query(q, k=K1, num_threads=1,
                                                                          filter=member.__getitem__)[0][0],
        "one shared index, NodeIndex.search(within=prefix rows)": lambda q: shared.search(q, K1, within=rows_p)[0],
        "one index per prefix (NodeIndex.search)": lambda q: own.search(q, K1)[0],
    }
    load = _wait_for_quiet()
    out = []
    for name, fn in ways.items():
        lat = _lat(fn, qs)
        rec = sum(len(set(np.asarray(fn(q)).tolist()) & tr) for q, tr in zip(qs, truth)) / (len(qs) * K1)
        out.append({"way": name, "p50_ms": float(np.percentile(lat, 50) * 1e3),
                    "p99_ms": float(np.percentile(lat, 99) * 1e3), "recall@8": rec})
        print(out[-1])
    record("finance_retrieval", "filter-vs-prefix,n=100000", {"n": n, "prefix_rows": int(rows_p.size), "ways": out,
                                                              "build_shared_s": t_shared, "build_prefix_s": t_own,
                                                              "load_before_timing": load, "load_after": _load()})


@pytest.mark.parametrize("n", SIZES, ids=[str(s) for s in SIZES])
def test_retrieval(n):
    r = _compare(n, n_bf=200 if n <= 10_000 else 50 if n <= 100_000 else 10)
    print(r)
    record("finance_retrieval", f"n={n},dim={DIM}", r)
    assert r["node_index"]["recall@8"] >= 0.9, r  # guards against a broken index, not the target
