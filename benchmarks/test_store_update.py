"""Reliability updates at scale: 10**7 experiences, 3 horizons, 10**6 random updates, one run.

Everything is measured in the same process on the same store, JIT warm-up
excluded; the formula and scatter-add timings are interleaved (R rounds, each
round runs every variant once) and reported as medians, so load from other
processes hits all variants alike:

* ``formula``: the ToE eq. (9)/(A6) kernel (:func:`kernels.reliability.formula_update`), unchecked;
* ``reference_aligned_prefetch``: the same arithmetic written independently
  (benchmarks/_store_reference.py) on the same 64-byte-aligned block, prefetch ahead, split loop: the tight limit ``store.update`` is held against;
* ``store.update``: the same through :meth:`ExperienceStore.update` (boundary
  validation of the batch included);
* ``scatter_add``: a Numba random scatter-add ``Q[e] += v`` over the same rows
  of the same block (the practical limit for random access named by the issue);
  ``scatter_add_prefetch`` adds the kernel's software prefetch (a tighter limit);
* ``python_dict``: a plain-Python dict-of-rows loop (math.log), measured on a
  subset (``N_PY`` rows, ``B_PY`` updates) and scaled per update;
* ``pandas``: a pandas path table indexed by eid, ``.loc`` row lookup and
  write-back per update, subset (``B_PD`` updates) scaled per update.

Memory: the store's allocated bytes plus tracemalloc's peak during an update
batch against the raw column bytes: every declared column's used rows at its
logical dtype (experience: Q 3 x f8, hit i8, recall i8, path 3 x i8, created
f8; node: the nine int64 columns of ``engine.store.columns.NODE_COLUMNS`` and
the text bytes). The overhead is the block padding, capacity slack and the
(parent, key) hash table. ``peak_over_raw_persisted`` compares with only what
a checkpoint stores (node parent, depth, key, text).

Command (figures in benchmarks/results/store.json, rendered into benchmarks/RESULTS.md)::

    python -m pytest benchmarks/test_store_update.py --benchmark-only \\
        --benchmark-timer=time.process_time -s

``TOE_BENCH_STORE_N`` overrides the number of experiences (default 10**7).
"""

from __future__ import annotations

import gc
import json
import math
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numba
import numpy as np
import pytest

from engine.store import ExperienceStore
from engine.store import columns as C
from kernels import reliability as KR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import record  # noqa: E402  (benchmarks/_results.py)
from _store_reference import reference_update  # noqa: E402

N = int(os.environ.get("TOE_BENCH_STORE_N", 10**7))
B = 10**6
H = 3
ROUNDS = 15
N_PY, B_PY = 200_000, 100_000
N_PD, B_PD = 100_000, 2_000
ETA, Q0 = 10.0, 1.0
TARGETS = {"vs_scatter_add": 0.8, "vs_python": 40.0, "vs_pandas": 1000.0, "memory": 1.5}


def _timer(benchmark):
    return getattr(benchmark, "_timer", time.perf_counter)


def build_store(n: int) -> ExperienceStore:
    """A depth-3 tree: 30 industries x 100 factors x n/3000 directions, built in chunks."""
    st = ExperienceStore(capacity=n, node_capacity=n + 30 * 100 + 30 + 1)
    chunk = 10**6
    for start in range(0, n, chunk):
        i = np.arange(start, min(n, start + chunk), dtype=np.uint64)
        keys = np.stack([i % np.uint64(30), np.uint64(1000) + (i // np.uint64(30)) % np.uint64(100),
                         np.uint64(10**6) + i], axis=1)
        st.add_key_paths(keys, created=np.zeros(len(i)))
    rng = np.random.default_rng(7)
    hits = rng.integers(0, 5000, n)  # realistic spread of hit counts, beyond the lookup table too
    st._block[:n, H] = hits  # hit column of the packed block (kernels.reliability layout)
    st._block[:n, H + 1] = hits + rng.integers(0, 100, n)  # recall >= hit
    return st


def python_dict_per_update(rng) -> float:
    rows = {e: [1.0, 1.0, 1.0, float(e % 5000)] for e in range(N_PY)}
    eids = rng.integers(0, N_PY, B_PY).tolist()
    rewards = rng.uniform(-0.01, 0.01, (B_PY, H)).tolist()
    t0 = time.process_time()
    for e, r in zip(eids, rewards):
        row = rows[e]
        damp = ETA / (1.0 + math.log(1.0 + row[3]))
        for j in range(H):
            q = row[j]
            d = (q - Q0) / Q0
            x = q + damp * (1.0 - d * d) * r[j]
            row[j] = 0.0 if x < 0.0 else (2.0 * Q0 if x > 2.0 * Q0 else x)
    return (time.process_time() - t0) / B_PY


def pandas_per_update(rng) -> float:
    pd = pytest.importorskip("pandas")
    qcols = ["q_h10", "q_h20", "q_h40"]
    df = pd.DataFrame({
        "industry": [f"ind{i % 30}" for i in range(N_PD)],
        "factor": [f"fac{i % 100}" for i in range(N_PD)],
        "analysis_direction": [f"dir{i}" for i in range(N_PD)],
        **{c: np.ones(N_PD) for c in qcols},
        "recall": np.full(N_PD, 10), "hit": np.arange(N_PD) % 5000,
    }, index=pd.Index(np.arange(N_PD), name="eid"))
    eids = rng.integers(0, N_PD, B_PD)
    rewards = rng.uniform(-0.01, 0.01, (B_PD, H))
    t0 = time.process_time()
    for e, r in zip(eids, rewards):
        q = df.loc[e, qcols].to_numpy(dtype=float)
        damp = ETA / (1.0 + math.log(1.0 + df.at[e, "hit"]))
        d = (q - Q0) / Q0
        df.loc[e, qcols] = np.clip(q + damp * (1.0 - d * d) * r, 0.0, 2.0 * Q0)
    return (time.process_time() - t0) / B_PD


@numba.njit(cache=True)
def read_batch(eids, bits):
    """Sum of every word of the batch: a sequential read of the bytes the store's checks read."""
    acc = 0
    for i in range(eids.shape[0]):
        acc += eids[i]
    for i in range(bits.shape[0]):
        acc ^= bits[i]
    return acc


def bytes_per_experience(st: ExperienceStore) -> dict[str, float]:
    """Allocated bytes of each part of the store divided by the experiences it holds.

    ``raw_q_and_hits``: Q at f8 per horizon plus one hit count at i8, the floor the issue measures
    against; every other part is what the store keeps beside it (see docs/store.md).
    """
    n = st.n_experiences
    parts = {"block (Q, hit, recall, padding)": st._block.nbytes}
    parts |= {f"experience column {k}": a.nbytes for k, a in st._exp.items()}
    parts["node columns"] = sum(a.nbytes for a in st._nodes.values())
    parts["node texts"] = st._text.nbytes
    parts["(parent, key) hash table"] = st._pk_table.nbytes
    parts["key table"] = st._key_table.nbytes
    out = {k: v / n for k, v in parts.items()}
    out["total"] = sum(parts.values()) / n
    out["raw_q_and_hits"] = st.n_horizons * 8 + 8
    out["total_over_raw_q_and_hits"] = out["total"] / out["raw_q_and_hits"]
    return out


@pytest.fixture(scope="module")
def big_store():
    t0 = time.perf_counter()
    st = build_store(N)
    build_s = time.perf_counter() - t0
    return st, build_s


def test_store_update(benchmark, big_store):
    st, build_s = big_store
    timer = _timer(benchmark)
    rng = np.random.default_rng(1)
    eids = rng.integers(0, N, B).astype(np.int64)
    rewards = rng.uniform(-0.01, 0.01, (B, H))
    zeros = np.zeros((B, H))
    blk = st._block
    args = (ETA, Q0, 0.0, 2.0 * Q0, st._lut)
    rbits = rewards.reshape(-1).view(np.int64)
    read_batch(eids[:64], rbits[:64])

    # warm-up: JIT (or cache load) of every variant, excluded from timing
    for fn in (KR.scatter_add, KR.scatter_add_prefetch):
        fn(blk, eids[:64], zeros[:64])
    KR.formula_update(blk, eids[:64], KR.ALL_HORIZONS, rewards[:64], H, *args)
    st.update(eids[:64], rewards[:64])

    # the independent reference runs on the store's own block (64-byte aligned, asserted), so every
    # variant meets the same rows in the same cache state (all take the same eids, one after another)
    assert blk.ctypes.data % 64 == 0 and blk.shape[1] * 8 % 64 == 0
    reference_update(blk, eids[:64], zeros[:64], *args)

    variants = {
        "reference_aligned_prefetch": lambda: reference_update(blk, eids, rewards, *args),
        "scatter_add": lambda: KR.scatter_add(blk, eids, zeros),
        "scatter_add_prefetch": lambda: KR.scatter_add_prefetch(blk, eids, zeros),
        "formula": lambda: KR.formula_update(blk, eids, KR.ALL_HORIZONS, rewards, H, *args),
        "store.update": lambda: st.update(eids, rewards),
        # the floor of any check that reads the batch once before the first write (a failed batch
        # changes nothing): one sequential pass over the eids and the rewards' bits, no test
        "batch_read": lambda: read_batch(eids, rbits),
    }
    times = {k: [] for k in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            t0 = timer()
            fn()
            times[name].append(timer() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}

    # the pytest-benchmark figure: the formula kernel alone
    benchmark.pedantic(variants["formula"], rounds=ROUNDS, iterations=1, warmup_rounds=0)
    formula_s = min(med["formula"], benchmark.stats.stats.median)

    # references on subsets, per update
    py_s = python_dict_per_update(np.random.default_rng(2))
    pd_s = pandas_per_update(np.random.default_rng(3))

    # the reference computes what the kernel computes: both on copies of the first 10**5 rows, one batch
    m = min(N, 10**5)
    small_e = np.random.default_rng(6).integers(0, m, B)
    a, b_ = blk[:m].copy(), C.aligned_empty(m, blk.shape[1])
    b_[:] = blk[:m]
    KR.formula_update(a, small_e, KR.ALL_HORIZONS, rewards, H, *args)
    reference_update(b_, small_e, rewards, *args)
    np.testing.assert_array_equal(a, b_)
    del a, b_
    gc.collect()

    # memory: tracemalloc peak during an update batch (store + inputs + temporaries)
    nb = st.nbytes()
    raw = nb["raw_experiences"] + nb["raw_nodes"]  # every declared column, logical dtypes
    allocated = nb["experiences"] + nb["nodes"] + nb["tables"]
    e2 = np.random.default_rng(4).integers(0, N, B)
    r2 = np.random.default_rng(5).uniform(-0.01, 0.01, (B, H))
    gc.collect()
    tracemalloc.start()
    st.update(e2, r2)
    _, peak_update = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the store and the batch's inputs existed before tracing began
    peak_total = allocated + e2.nbytes + r2.nbytes + peak_update
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    per_update = formula_s / B
    res = {
        "n_experiences": N, "n_nodes": st.n_nodes, "updates": B, "horizons": H, "rounds": ROUNDS,
        "timer": getattr(timer, "__name__", str(timer)),
        "build_s_wall": build_s,
        "updates_per_s": {k: B / v for k, v in med.items()} | {"python_dict": 1 / py_s, "pandas": 1 / pd_s},
        "ratios": {
            "vs_scatter_add": med["scatter_add"] / formula_s,
            "vs_scatter_add_prefetch": med["scatter_add_prefetch"] / formula_s,
            "store.update_vs_scatter_add": med["scatter_add"] / med["store.update"],
            "store.update_vs_kernel": med["formula"] / med["store.update"],
            "store.update_vs_reference": med["reference_aligned_prefetch"] / med["store.update"],
            "kernel_vs_reference": med["reference_aligned_prefetch"] / med["formula"],
            "checks_s": med["store.update"] - med["formula"],
            "batch_read_s": med["batch_read"],
            "vs_python": py_s / per_update,
            "vs_pandas": pd_s / per_update,
        },
        "memory": {
            "raw_column_bytes": raw,
            "raw_persisted_bytes": nb["raw_persisted"],
            "raw_experience_bytes": nb["raw_experiences"],
            "allocated_bytes": allocated,
            "allocated_experience_bytes": nb["experiences"],
            "tables_bytes": nb["tables"],
            "update_peak_traced_bytes": peak_update,
            "peak_over_raw": peak_total / raw,
            "peak_over_raw_persisted": peak_total / nb["raw_persisted"],
            "experiences_allocated_over_raw": nb["experiences"] / nb["raw_experiences"],
            "process_maxrss_bytes": maxrss,
            "bytes_per_experience": bytes_per_experience(st),
        },
        "targets": TARGETS,
        "subsets": {"python_rows": N_PY, "python_updates": B_PY, "pandas_rows": N_PD, "pandas_updates": B_PD},
        "prefetch_intrinsic": __import__("kernels.prefetch", fromlist=["x"]).HAVE_PREFETCH,
    }
    benchmark.extra_info.update(res)
    if N == 10**7:  # only the full-size run replaces the recorded figures (benchmarks/results/store.json)
        record("store", f"n={N}", res)
    print("\n" + json.dumps(res, indent=1))

    # sanity: the kernel really updated within bounds
    q = st.reliability
    assert q[eids[:1000]].min() >= 0.0 and q[eids[:1000]].max() <= 2.0
    assert res["ratios"]["vs_scatter_add"] > 0.1
