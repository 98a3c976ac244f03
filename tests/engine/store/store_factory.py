"""A seeded store for persistence tests; imported by test files and by saver subprocesses.

Kept free of pytest imports so that a subprocess starts fast.
"""

import numpy as np

from engine.store import ExperienceStore


def make_store(n=50, seed=0):
    rng = np.random.default_rng(seed)
    st = ExperienceStore()
    paths = [[f"ind{i % 3}", f"fac{i % 7}", f"dir {i} é"] for i in range(n)]
    st.add_paths(paths, created=np.arange(n, dtype=float))
    st.record_recall(np.arange(n), counts=np.full(n, 3))
    st.record_hit(np.arange(0, n, 2))
    st.update(rng.integers(0, n, 200), rng.normal(0, 0.02, (200, 3)))
    st.defer([1, 1, 2], [0, 1, 2], [0, 1, 2], [5, 6, 7], [0.5, -0.5, 1.0])
    return st
