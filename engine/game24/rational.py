"""Exact rationals for Game of 24: conversion, text form and int64 packing.

A Game-of-24 number is a :class:`fractions.Fraction`. Kernels hold the same
number as an int64 numerator and a positive int64 denominator, reduced.
Nothing here uses floating point to decide a value.
"""

from __future__ import annotations

import re
from fractions import Fraction
from numbers import Integral, Rational
from typing import Iterable

import numpy as np

from engine.errors import InputError

# Numerators and denominators handed to kernels stay below 2**62 in magnitude so
# that the kernels' overflow checks have room; larger values take the Python path.
INT64_SAFE = 2**62

_NUMBER_TEXT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*(?:/\s*([+-]?\d+(?:\.\d+)?))?\s*$")


def to_fraction(value, name: str = "number") -> Fraction:
    """Return ``value`` as an exact :class:`Fraction`.

    Accepts ints (Python or NumPy), Fractions, and text such as ``"13"``,
    ``"-2"``, ``"13/3"`` or ``"1.5"`` (decimals are read exactly). Floats are
    refused because they are rarely what the caller meant to be exact.
    """
    t = type(value)
    if t is Fraction:
        return value
    if t is int:
        return Fraction(value)
    if isinstance(value, bool):
        raise InputError(f"{name} must be an integer or a fraction, got bool {value!r}")
    if isinstance(value, (Integral, np.integer)):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(value.numerator, value.denominator)
    if isinstance(value, str):
        m = _NUMBER_TEXT.match(value)
        if m:
            num = Fraction(m.group(1))
            if m.group(2) is None:
                return num
            den = Fraction(m.group(2))
            if den == 0:
                raise InputError(f"{name} {value!r} has a zero denominator")
            return num / den
        raise InputError(f"{name} must be a number such as 13, -2 or 13/3, got {value!r}")
    raise InputError(
        f"{name} must be an int, a Fraction or numeric text, got {type(value).__name__} {value!r}"
    )


def to_fractions(values: Iterable, name: str = "numbers") -> tuple[Fraction, ...]:
    """Convert every element with :func:`to_fraction`; the error names the position."""
    if isinstance(values, (str, bytes)):
        raise InputError(f"{name} must be a sequence of numbers, got text {values!r}")
    try:
        items = list(values)
    except TypeError as exc:
        raise InputError(f"{name} must be a sequence of numbers, got {type(values).__name__}") from exc
    return tuple(to_fraction(v, f"{name}[{i}]") for i, v in enumerate(items))


def format_fraction(value: Fraction) -> str:
    """``13`` for integers, ``13/3`` or ``-1/2`` otherwise (the Tree-of-Thoughts style)."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def value_order(values: Iterable[Fraction]) -> tuple[Fraction, ...]:
    """The human-facing canonical form: the multiset sorted by value."""
    return tuple(sorted(Fraction(v) for v in values))


def fits_int64(values: Iterable[Fraction]) -> bool:
    """True when every numerator and denominator is below :data:`INT64_SAFE`."""
    return all(abs(v.numerator) < INT64_SAFE and v.denominator < INT64_SAFE for v in values)
