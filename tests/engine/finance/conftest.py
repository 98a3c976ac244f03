"""Small seeded markets and runs for the finance tests (kept small: the default test set stays fast)."""

import numpy as np
import pytest

from engine.embed import embedder_from_table
from engine.finance.synthetic import SyntheticConfig, generate_market


@pytest.fixture(scope="session")
def embedder():
    return embedder_from_table(None)


@pytest.fixture(scope="session")
def small_market():
    return generate_market(SyntheticConfig(n_industries=4, n_days=60, events_per_day=2.0, seed=3))


@pytest.fixture
def fixed_ic_data():
    rng = np.random.default_rng(7)
    n, t, h = 6, 50, 3
    alpha = rng.normal(0, 0.05, size=(n, t, h))
    s = 0.3 * alpha / 0.05 + rng.normal(0, 1, size=(n, t, h))
    s[rng.random((n, t, h)) < 0.15] = np.nan
    alpha[:, -5:, 2] = np.nan
    return s, alpha
