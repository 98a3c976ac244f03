"""An independent reference for the store's update kernel (benchmarks/test_store_update.py).

The same arithmetic as ToE eq. (9)/(A6) (``kernels.reliability.formula_update``) written
separately, for the same packed 64-byte-aligned ``f8[n, 8]`` rows (each row one cache line),
with a software prefetch PREFETCH updates ahead, reading and writing each row through a 1-D
view of it. The damping comes from the same lookup table below its size and from ``log`` above
it. No checks. Written to be the tight limit; measured, the shipped kernel is faster than it
(benchmarks/results/store.md), so it bounds the store's checked path from below, not above.
"""

from __future__ import annotations

import math

import numba

from kernels.prefetch import prefetch_row

PREFETCH = 32  # updates ahead, as the kernel


@numba.njit(cache=True)
def reference_update(block, eids, rewards, eta, q0, q_min, q_max, lut):
    b = eids.shape[0]
    h = rewards.shape[1]
    m = lut.shape[0]
    for i in range(b):
        if i + PREFETCH < b:
            prefetch_row(block, eids[i + PREFETCH])
        e = eids[i]
        row = block[e]
        n = int(row[h])
        damp = eta * (lut[n] if n < m else 1.0 / (1.0 + math.log(1.0 + n)))
        for j in range(h):
            q = row[j]
            d = (q - q0) / q0
            x = q + damp * (1.0 - d * d) * rewards[i, j]
            if x < q_min:
                x = q_min
            elif x > q_max:
                x = q_max
            row[j] = x
