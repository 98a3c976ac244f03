"""Game-of-24 states as exact rationals: reduction, canonical form, 64-bit keys, hash table.

A state is a multiset of 1..4 rationals held as padded rows ``num i8[4]``,
``den i8[4]`` and a size ``n`` (padding is 0/1). Its canonical form is the
reduced pairs (denominator > 0) sorted lexicographically by (numerator,
denominator); ToE "Details in Game of 24": "each state is represented by the
canonicalized multiset of its remaining numbers". The 64-bit key is a SplitMix64
chain over ``n`` and the canonical pairs. Keys only index tables: every lookup
compares the canonical rows too, so a key collision never merges two states.

Magnitudes: callers keep |numerator| and denominator below 2**62 (the engine
checks this at the boundary); arithmetic that could leave that range is done in
:mod:`kernels.game24_solver` with explicit overflow checks.
"""

import numba
import numpy as np

WIDTH = 4  # most numbers in a state (a Game-of-24 puzzle)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_U32 = 1 << 32
_S32 = np.uint64(32)
_P31 = 1 << 31
_P32 = 1 << 32
_PACK_PAD = np.int64(0x7FFFFFFFFFFFFFFF)  # sorts after every packed pair
_SMALL = 256
_GCD_SMALL = np.gcd.outer(np.arange(_SMALL), np.arange(_SMALL)).astype(np.uint8)  # a compile-time constant


@numba.njit(cache=True)
def gcd(a, b):
    """Greatest common divisor of two int64 (sign ignored); gcd(0, 0) == 0.

    Operands below 256 (the usual Game-of-24 case) read a 64 KiB table;
    operands below 2**32 run Euclid on uint32, whose division is cheaper than int64's.
    """
    a = abs(a)
    b = abs(b)
    if a < _SMALL and b < _SMALL:
        return np.int64(_GCD_SMALL[a, b])
    if a < _U32 and b < _U32:
        x = np.uint32(a)
        y = np.uint32(b)
        while y != 0:
            x, y = y, x % y
        return np.int64(x)
    while b != 0:
        a, b = b, a % b
    return a


@numba.njit(cache=True)
def mix64(z):
    """SplitMix64 finaliser on a uint64 (Steele, Lea, Flood 2014)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True)
def canonicalize_row(num, den, n):
    """Reduce and sort one state in place.

    num, den: i8[>= n]; den != 0. After the call den > 0, gcd(|num|, den) == 1
    (0 is 0/1) and the first n pairs ascend by (num, den).
    """
    for k in range(n):
        a = num[k]
        b = den[k]
        if b < 0:
            a = -a
            b = -b
        g = gcd(a, b)
        if g > 1:
            a //= g
            b //= g
        if a == 0:
            b = 1
        num[k] = a
        den[k] = b
    sort_row(num, den, n)


@numba.njit(cache=True)
def sort_row(num, den, n):
    """Sort the first n (already reduced) pairs ascending by (num, den), in place (n <= 4)."""
    for k in range(1, n):
        a = num[k]
        b = den[k]
        m = k - 1
        while m >= 0 and (num[m] > a or (num[m] == a and den[m] > b)):
            num[m + 1] = num[m]
            den[m + 1] = den[m]
            m -= 1
        num[m + 1] = a
        den[m + 1] = b


@numba.njit(cache=True)
def _absorb(h, a, d):
    """Fold one canonical pair (a, d) into the running uint64 state h."""
    x = (np.uint64(a) * _M1) ^ np.uint64(d)
    h = (h ^ x) * _M2
    return h ^ (h >> _S32)


@numba.njit(cache=True)
def state_key(num, den, n):
    """64-bit key (returned as int64) of a state already in canonical form.

    num, den: i8[>= n] canonical (see :func:`canonicalize_row`). The key is
    ``mix64(fold(golden * (n + 1), pairs))`` with one multiply-xorshift per pair
    and a SplitMix64 finaliser; keys only index tables (see the module doc).
    """
    h = _GOLDEN * np.uint64(n + 1)
    for k in range(n):
        h = _absorb(h, num[k], den[k])
    return np.int64(mix64(h))


@numba.njit(cache=True)
def _cswap(k, i, j):
    x = k[i]
    y = k[j]
    k[i] = min(x, y)
    k[j] = max(x, y)


@numba.njit(cache=True)
def canonical_keys(num, den, size, out_num, out_den, out_key):
    """Canonical forms and keys of a batch of states.

    num, den: i8[b, w] padded states, w >= 4 (den != 0 on used columns); size:
    i8[b] in 1..4. out_num, out_den: i8[b, w] receive the canonical rows
    (padding 0/1); out_key: i8[b] receives the keys (same as :func:`state_key`).
    Inputs are not modified. Rows whose values fit in 31 bits are sorted as
    packed ``num * 2**32 + den`` words by a 5-comparator network (branch-free
    min/max); others by insertion sort on the pairs.
    """
    b = size.shape[0]
    w = num.shape[1]
    packed = np.empty(4, dtype=np.int64)
    for r in range(b):
        n = size[r]
        small = True
        for c in range(n):
            a = num[r, c]
            d = den[r, c]
            sg = (d >> 63) | 1  # -1 if d < 0 else 1
            a = a * sg
            d = d * sg
            g = gcd(a, d)
            if g > 1:
                a //= g
                d //= g
            if a == 0:
                d = 1
            if abs(a) >= _P31 or d >= _P31:
                small = False
            out_num[r, c] = a
            out_den[r, c] = d
            packed[c] = a * _P32 + d
        if small:
            for c in range(n, 4):
                packed[c] = _PACK_PAD
            _cswap(packed, 0, 1)
            _cswap(packed, 2, 3)
            _cswap(packed, 0, 2)
            _cswap(packed, 1, 3)
            _cswap(packed, 1, 2)
            for c in range(n):
                out_num[r, c] = packed[c] >> 32  # arithmetic shift: floor, exact for a * 2**32 + d
                out_den[r, c] = packed[c] & 0xFFFFFFFF
        else:
            sort_row(out_num[r], out_den[r], n)
        for c in range(n, w):
            out_num[r, c] = 0
            out_den[r, c] = 1
        h = _GOLDEN * np.uint64(n + 1)
        for c in range(n):
            h = _absorb(h, out_num[r, c], out_den[r, c])
        out_key[r] = np.int64(mix64(h))


@numba.njit(cache=True)
def pack_rows(flat_num, flat_den, size, out_num, out_den):
    """Scatter states given as consecutive values into padded rows.

    flat_num, flat_den: i8[sum(size)], state r's values at ``[offset_r, offset_r + size[r])``;
    size: i8[b] in 1..4. out_num, out_den: i8[b, w >= 4] receive the rows, padded with 0/1.
    """
    k = 0
    for r in range(size.shape[0]):
        n = size[r]
        for c in range(n):
            out_num[r, c] = flat_num[k]
            out_den[r, c] = flat_den[k]
            k += 1
        for c in range(n, out_num.shape[1]):
            out_num[r, c] = 0
            out_den[r, c] = 1


@numba.njit(cache=True)
def rows_equal(t_num, t_den, t_size, s, num, den, n):
    """True when table row s holds the canonical state (num, den, n)."""
    if t_size[s] != n:
        return False
    for c in range(n):
        if t_num[s, c] != num[c] or t_den[s, c] != den[c]:
            return False
    return True


@numba.njit(cache=True)
def table_find(t_used, t_key, t_num, t_den, t_size, key, num, den, n):
    """Find a canonical state in an open-addressing table (linear probing).

    t_used: u1[cap] (cap a power of two), t_key: i8[cap], t_num, t_den: i8[cap, 4],
    t_size: i8[cap]. Returns the slot (>= 0) holding the state, or ``-(s + 1)``
    where s is the empty slot it would go to. Equality is decided on the
    canonical row, never on the key alone. The table must have an empty slot.
    """
    mask = t_key.shape[0] - 1
    s = np.int64(np.uint64(key) & np.uint64(mask))
    while True:
        if t_used[s] == 0:
            return -(s + 1)
        if t_key[s] == key and rows_equal(t_num, t_den, t_size, s, num, den, n):
            return s
        s = (s + 1) & mask


@numba.njit(cache=True)
def table_put(t_used, t_key, t_num, t_den, t_size, s, key, num, den, n):
    """Write a canonical state into empty slot s (from :func:`table_find`)."""
    t_used[s] = 1
    t_key[s] = key
    t_size[s] = n
    for c in range(t_num.shape[1]):
        if c < n:
            t_num[s, c] = num[c]
            t_den[s, c] = den[c]
        else:
            t_num[s, c] = 0
            t_den[s, c] = 1


@numba.njit(cache=True)
def value_sort_rows(num, den, size, out_num, out_den):
    """Copy canonical rows sorted by value (the human-facing order), exactly.

    num, den: i8[b, w] reduced rows (den > 0); size: i8[b]. Compares a/b < c/d
    as a*d < c*b, exact while |numerator| and denominator are < 2**31; returns
    False (out_* then incomplete) if a row has a larger value, so the caller can
    sort it with Python Fractions instead.
    """
    b = size.shape[0]
    for r in range(b):
        n = size[r]
        for c in range(num.shape[1]):
            if c < n and (abs(num[r, c]) >= _U32 // 2 or den[r, c] >= _U32 // 2):
                return False
            out_num[r, c] = num[r, c]
            out_den[r, c] = den[r, c]
        for k in range(1, n):
            a = out_num[r, k]
            d = out_den[r, k]
            m = k - 1
            while m >= 0 and out_num[r, m] * d > a * out_den[r, m]:
                out_num[r, m + 1] = out_num[r, m]
                out_den[r, m + 1] = out_den[r, m]
                m -= 1
            out_num[r, m + 1] = a
            out_den[r, m + 1] = d
    return True
