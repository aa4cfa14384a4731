"""``LIKE`` patterns compiled once into a predicate (JMS 1.1 §3.8.1.2: ``%`` is any
run of characters, ``_`` exactly one, ``ESCAPE`` makes either literal).

Pure and linear: see :func:`like_matcher` for how a pattern avoids bad backtracking.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["like_matcher"]


def like_matcher(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """A predicate for ``LIKE pattern ESCAPE escape``: ``%`` is any run, ``_`` one character.

    Simple shapes become string methods (``abc``, ``abc%``, ``%abc``, ``a%c``,
    ``%abc%``). Anything else becomes one regex, built so that it cannot
    backtrack badly: with the pattern split at ``%`` into fixed-length segments
    S0 % S1 % ... % Sk, the middle segments are matched at their leftmost
    occurrence inside atomic groups, ``S0(?>.*?S1)...(?>.*?Sk-1).*Sk``. Taking
    the leftmost occurrence never loses a match, so nothing needs undoing, and
    the cost stays linear in the text per segment.
    """
    segments: list[list[str | None]] = [[]]  # each: literal characters, None for '_'
    chars = iter(pattern)
    for ch in chars:
        if ch == escape:
            segments[-1].append(next(chars, ch))  # the parser rejects a trailing escape
        elif ch == "%":
            segments.append([])
        elif ch == "_":
            segments[-1].append(None)
        else:
            segments[-1].append(ch)
    if all(None not in segment for segment in segments):
        literals = ["".join(c for c in segment if c is not None) for segment in segments]
        if len(literals) == 1:
            return literals[0].__eq__
        if len(literals) == 2:
            head, tail = literals
            if not tail:
                return lambda s: s.startswith(head)
            size = len(head) + len(tail)
            return lambda s: len(s) >= size and s.startswith(head) and s.endswith(tail)
        if len(literals) == 3 and not literals[0] and not literals[2]:
            middle = literals[1]
            return lambda s: middle in s
    regex = ["".join("." if c is None else re.escape(c) for c in segment) for segment in segments]
    parts = [regex[0]]
    parts.extend(f"(?>.*?{middle})" for middle in regex[1:-1] if middle)
    if len(regex) > 1:
        parts.append(f".*{regex[-1]}")
    fullmatch = re.compile("".join(parts), re.DOTALL).fullmatch
    return lambda s: fullmatch(s) is not None
