"""Seeded index test data with realistic structure (low rank, decaying spectrum)."""

import numpy as np
import pytest
from index_helpers import lowrank


@pytest.fixture
def data(rng):
    x = lowrank(rng, 3000, 32)
    q = x[rng.integers(0, 3000, 50)] + 0.05 * rng.standard_normal((50, 32)).astype(np.float32)
    return x, q
