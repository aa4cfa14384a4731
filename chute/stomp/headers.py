"""Header text, STOMP 1.2 §Value Encoding: escaping, unescaping, splitting ``name:value`` lines.

"C style string literal escapes are used to encode any carriage returns, line
feeds or colon found within the UTF-8 encoded headers": ``\\r \\n \\c \\\\``.
STOMP 1.1 defines all but ``\\r``, which is accepted in 1.1 all the same. Any
other escape is a fatal protocol error ('bad-escape').
"""

from __future__ import annotations

import re
from typing import Final

from chute.errors import RemoteProtocolError

_UNESCAPES: Final = {"\\r": "\r", "\\n": "\n", "\\c": ":", "\\\\": "\\"}
_ESCAPE_SEQUENCE: Final = re.compile(r"\\.?", re.DOTALL)


def _unescape_one(match: re.Match[str]) -> str:
    try:
        return _UNESCAPES[match.group()]
    except KeyError:
        raise RemoteProtocolError(
            f"undefined escape sequence {match.group()!r} in a header", "bad-escape"
        ) from None


def unescape(text: str) -> str:
    """Decode the escapes of a received header name or value.

    Raises:
        RemoteProtocolError: an undefined escape ('bad-escape').
    """
    return _ESCAPE_SEQUENCE.sub(_unescape_one, text) if "\\" in text else text


def escape(text: str) -> str:
    """Escape a header name or value for sending (the inverse of :func:`unescape`)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\r" in text:
        text = text.replace("\r", "\\r")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if ":" in text:
        text = text.replace(":", "\\c")
    return text


def split_headers(lines: list[str], escaped: bool, trim: bool) -> list[tuple[str, str]] | None:
    """Header lines to ``(name, value)`` pairs, unescaped if ``escaped``, else trimmed if ``trim``.

    None if any line is not a clean ``name:value`` (the parser's whole-block path then
    hands over to its line-by-line reader, which names the error).
    """
    headers = []
    if escaped or trim:
        for line in lines:
            name, colon, value = line.partition(":")
            try:
                if escaped:
                    name = unescape(name)
                    value = unescape(value)
                else:
                    name = name.strip()
                    value = value.strip()
            except RemoteProtocolError:
                return None
            if not colon or not name:
                return None
            headers.append((name, value))
    else:
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not name:
                return None
            headers.append((name, value))
    return headers
