"""Where a reader of a stream starts: an :class:`Offset` and the text forms it is parsed
from (the native ``StreamConsumerOpen``, STOMP's ``x-stream-offset``, ``chute receive
--offset``). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from chute.errors import ConsumerError


@dataclass(frozen=True, slots=True)
class Offset:
    """Where a reader starts: ``kind`` is first, last, next, offset or timestamp."""

    kind: str
    value: int = 0

    def __str__(self) -> str:
        if self.kind in ("offset", "timestamp"):
            return f"{self.kind}={self.value}"
        return self.kind


OFFSET_FORMS: Final = "first, last, next, a number (offset=N or N) or timestamp=MS"


def parse_offset(text: str | int | None) -> Offset:
    """``first``, ``last``, ``next``, ``N`` or ``offset=N``, ``timestamp=MS`` (ms since the
    epoch; ``timestamp=S`` in seconds, as RabbitMQ's STOMP header, is told apart by size).
    None means ``next``.

    Raises:
        ConsumerError: not one of those forms.
    """
    if text is None:
        return Offset("next")
    if isinstance(text, int) and not isinstance(text, bool):
        return _number("offset", text)
    value = str(text).strip()
    lowered = value.lower()
    if lowered in ("first", "last", "next"):
        return Offset(lowered)
    kind, sep, number = lowered.partition("=")
    if not sep:
        kind, number = "offset", lowered
    if kind not in ("offset", "timestamp") or not number.isdigit():
        raise ConsumerError(f"a stream offset is {OFFSET_FORMS}; got {value[:60]!r}")
    parsed = int(number)
    if kind == "timestamp" and parsed < 100_000_000_000:  # seconds (before year 5138)
        parsed *= 1000
    return _number(kind, parsed)


def _number(kind: str, value: int) -> Offset:
    if value < 0 or value >= 1 << 63:
        raise ConsumerError(f"a stream {kind} must be 0 or more, got {value}")
    return Offset(kind, value)
