"""Shared fixtures. Seeds are fixed so every failure reproduces."""

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def shared_dir():
    """The project's ../shared folder (tests only; the product never needs it)."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
