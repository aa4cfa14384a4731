"""Java's arithmetic for JMS selectors: binary numeric promotion (JLS §5.6.2).

JMS 1.1 §3.8.1.2 says a selector's arithmetic follows Java's numeric
promotion, as ActiveMQ's and DropboxMQ's selectors do:

- integer with integer is an integer: a 32-bit ``int`` when both sides are
  ``int``-sized (:class:`~chute.message.Byte`, :class:`~chute.message.Short`,
  :class:`~chute.message.Int`), else a 64-bit ``long`` (a plain Python ``int``
  is a long, as in :mod:`chute.message`). The result wraps around as Java's
  does, and ``/`` truncates toward zero: ``7 / 2`` is 3, ``-7 / 2`` is -3.
  An integer divided by zero is None (NULL: Java throws).
- anything with a float is a double; a double divided by zero is an infinity
  or NaN, as in Java.

Pure: values in, values out; None where Java has no answer.
"""

from __future__ import annotations

import math
from typing import Any, Final

from chute.message import Byte, Int, Long, Short

__all__ = ["INT_MAX", "INT_MIN", "LONG_MAX", "LONG_MIN", "java_arithmetic", "java_negation"]

INT_MIN: Final = -(1 << 31)
INT_MAX: Final = (1 << 31) - 1
LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1
_INT_MASK: Final = (1 << 32) - 1
_LONG_MASK: Final = (1 << 64) - 1
_INT_TYPES: Final = frozenset({Byte, Short, Int})
"""Integer types Java promotes to ``int`` in arithmetic; any other integer is a ``long``."""


def _java_integer(value: int, wide: bool) -> Int | Long:
    """``value`` wrapped to Java's 32-bit ``int`` (or 64-bit ``long`` when ``wide``)."""
    # int.__new__: the value is in range by construction, so skip the range check
    if wide:
        if not LONG_MIN <= value <= LONG_MAX:
            value = ((value - LONG_MIN) & _LONG_MASK) + LONG_MIN
        return int.__new__(Long, value)
    if not INT_MIN <= value <= INT_MAX:
        value = ((value - INT_MIN) & _INT_MASK) + INT_MIN
    return int.__new__(Int, value)


def java_arithmetic(op: str, a: Any, b: Any) -> Any:
    """``a op b`` with Java's binary numeric promotion (JLS §5.6.2), as a JMS selector.

    Two integers stay an integer: an ``int`` unless either is a ``long`` (a
    plain ``int`` counts as one, as in :mod:`chute.message`), wrapping around as
    Java does, and ``/`` truncates toward zero; an integer divided by zero is
    None (Java throws). Anything with a float is a double (``/`` by zero gives
    an infinity or NaN, as in Java). None when an integer is outside a long's
    range or too large for a double.
    """
    if isinstance(a, int) and isinstance(b, int):
        if not (LONG_MIN <= a <= LONG_MAX and LONG_MIN <= b <= LONG_MAX):
            return None
        wide = type(a) not in _INT_TYPES or type(b) not in _INT_TYPES
        if op == "+":
            return _java_integer(a + b, wide)
        if op == "-":
            return _java_integer(a - b, wide)
        if op == "*":
            return _java_integer(a * b, wide)
        if b == 0:
            return None
        quotient = abs(a) // abs(b)
        return _java_integer(quotient if (a < 0) == (b < 0) else -quotient, wide)
    try:
        x, y = float(a), float(b)
    except OverflowError:
        return None
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if y == 0.0:
        if math.isnan(x) or x == 0.0:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def java_negation(value: Any) -> Any:
    """``-value`` in Java: an integer keeps its width and wraps (``-MIN == MIN``)."""
    if isinstance(value, int):
        if not LONG_MIN <= value <= LONG_MAX:
            return None
        return _java_integer(-value, type(value) not in _INT_TYPES)
    return -float(value)
