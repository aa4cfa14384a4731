"""What Simple-message-queue's peers say to the queue, and what the queue says to a sink.

Events are frozen dataclasses named for the act. A source sends
:class:`Publish` and :class:`EndOfSession`; a sink answers a delivery with
:class:`Ack` or, with any other byte, :class:`Refuse`. The queue sends a sink
:class:`Deliver` and a source the single byte :data:`STORED`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ID_SIZE: Final = 16
"""A Simple-message-queue message id is 16 opaque bytes."""

STORED: Final = b"Y"
"""The queue's answer to a source once its message is on disk (after the fsync)."""


@dataclass(frozen=True, slots=True)
class Publish:
    """A source's message: ``'M'`` (``id`` is None: the queue makes one) or ``'I'``."""

    body: bytes
    id: bytes | None = None


@dataclass(frozen=True, slots=True)
class EndOfSession:
    """A source's ``'E'``: an orderly close."""


@dataclass(frozen=True, slots=True)
class Ack:
    """A sink's ``'Y'``: the queue may discard the message it was sent."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """A sink answered a delivery with a byte other than ``'Y'``: the session ends
    and the message goes to the next sink, marked as a possible replay."""

    answer: int


@dataclass(frozen=True, slots=True)
class Deliver:
    """The queue's message to a sink: ``'R'`` when ``replay`` (it may have been
    delivered before), else ``'M'``."""

    id: bytes
    body: bytes
    replay: bool = False


SourceEvent = Publish | EndOfSession
SinkEvent = Ack | Refuse
