"""Node index benchmark: NodeIndex (hnswlib) vs NumPy brute force, faiss Flat and faiss HNSW.

One run per size measures, for every method, on the same vectors and queries:
build throughput (vectors/s), single-query latency p50/p99 (one query per
call, the ToE retrieval pattern; every method single-threaded here, NumPy's BLAS
limited to one thread through threadpoolctl), batched throughput (all queries in one call)
and recall@8 against exact brute force. Speed is reported as ratios against
NumPy brute force measured in the same run.

Data: NOT uniform random. Rows are topic centres plus noise, both with a
power-law spectrum (singular values ~ i**-DECAY, DECAY fitted on real
all-MiniLM-L6-v2 embeddings of generated sentences), randomly rotated and
L2-normalised; queries are fresh draws from the same distribution.

    python -m pytest benchmarks/test_index.py -s --benchmark-disable-gc      # 1e4 and 1e5, dim 384
    TOE_BENCH_1M=1 python -m pytest benchmarks/test_index.py -s -k 1000000  # adds 1e6 (dim TOE_BENCH_1M_DIM=64)

Environment: TOE_BENCH_DIM (default 384), TOE_BENCH_QUERIES (default 500),
TOE_BENCH_1M=1 (opt-in 10^6 case), TOE_BENCH_1M_DIM (default 64),
TOE_BENCH_FAISS_HNSW=0 to skip the faiss HNSW build (it doubles build time),
TOE_BENCH_DECAY (default 0.5), TOE_BENCH_SIZES (comma list, overrides the sizes).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.index import IndexConfig, NodeIndex
from engine.markdown import table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import record  # noqa: E402  (benchmarks/_results.py)

DIM = int(os.environ.get("TOE_BENCH_DIM", "384"))
DIM_1M = int(os.environ.get("TOE_BENCH_1M_DIM", "64"))
N_QUERIES = int(os.environ.get("TOE_BENCH_QUERIES", "500"))
# singular-value decay exponent. Fitted on MiniLM embeddings of the test's template sentences: 1.08
# (steep: templated text is nearly low-rank, an easy case); 0.5 is flatter, i.e. harder for a graph index.
DECAY = float(os.environ.get("TOE_BENCH_DECAY", "0.5"))
K = 8
SIZES = [10_000, 100_000] + ([1_000_000] if os.environ.get("TOE_BENCH_1M") == "1" else [])
if os.environ.get("TOE_BENCH_SIZES"):  # e.g. "2000,5000" for a smoke run
    SIZES = [int(v) for v in os.environ["TOE_BENCH_SIZES"].split(",")]
FAISS_HNSW = os.environ.get("TOE_BENCH_FAISS_HNSW", "1") == "1"


def realistic_vectors(n: int, dim: int, seed: int, n_topics: int | None = None) -> np.ndarray:
    """``f4[n, dim]`` unit rows: topic centre + noise, power-law spectrum, random rotation."""
    rng = np.random.default_rng(seed)
    rot_rng = np.random.default_rng(1234)  # same rotation and topics for base and queries
    rot = np.linalg.qr(rot_rng.standard_normal((dim, dim)))[0].astype(np.float32)
    spectrum = (np.arange(1, dim + 1, dtype=np.float32) ** -DECAY).astype(np.float32)
    n_topics = n_topics or 2000
    centres = rot_rng.standard_normal((n_topics, dim)).astype(np.float32) * spectrum
    out = np.empty((n, dim), dtype=np.float32)
    step = 50_000
    for s in range(0, n, step):
        m = min(step, n - s)
        topic = rng.integers(0, n_topics, m)
        z = centres[topic] + 0.8 * rng.standard_normal((m, dim)).astype(np.float32) * spectrum
        z = z @ rot
        out[s : s + m] = z / np.linalg.norm(z, axis=1, keepdims=True)
    return out


def exact_topk(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k ids by inner product, in chunks (the recall reference)."""
    out = np.empty((q.shape[0], k), dtype=np.int64)
    for s in range(0, q.shape[0], 100):
        sims = q[s : s + 100] @ x.T
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sims, part, axis=1)
        out[s : s + 100] = np.take_along_axis(part, np.argsort(-top, axis=1), axis=1)
    return out


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth))
    return hits / truth.size


def latencies(fn, queries: np.ndarray, warmup: int = 20) -> np.ndarray:
    for q in queries[:warmup]:
        fn(q)
    out = np.empty(queries.shape[0])
    for i, q in enumerate(queries):
        t = time.perf_counter()
        fn(q)
        out[i] = time.perf_counter() - t
    return out


def numpy_single(x):
    def run(q):
        s = x @ q
        p = np.argpartition(-s, K - 1)[:K]
        return p[np.argsort(-s[p])]

    return run


def numpy_batch(x, q):
    return exact_topk(x, q, K)


def _one_blas_thread():
    """Limit OpenBLAS/MKL to one thread (threadpoolctl when installed, else a no-op)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def _row(name, build_s, n, lat, batch_s, nq, rec, ref_p50, ref_qps):
    p50, p99 = np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3
    qps = nq / batch_s
    return {
        "method": name,
        "build_vec_per_s": (n / build_s) if build_s else float("nan"),
        "p50_ms": p50,
        "p99_ms": p99,
        "batch_qps": qps,
        "recall@8": rec,
        "p50_speedup_vs_numpy": ref_p50 / p50,
        "batch_speedup_vs_numpy": qps / ref_qps,
    }


@pytest.mark.parametrize("n", SIZES, ids=[str(s) for s in SIZES])
def test_index(benchmark, n):
    dim = DIM_1M if n >= 1_000_000 else DIM
    x = realistic_vectors(n, dim, seed=n)
    queries = realistic_vectors(N_QUERIES, dim, seed=n + 1)
    truth = exact_topk(x, queries, K)
    rows = []
    n_single_bf = min(N_QUERIES, 200 if n <= 100_000 else 50)

    # NumPy brute force (the reference); one BLAS thread per single query, like every other method
    with _one_blas_thread():
        lat = latencies(numpy_single(x), queries[:n_single_bf], warmup=5)
    t = time.perf_counter()
    numpy_batch(x, queries)
    bf_batch = time.perf_counter() - t
    ref_p50, ref_qps = np.percentile(lat, 50) * 1e3, N_QUERIES / bf_batch
    rows.append(_row("numpy brute force", 0.0, n, lat, bf_batch, N_QUERIES, 1.0, ref_p50, ref_qps))

    # NodeIndex with the default IndexConfig
    cfg = IndexConfig()
    t = time.perf_counter()
    ix = NodeIndex(dim, cfg, capacity=n)
    ix.add(np.arange(n, dtype=np.int64), x)
    build = time.perf_counter() - t
    lat = latencies(lambda q: ix.search(q, K), queries)
    t = time.perf_counter()
    ids, _ = ix.search(queries, K)
    batch = time.perf_counter() - t
    rows.append(_row(f"NodeIndex (M={cfg.M}, efC={cfg.ef_construction}, ef={cfg.ef_search})", build, n, lat, batch,
                     N_QUERIES, recall_at(ids, truth), ref_p50, ref_qps))
    # raw hnswlib on the same graph: the wrapper's overhead
    h = ix._hnsw
    lat = latencies(lambda q: h.knn_query(q, k=K, num_threads=1), queries)
    t = time.perf_counter()
    lab, _ = h.knn_query(queries, k=K)
    batch = time.perf_counter() - t
    rows.append(_row("raw hnswlib knn_query (same graph)", 0.0, n, lat, batch, N_QUERIES,
                     recall_at(lab.astype(np.int64), truth), ref_p50, ref_qps))
    # restricted search: a random 10% of the nodes (a large subtree)
    within = np.sort(np.random.default_rng(7).choice(n, n // 10, replace=False))
    truth_w = within[exact_topk(x[within], queries, K)]
    lat = latencies(lambda q: ix.search(q, K, within=within), queries)
    t = time.perf_counter()
    ids, _ = ix.search(queries, K, within=within)
    batch = time.perf_counter() - t
    assert np.isin(ids, within).all()
    rows.append(_row("NodeIndex restricted to 10% of nodes", 0.0, n, lat, batch, N_QUERIES,
                     recall_at(ids, truth_w), ref_p50, ref_qps))

    try:
        import faiss
    except ImportError:  # pragma: no cover
        faiss = None
    if faiss is not None:
        threads = faiss.omp_get_max_threads()
        flat = faiss.IndexFlatIP(dim)
        t = time.perf_counter()
        flat.add(x)
        build = time.perf_counter() - t
        faiss.omp_set_num_threads(1)  # one query per call: OpenMP threads only add spin-waits
        lat = latencies(lambda q: flat.search(q[None, :], K), queries[:n_single_bf], warmup=5)
        faiss.omp_set_num_threads(threads)
        t = time.perf_counter()
        _, lab = flat.search(queries, K)
        batch = time.perf_counter() - t
        rows.append(_row("faiss IndexFlatIP", build, n, lat, batch, N_QUERIES, recall_at(lab, truth), ref_p50, ref_qps))
        del flat
        if FAISS_HNSW:
            fh = faiss.IndexHNSWFlat(dim, cfg.M, faiss.METRIC_INNER_PRODUCT)
            fh.hnsw.efConstruction = cfg.ef_construction
            t = time.perf_counter()
            fh.add(x)
            build = time.perf_counter() - t
            fh.hnsw.efSearch = cfg.ef_search
            faiss.omp_set_num_threads(1)
            lat = latencies(lambda q: fh.search(q[None, :], K), queries)
            faiss.omp_set_num_threads(threads)
            t = time.perf_counter()
            _, lab = fh.search(queries, K)
            batch = time.perf_counter() - t
            rows.append(_row(f"faiss IndexHNSWFlat (M={cfg.M}, efC={cfg.ef_construction}, ef={cfg.ef_search})",
                             build, n, lat, batch, N_QUERIES, recall_at(lab, truth), ref_p50, ref_qps))
            del fh

    # ef sweep on our index: the recall/latency trade-off
    sweep = []
    for ef in (16, 32, 64, 128, 256):
        ix.set_ef(ef)
        lat = latencies(lambda q: ix.search(q, K), queries[:200])
        ids, _ = ix.search(queries, K)
        sweep.append((ef, np.percentile(lat, 50) * 1e3, recall_at(ids, truth)))
    ix.set_ef(cfg.ef_search)

    # pytest-benchmark's own timing: one NodeIndex single query (cycling the query set)
    it = iter(range(10**9))
    benchmark.pedantic(lambda: ix.search(queries[next(it) % N_QUERIES], K), rounds=300, warmup_rounds=20)

    print(f"\n== n={n:,} dim={dim} queries={N_QUERIES} k={K} (ref single-query p50 over {n_single_bf} queries)")
    print("\n".join(table(["method", "build vec/s", "p50 ms", "p99 ms", "batch q/s", "recall@8", "p50 x numpy",
                           "batch x numpy"],
                          [[r["method"], f"{r['build_vec_per_s']:,.0f}", f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}",
                            f"{r['batch_qps']:,.0f}", f"{r['recall@8']:.4f}", f"{r['p50_speedup_vs_numpy']:.1f}",
                            f"{r['batch_speedup_vs_numpy']:.1f}"] for r in rows])))
    print("ef sweep (NodeIndex): " + "; ".join(f"ef={e}: p50 {p:.3f} ms, recall@8 {r:.4f}" for e, p, r in sweep))
    benchmark.extra_info.update({"n": n, "dim": dim, "rows": rows, "ef_sweep": sweep})
    out = [{"method": r["method"], "build_vec_per_s": None if r["build_vec_per_s"] != r["build_vec_per_s"] else r["build_vec_per_s"],
            "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "batch_q_per_s": r["batch_qps"], "recall": r["recall@8"],
            "p50_x_numpy": r["p50_speedup_vs_numpy"], "batch_x_numpy": r["batch_speedup_vs_numpy"]} for r in rows]
    record("index", f"n={n},dim={dim}", {"n": n, "dim": dim, "queries": N_QUERIES, "k": K, "rows": out,
                                         "ef_sweep": [[int(e), float(p), float(r)] for e, p, r in sweep]})

    ours = rows[1]
    assert ours["recall@8"] >= 0.9, ours  # guards against a broken index, not the target
