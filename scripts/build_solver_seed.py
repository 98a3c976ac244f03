"""Rewrite the shipped solver seed (engine/data/game24/solver_memo.npz) and print its sha256.

Run after a change to the solver kernel's search order or move encoding, then paste the digest
into ``engine.game24.solver.SEED_SHA256``; tests/kernels/test_solver_seed.py fails until both agree
with a fresh build::

    .venv/bin/python scripts/build_solver_seed.py
"""

import hashlib
import io

import numpy as np

from engine.game24.solver import SEED_PATH, domain_memo

if __name__ == "__main__":
    buf = io.BytesIO()
    np.savez_compressed(buf, **domain_memo().seed_arrays())
    SEED_PATH.write_bytes(buf.getvalue())
    print(f"{SEED_PATH}: {len(buf.getvalue())} bytes, sha256 {hashlib.sha256(buf.getvalue()).hexdigest()}")
