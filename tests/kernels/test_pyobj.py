"""kernels.pyobj reads states out of CPython objects exactly as attribute loads would, and
refuses (None) everything it does not decode, so callers fall back to their checked path."""

import platform
from fractions import Fraction

import numpy as np
import pytest

from engine.game24 import solver as S
from engine.game24.solver import state_key, state_keys
from kernels import pyobj as P

pytestmark = pytest.mark.skipif(platform.python_implementation() != "CPython", reason="reads CPython objects")


def _random_states(n, seed=7):
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n):
        vals = []
        for _ in range(int(rng.integers(1, 5))):
            a = int(rng.integers(-(2**61), 2**61)) if rng.random() < 0.1 else int(rng.integers(-60, 61))
            d = int(rng.integers(1, 13))
            vals.append(Fraction(a, d) if rng.random() < 0.6 else a)
        out.append(tuple(vals) if r % 3 else list(vals))
    return out


def _by_attributes(states):
    num = np.zeros((len(states), 4), np.int64)
    den = np.ones((len(states), 4), np.int64)
    for r, s in enumerate(states):
        for c, v in enumerate(s):
            num[r, c], den[r, c] = Fraction(v).numerator, Fraction(v).denominator
    return num, den, np.array([len(s) for s in states], np.int64)


def test_layout_verified_on_this_interpreter():
    assert P.available(), "the probe or the self-test disagreed on CPython: the fast door is off"


@pytest.mark.parametrize("outer", [list, tuple])
def test_reads_what_attribute_loads_read(outer):
    states = _random_states(3000)
    got = P.read_states(outer(states))
    want = _by_attributes(states)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class MyInt(int):
    pass


class MyFraction(Fraction):
    pass


@pytest.mark.parametrize("bad", [
    [(1, True)], [(1, 2.5)], [(MyInt(3),)], [(MyFraction(1, 2),)], [(2**62,)], [(-(2**62),)], [(2**63 + 5,)],
    [(Fraction(2**62, 3),)], [(Fraction(1, 2**62),)], [()], [(1, 2, 3, 4, 5)], [5], ["1234"],
    [np.array([1, 2, 3, 4])], [(np.int64(4),)], [(1, 2), (3, "4")], [(1,), None],
])
def test_refuses_what_it_does_not_decode(bad):
    assert P.read_states(bad) is None
    assert P.read_states(tuple(bad)) is None


def test_non_sequences_and_empty_are_not_read():
    assert P.read_states([]) is None
    assert P.read_states(iter([(1, 2)])) is None
    assert P.read_states(np.array([[1, 2]])) is None


def test_state_keys_same_with_the_fast_door_off(monkeypatch):
    states = _random_states(400)
    on = state_keys(states).tolist()
    monkeypatch.setattr(P, "_AVAILABLE", False)
    assert S._pack_fast(states) is not None  # the attribute-loading door
    assert state_keys(states).tolist() == on == [state_key(s) for s in states]
