"""Shared fixtures. Seeds are fixed so every failure reproduces."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Tests run under --import-mode=importlib (test files in different folders may share a name),
# so helper modules next to tests (index_helpers.py, store_factory.py) are put on sys.path here.
for _d in sorted(p for p in Path(__file__).resolve().parent.rglob("*") if p.is_dir()):
    if _d.name != "__pycache__" and str(_d) not in sys.path:
        sys.path.append(str(_d))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def shared_dir():
    """The project's ../shared folder (tests only; the product never needs it)."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
