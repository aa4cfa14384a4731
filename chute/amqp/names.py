"""AMQP names ↔ chute names, reversibly.

An AMQP queue or exchange name is any UTF-8 up to 255 bytes; Celery's
``celery@host.celery.pidbox`` is one. Where chute's own name rule is narrower, the
AMQP side escapes what it cannot carry as it does for STOMP headers: a character
outside ``A-Z a-z 0-9 . _ -`` (``:`` included) becomes ``:`` and two hex digits per
UTF-8 byte, and the second dot of ``..`` becomes ``:2E``. Names made only of those
characters (``hello``, ``task_queue``, ``celery``) are the same on every protocol.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from chute.core.model.address import MAX_NAME_LENGTH, check_name
from chute.errors import InvalidAddress

_PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_ESCAPE: Final = re.compile(r":([0-9A-F]{2})")


@functools.lru_cache(maxsize=4096)  # every publish names its queue: remembered, not redone
def to_chute(name: str) -> str:
    """The chute name of an AMQP queue name.

    Raises:
        InvalidAddress: empty, over 255 bytes, or too long for chute once escaped.
    """
    raw = name.encode()
    if not raw or len(raw) > 255:
        raise InvalidAddress(f"a queue name must be 1-255 bytes of UTF-8, not {len(raw)}")
    out: list[str] = []
    previous = ""
    for char in name:
        if char in _PLAIN and not (char == "." and previous == "."):
            out.append(char)
        else:
            out.append("".join(f":{byte:02X}" for byte in char.encode()))
        previous = char
    escaped = "".join(out)
    if len(escaped) > MAX_NAME_LENGTH:
        raise InvalidAddress(
            f"queue name {name[:40]!r}… is {len(escaped)} characters once escaped for chute, "
            f"over {MAX_NAME_LENGTH}: use a shorter name"
        )
    return check_name(escaped)


@functools.lru_cache(maxsize=4096)
def to_amqp(name: str) -> str:
    """The AMQP name of a chute queue name (the inverse of :func:`to_chute`)."""
    if ":" not in name:
        return name
    raw = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(name):
        raw += name[pos : match.start()].encode()
        raw.append(int(match.group(1), 16))
        pos = match.end()
    raw += name[pos:].encode()
    return raw.decode(errors="replace")
