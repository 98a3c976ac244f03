"""Read Game-of-24 states straight out of CPython objects, in one compiled pass.

``read_states(states)`` turns a list or tuple of states (each a tuple or list of 1..4
``int`` or ``fractions.Fraction`` values) into padded ``(num i8[b, 4], den i8[b, 4],
size i8[b])`` rows without running the interpreter per number: the kernel follows the
object pointers itself (container -> items -> a Fraction's two slots -> the ints' digits).
Reading the same numbers with attribute loads costs 20-25 ns per attribute on CPython 3.11,
more than the whole canonical hash (benchmarks/results/game24_core.md).

Safety, in order:

* The object layout is never assumed. At import the module probes live objects through
  ``ctypes`` (type pointer, tuple and list item arrays, the Fraction's slots, the int digit
  format of CPython 3.11 or 3.12+) and then decodes a set of known values with the kernel
  itself (on first use); :func:`available` is True only when every probe agrees. Otherwise (another
  interpreter, a free-threaded build, a future layout) :func:`read_states` returns None and
  callers take their attribute-reading path.
* The kernel checks every object's type pointer for the exact types it decodes (``tuple``,
  ``list``, ``int``, ``Fraction``; ``bool`` and subclasses do not match) before reading
  anything else from it, and answers "not mine" (None) for any other object, any state
  outside 1..4 numbers, and any value at or beyond ``2**62`` in absolute value.
* It dereferences only pointers held by objects reachable from ``states``, which the
  caller keeps alive for the call, and runs with the GIL held (no ``nogil``), so no other
  thread can change a list while it is read.
"""

from __future__ import annotations

import ctypes
import sys
from fractions import Fraction

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

WIDTH = 4
LIMIT = 2**62  # |numerator| and denominator below this: the kernels' int64 range (engine.game24.rational.INT64_SAFE)


@intrinsic
def _load_i64(typingctx, addr):
    """The int64 stored at address ``addr``."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load(ptr)

    return types.int64(addr), codegen


@intrinsic
def _load_u32(typingctx, addr):
    """The uint32 stored at address ``addr``, widened to int64."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(32).as_pointer())
        return builder.zext(builder.load(ptr), ir.IntType(64))

    return types.int64(addr), codegen


# Layout vector (filled by _probe_layout): offsets in bytes and type addresses.
L_TYPE, L_VSIZE, L_TUPLE_ITEMS, L_LIST_ITEMS, L_FRAC_NUM, L_FRAC_DEN, L_INT_TAG, L_INT_DIGITS, \
    L_INT_MODE, T_TUPLE, T_LIST, T_INT, T_FRACTION = range(13)
MODE_311, MODE_312 = 0, 1  # int header: signed digit count (3.11) or lv_tag (3.12+)


@numba.njit(cache=True)
def _int_value(addr, lay):
    """(ok, value) of an exact ``int`` at ``addr`` with ``|value| < 2**62``."""
    tag = _load_i64(addr + lay[L_INT_TAG])
    if lay[L_INT_MODE] == MODE_311:
        n = tag if tag >= 0 else -tag
        neg = tag < 0
    else:
        n = tag >> 3
        neg = (tag & 3) == 2
    if n > 3:
        return False, 0
    base = addr + lay[L_INT_DIGITS]
    v = 0
    for i in range(n - 1, -1, -1):
        if v >= (1 << 32):  # the shift below would pass 2**62 (and could wrap int64)
            return False, 0
        v = (v << 30) | _load_u32(base + 4 * i)
    if v >= (1 << 62):
        return False, 0
    return True, -v if neg else v


@numba.njit(cache=True)
def _number(addr, lay):
    """(ok, numerator, denominator) of an exact int or Fraction at ``addr``."""
    t = _load_i64(addr + lay[L_TYPE])
    if t == lay[T_INT]:
        ok, v = _int_value(addr, lay)
        return ok, v, 1
    if t == lay[T_FRACTION]:
        pn = _load_i64(addr + lay[L_FRAC_NUM])
        pd = _load_i64(addr + lay[L_FRAC_DEN])
        if _load_i64(pn + lay[L_TYPE]) != lay[T_INT] or _load_i64(pd + lay[L_TYPE]) != lay[T_INT]:
            return False, 0, 1
        ok1, n = _int_value(pn, lay)
        ok2, d = _int_value(pd, lay)
        if ok1 and ok2 and d >= 1:  # a Fraction keeps its denominator positive; anything else is not ours
            return True, n, d
    return False, 0, 1


@numba.njit(cache=True)
def _read(outer, outer_is_list, b, lay, num, den, size):
    """Fill rows from the ``b`` states of container ``outer``; the first state it cannot read, or -1."""
    if outer_is_list:
        items = _load_i64(outer + lay[L_LIST_ITEMS])
    else:
        items = outer + lay[L_TUPLE_ITEMS]
    for r in range(b):
        s = _load_i64(items + 8 * r)
        t = _load_i64(s + lay[L_TYPE])
        if t == lay[T_TUPLE]:
            base = s + lay[L_TUPLE_ITEMS]
        elif t == lay[T_LIST]:
            base = _load_i64(s + lay[L_LIST_ITEMS])
        else:
            return r
        n = _load_i64(s + lay[L_VSIZE])
        if n < 1 or n > WIDTH:
            return r
        for c in range(n):
            ok, a, d = _number(_load_i64(base + 8 * c), lay)
            if not ok:
                return r
            num[r, c] = a
            den[r, c] = d
        for c in range(n, WIDTH):
            num[r, c] = 0
            den[r, c] = 1
        size[r] = n
    return -1


def _word(obj, offset: int) -> int:
    return ctypes.c_int64.from_address(id(obj) + offset).value


def _probe_layout() -> np.ndarray | None:
    """The layout vector of this interpreter, or None where a probe disagrees."""
    if sys.int_info.bits_per_digit != 30 or sys.int_info.sizeof_digit != 4 or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    hdr = object.__basicsize__
    lay = np.zeros(13, np.int64)
    lay[L_TYPE] = hdr - 8  # ob_type is the header's last word (after ob_refcnt)
    lay[L_VSIZE] = hdr
    lay[L_TUPLE_ITEMS] = tuple.__basicsize__
    lay[L_LIST_ITEMS] = hdr + 8
    lay[L_INT_TAG] = hdr
    lay[L_INT_DIGITS] = hdr + 8
    lay[L_INT_MODE] = MODE_311 if sys.version_info < (3, 12) else MODE_312
    lay[T_TUPLE], lay[T_LIST], lay[T_INT], lay[T_FRACTION] = id(tuple), id(list), id(int), id(Fraction)
    a, b = 1234567, 7654321
    f = Fraction(a, b)
    t = (a, f, b)
    lst = [f, a]
    words = [_word(f, o) for o in range(hdr, Fraction.__basicsize__, 8)]
    if id(f.numerator) not in words or id(f.denominator) not in words:
        return None
    lay[L_FRAC_NUM] = hdr + 8 * words.index(id(f.numerator))
    lay[L_FRAC_DEN] = hdr + 8 * words.index(id(f.denominator))
    checks = [
        (_word(t, int(lay[L_TYPE])), id(tuple)), (_word(lst, int(lay[L_TYPE])), id(list)),
        (_word(f, int(lay[L_TYPE])), id(Fraction)), (_word(a, int(lay[L_TYPE])), id(int)),
        (_word(t, int(lay[L_VSIZE])), 3), (_word(lst, int(lay[L_VSIZE])), 2),
        (_word(t, int(lay[L_TUPLE_ITEMS]) + 8), id(f)),
        (ctypes.c_int64.from_address(_word(lst, int(lay[L_LIST_ITEMS]))).value, id(f)),
    ]
    if any(got != want for got, want in checks):
        return None
    return lay


LAYOUT = _probe_layout()
# values the kernel must decode exactly (0, one digit, two, three, the limits, negatives), and
# values it must refuse (2**62 and beyond, bools); checked once at import
_GOOD = [0, 1, -1, 24, 2**30 - 1, 2**30, -(2**30), 2**45 + 17, 2**60 + 3, -(2**61) - 5, 2**62 - 1, -(2**62) + 1]
_BAD = [2**62, -(2**62), 2**63, 2**100, True]


def _self_test(lay: np.ndarray) -> bool:
    states = [(v,) for v in _GOOD] + [(Fraction(7, 3), Fraction(-5, 12), 4), [Fraction(2**61, 3), 1]]
    num = np.empty((len(states), WIDTH), np.int64)
    den = np.empty((len(states), WIDTH), np.int64)
    size = np.empty(len(states), np.int64)
    if _read(id(states), True, len(states), lay, num, den, size) != -1:
        return False
    got = [tuple(Fraction(int(n), int(d)) for n, d in zip(num[r, :k], den[r, :k])) for r, k in enumerate(size)]
    if got != [tuple(Fraction(v) for v in s) for s in states]:
        return False
    for v in _BAD:
        bad = ((v,),)
        if _read(id(bad), False, 1, lay, num, den, size) != 0:
            return False
    return True


_AVAILABLE: bool | None = None


def available() -> bool:
    """Whether this interpreter's layout was verified (probed at import, self-tested on first use,
    which compiles the kernel: a cache load after the first run)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = LAYOUT is not None and _self_test(LAYOUT)
    return _AVAILABLE


def read_states(states) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Padded ``(num i8[b, 4], den i8[b, 4], size i8[b])`` of a non-empty list or tuple of
    states of exact ints and Fractions, or None (anything else, or this interpreter's layout
    not verified): the caller then reads the numbers with attribute loads.

    Numerators and denominators are as the objects hold them (a Fraction is already reduced,
    denominator > 0); every absolute value is below ``2**62``.
    """
    if type(states) not in (list, tuple) or not states or not available():
        return None
    b = len(states)
    num = np.empty((b, WIDTH), np.int64)
    den = np.empty((b, WIDTH), np.int64)
    size = np.empty(b, np.int64)
    if _read(id(states), type(states) is list, b, LAYOUT, num, den, size) != -1:
        return None
    return num, den, size
