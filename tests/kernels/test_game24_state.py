"""Canonical Game-of-24 states and 64-bit keys against a pure-Python Fraction reference."""

import random
from fractions import Fraction

import numpy as np
import pytest

from kernels import game24_state as kst

MASK = (1 << 64) - 1


# ---------------------------------------------------------------- independent reference


def ref_canonical(values):
    """Reduced (num, den>0) pairs sorted lexicographically, from Python Fractions."""
    return sorted((Fraction(v).numerator, Fraction(v).denominator) for v in values)


def ref_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_key(values):
    """The documented key: a multiply-xorshift fold of n and the canonical pairs, SplitMix64-finalised."""
    pairs = ref_canonical(values)
    h = (0x9E3779B97F4A7C15 * (len(pairs) + 1)) & MASK
    for num, den in pairs:
        x = ((num & MASK) * 0xBF58476D1CE4E5B9 & MASK) ^ (den & MASK)
        h = ((h ^ x) * 0x94D049BB133111EB) & MASK
        h ^= h >> 32
    h = ref_mix(h)
    return h - (1 << 64) if h >= 1 << 63 else h


def run_kernel(rows):
    """rows: list of lists of (num, den) pairs, possibly unreduced or with negative den."""
    b = len(rows)
    num = np.zeros((b, 4), np.int64)
    den = np.ones((b, 4), np.int64)
    size = np.zeros(b, np.int64)
    for r, row in enumerate(rows):
        for c, (a, d) in enumerate(row):
            num[r, c], den[r, c] = a, d
        size[r] = len(row)
    on, od, ok = np.empty_like(num), np.empty_like(den), np.empty(b, np.int64)
    num0, den0 = num.copy(), den.copy()
    kst.canonical_keys(num, den, size, on, od, ok)
    assert np.array_equal(num, num0) and np.array_equal(den, den0), "inputs must not be modified"
    return on, od, size, ok


def random_row(rng, n, big=False):
    hi = 10**9 if big else 40
    row = []
    for _ in range(n):
        d = rng.randint(1, hi)
        a = rng.randint(-hi, hi)
        k = rng.randint(1, 5)  # unreduced form
        s = rng.choice((1, -1))  # negative denominators are normalised
        row.append((a * k * s, d * k * s))
    return row


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("big", [False, True])
def test_canonical_rows_and_keys_match_reference(n, big):
    rng = random.Random(1000 * n + big)
    rows = [random_row(rng, n, big) for _ in range(300)]
    on, od, size, keys = run_kernel(rows)
    for r, row in enumerate(rows):
        values = [Fraction(a, d) for a, d in row]
        want = ref_canonical(values)
        got = [(int(on[r, c]), int(od[r, c])) for c in range(n)]
        assert got == want
        assert all(on[r, c] == 0 and od[r, c] == 1 for c in range(n, 4)), "padding must be 0/1"
        assert int(keys[r]) == ref_key(values)


def test_equal_states_in_any_order_and_form_share_key():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 4)
        base = [Fraction(rng.randint(-30, 30), rng.randint(1, 12)) for _ in range(n)]
        variants = []
        for _ in range(5):
            perm = base[:]
            rng.shuffle(perm)
            row = []
            for v in perm:
                k = rng.randint(1, 7) * rng.choice((1, -1))
                row.append((v.numerator * k, v.denominator * k))
            variants.append(row)
        on, od, _, keys = run_kernel(variants)
        assert len(set(keys.tolist())) == 1
        assert all(np.array_equal(on[0], on[i]) and np.array_equal(od[0], od[i]) for i in range(5))
        # matches the reference built from hash(tuple(sorted(Fraction ...)))
        ref_hashes = {hash(tuple(sorted(Fraction(a, d) for a, d in row))) for row in variants}
        assert len(ref_hashes) == 1


def test_distinct_states_get_distinct_keys():
    rng = random.Random(11)
    states = set()
    while len(states) < 20000:
        n = rng.randint(1, 4)
        states.add(tuple(sorted(Fraction(rng.randint(-13, 13), rng.randint(1, 13)) for _ in range(n))))
    rows = [[(v.numerator, v.denominator) for v in s] for s in states]
    _, _, _, keys = run_kernel(rows)
    assert len(set(keys.tolist())) == len(states)


def test_size_and_multiplicity_change_the_key():
    _, _, _, keys = run_kernel([[(24, 1)], [(24, 1), (24, 1)], [(0, 1), (24, 1)], [(24, 1), (0, 1), (0, 1)]])
    assert len(set(keys.tolist())) == 4


def test_zero_and_negative_values_normalise():
    on, od, _, keys = run_kernel([[(0, -5), (3, -6)], [(-1, 2), (0, 1)]])
    assert on[0, :2].tolist() == [-1, 0] and od[0, :2].tolist() == [2, 1]
    assert keys[0] == keys[1]


def test_empty_batch():
    num = np.zeros((0, 4), np.int64)
    out = np.zeros((0, 4), np.int64)
    keys = np.zeros(0, np.int64)
    kst.canonical_keys(num, num.copy() + 1, np.zeros(0, np.int64), out, out.copy(), keys)
    assert keys.shape == (0,)


def _table(cap=16):
    return (
        np.zeros(cap, np.uint8),
        np.zeros(cap, np.int64),
        np.zeros((cap, 4), np.int64),
        np.ones((cap, 4), np.int64),
        np.zeros(cap, np.int64),
    )


def test_table_never_merges_states_on_a_key_collision():
    t = _table()
    a_num = np.array([1, 2, 3, 4], np.int64)
    b_num = np.array([1, 2, 3, 5], np.int64)
    ones = np.ones(4, np.int64)
    forced_key = 12345  # pretend both states hash to the same key
    s = kst.table_find(*t, forced_key, a_num, ones, 4)
    assert s < 0
    kst.table_put(*t, -(s + 1), forced_key, a_num, ones, 4)
    # same key, different canonical row: not found, and goes to another slot
    sb = kst.table_find(*t, forced_key, b_num, ones, 4)
    assert sb < 0 and -(sb + 1) != -(s + 1)
    kst.table_put(*t, -(sb + 1), forced_key, b_num, ones, 4)
    assert kst.table_find(*t, forced_key, a_num, ones, 4) == -(s + 1)
    assert kst.table_find(*t, forced_key, b_num, ones, 4) == -(sb + 1)
    # same key and same first three numbers but a smaller size: also different
    assert kst.table_find(*t, forced_key, a_num, ones, 3) < 0


def test_public_state_key_and_canonical_state():
    from engine.errors import InputError
    from engine.game24 import canonical_state, state_key

    assert canonical_state([Fraction(26, 6), 4]) == (Fraction(4), Fraction(13, 3))
    assert state_key([Fraction(26, 6), 4]) == state_key(["4", "13/3"]) == ref_key([4, Fraction(13, 3)])
    assert state_key([1, 2, 3, 4]) != state_key([1, 2, 3])
    with pytest.raises(InputError, match="1 to 4 numbers"):
        state_key([1, 2, 3, 4, 5])
    with pytest.raises(InputError, match="1 to 4 numbers"):
        canonical_state([])
    with pytest.raises(InputError, match="int64 key range"):
        state_key([2**70])
    with pytest.raises(InputError, match=r"numbers\[1\]"):
        state_key([1, "abc"])
    with pytest.raises(InputError, match="float"):
        canonical_state([1.5, 2])
