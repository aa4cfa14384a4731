"""Simple-message-queue's framing, sans-IO: bytes in, events out.

Theory of operation
-------------------
The wire (``docs/smq.md``; integers are 32-bit big-endian, signed as Java
writes them)::

    source -> queue   'M' len body          a message; the queue makes its id
                      'I' id[16] len body   a message with the source's own id
                      'E'                   orderly close
    queue -> source   'Y'                   stored (chute: after the fsync)

    queue -> sink     'M' id[16] len body   a message
                      'R' id[16] len body   a message that may be a replay
    sink -> queue     'Y'                   acknowledged; any other byte ends
                                            the session

:class:`SourceCodec` reads a source. Its states are ``OPEN`` and ``ENDED``
(after ``'E'``: a byte that follows is a protocol error). A frame is parsed
only once it is whole; its length is checked as soon as its four bytes are
in, so an oversized or negative length is refused before any body arrives.

:class:`SinkCodec` is the queue's side of a sink, a stop-and-wait machine::

    IDLE --send(Deliver)--> AWAITING --'Y'--> IDLE
                            AWAITING --other byte--> ENDED   (Refuse)

A byte while ``IDLE`` (nothing to acknowledge) or after ``ENDED`` is a
protocol error, and so is a second :class:`Deliver` before the first is
acknowledged (that one is ours: :class:`~chute.errors.LocalProtocolError`).

End of stream: ``receive_data(b"")``. Between frames ``next_event`` then
returns :data:`CLOSED`; in the middle of one it raises. Whatever bytes a peer
sends, ``next_event`` returns an event or raises
:class:`~chute.errors.RemoteProtocolError`, nothing else.

A codec is not thread-safe; each connection owns one.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.sansio import CLOSED, NEED_DATA, NeedData
from chute.smq.events import (
    ID_SIZE,
    STORED,
    Ack,
    Deliver,
    EndOfSession,
    Publish,
    Refuse,
    SinkEvent,
    SourceEvent,
)

DEFAULT_MAX_BODY_SIZE: Final = 16 << 20
_MAX_INT32: Final = (1 << 31) - 1
_LENGTH: Final = struct.Struct(">i")


class _Buffer:
    """Bytes received and not yet consumed; the consumed head is dropped lazily."""

    __slots__ = ("data", "eof", "pos")

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0
        self.eof = False

    def feed(self, data: bytes) -> None:
        if self.eof:
            raise LocalProtocolError("receive_data() called after end of stream")
        if not data:
            self.eof = True
            return
        if self.pos and self.pos * 2 >= len(self.data):
            del self.data[: self.pos]
            self.pos = 0
        self.data += data

    def available(self) -> int:
        return len(self.data) - self.pos

    def peek(self, offset: int, size: int) -> bytes:
        start = self.pos + offset
        return bytes(self.data[start : start + size])

    def consume(self, size: int) -> bytes:
        start = self.pos
        self.pos = start + size
        return bytes(self.data[start : self.pos])

    def need(self) -> NeedData:
        """Nothing whole is buffered: wait, or report the end of the stream."""
        if not self.eof:
            return NEED_DATA
        if self.available():
            raise RemoteProtocolError(
                f"connection closed in the middle of a frame ({self.available()} bytes "
                "of it received)",
                "truncated-frame",
            )
        return CLOSED


class _SourceState(enum.Enum):
    OPEN = "open"
    ENDED = "ended"


class SourceCodec:
    """The queue's side of one source connection. See the module docstring.

    Args:
        max_body_size: the longest message body accepted, in bytes.
    """

    __slots__ = ("_buf", "max_body_size", "state")

    def __init__(self, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.max_body_size = max_body_size
        self.state = _SourceState.OPEN
        self._buf = _Buffer()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as events."""
        return self._buf.available()

    def receive_data(self, data: bytes) -> None:
        """Buffer ``data``; ``b""`` means the peer closed its side."""
        self._buf.feed(data)

    def next_event(self) -> SourceEvent | NeedData:
        """The next whole event, or :data:`NEED_DATA` / :data:`CLOSED`.

        Raises:
            RemoteProtocolError: an unknown frame type, a negative or oversized
                length, bytes after ``'E'``, or the stream ended mid-frame.
        """
        buf = self._buf
        if not buf.available():
            return buf.need()
        tag = buf.data[buf.pos]
        if self.state is _SourceState.ENDED:
            raise RemoteProtocolError(
                f"the source sent {bytes([tag])!r} after its orderly close 'E'", "data-after-end"
            )
        if tag == ord("E"):
            buf.consume(1)
            self.state = _SourceState.ENDED
            return EndOfSession()
        if tag == ord("M"):
            id_size = 0
        elif tag == ord("I"):
            id_size = ID_SIZE
        else:
            raise RemoteProtocolError(
                f"unknown source frame type {bytes([tag])!r} (expected 'M', 'I' or 'E')",
                "unknown-frame",
            )
        head = 1 + id_size + _LENGTH.size
        if buf.available() < head:
            return buf.need()
        (length,) = _LENGTH.unpack(buf.peek(1 + id_size, _LENGTH.size))
        if length < 0:
            raise RemoteProtocolError(f"negative message length {length}", "bad-length")
        if length > self.max_body_size:
            raise RemoteProtocolError(
                f"message of {length} bytes is over the limit of {self.max_body_size}",
                "too-large",
            )
        if buf.available() < head + length:
            return buf.need()
        buf.consume(1)
        wire_id = buf.consume(id_size) if id_size else None
        buf.consume(_LENGTH.size)
        return Publish(buf.consume(length), wire_id)

    @staticmethod
    def stored() -> bytes:
        """The bytes that tell a source its message is safely stored."""
        return STORED


class _SinkState(enum.Enum):
    IDLE = "idle"
    AWAITING = "awaiting-ack"
    ENDED = "ended"


class SinkCodec:
    """The queue's side of one sink connection. See the module docstring."""

    __slots__ = ("_buf", "state")

    def __init__(self) -> None:
        self.state = _SinkState.IDLE
        self._buf = _Buffer()

    @property
    def awaiting_ack(self) -> bool:
        return self.state is _SinkState.AWAITING

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as events."""
        return self._buf.available()

    def receive_data(self, data: bytes) -> None:
        """Buffer ``data``; ``b""`` means the peer closed its side."""
        self._buf.feed(data)

    def next_event(self) -> SinkEvent | NeedData:
        """The sink's next answer, or :data:`NEED_DATA` / :data:`CLOSED`.

        Raises:
            RemoteProtocolError: a byte with no delivery to answer.
        """
        buf = self._buf
        if not buf.available():
            return buf.need()
        answer = buf.data[buf.pos]
        if self.state is not _SinkState.AWAITING:
            why = "after its session ended" if self.state is _SinkState.ENDED else "unasked"
            raise RemoteProtocolError(
                f"the sink sent {bytes([answer])!r} {why} (no message awaits its answer)",
                "unexpected-byte",
            )
        buf.consume(1)
        if answer == STORED[0]:
            self.state = _SinkState.IDLE
            return Ack()
        self.state = _SinkState.ENDED
        return Refuse(answer)

    def send(self, event: Deliver) -> bytes:
        """Encode a delivery; the sink must answer it before the next one.

        Raises:
            LocalProtocolError: the previous delivery is not answered yet, the
                session ended, the id is not 16 bytes or the body too long.
        """
        if self.state is not _SinkState.IDLE:
            raise LocalProtocolError(f"cannot deliver to a sink in state {self.state.value}")
        if len(event.id) != ID_SIZE:
            raise LocalProtocolError(f"a message id is {ID_SIZE} bytes, not {len(event.id)}")
        if len(event.body) > _MAX_INT32:
            raise LocalProtocolError(f"a body of {len(event.body)} bytes has no 32-bit length")
        self.state = _SinkState.AWAITING
        tag = b"R" if event.replay else b"M"
        return b"".join((tag, event.id, _LENGTH.pack(len(event.body)), event.body))
