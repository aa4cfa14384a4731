"""StompCodec: STOMP 1.0/1.1/1.2 framing, sans-IO. Bytes in, frames out; frames in, bytes out.

Theory of operation
-------------------
A codec is a :class:`~chute.stomp.parser.FrameParser`, the general reader (a
three-stage machine over the buffered bytes that takes any frame, checks every
limit and names every error), with a fast path in front of it and the writer
(:mod:`chute.stomp.writer`) behind :meth:`StompCodec.send`.

Fast path. Before the stages, :meth:`StompCodec.next_frame` tries the frame
that nearly every client sends: whole in the buffer, LF line ends, no escape,
its header block within ``max_header_length``. That one is cut out with a few
``bytes.find`` calls over the whole buffer (blank line, NUL) instead of line
by line, and its header block is looked up in a small memo (16 blocks of up to
512 bytes, SEND and MESSAGE frames only) before it is split: a producer
repeats its headers, so each block is decoded once and its frames share one
immutable header tuple. Anything else, errors included, goes to the three
stages, which therefore stay the reference: feeding byte by byte (which never
takes the fast path) must give the same frames and errors as feeding whole,
and the unit tests check that it does.

Versions. CRLF is accepted as an EOL whatever the version (1.2 made it legal;
no 1.0/1.1 peer means a raw CR at the end of a header). Escaping
(§Value Encoding: ``\\r \\n \\c \\\\``) applies in 1.1 and 1.2 except to
CONNECT, STOMP and CONNECTED frames; in 1.0 nothing is escaped and header names
and values are trimmed, as ActiveMQ and RabbitMQ do. A raw ``:`` in a value is
read as part of the value (the first ``:`` splits name from value).

A ``StompCodec`` is not thread-safe; each connection owns one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from chute.errors import RemoteProtocolError
from chute.sansio import NeedData
from chute.stomp.frames import (
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    SUPPORTED_VERSIONS,
    Frame,
    HeartBeat,
)
from chute.stomp.parser import START, FrameParser
from chute.stomp.writer import encode_frame, encode_receipt

_SEEN_BLOCKS: Final = 16
_SEEN_BLOCK_SIZE: Final = 512
"""A codec remembers up to 16 header blocks of SEND and MESSAGE frames, of at most
512 bytes each (see StompCodec._plain_headers): a few KiB per connection at most."""


class StompCodec(FrameParser):
    """STOMP, sans-IO: bytes in, frames out. Never touches a socket.

    Args:
        max_frame_size: the largest frame accepted, from the first byte of the
            command to the closing NUL.
        max_header_count: the most header lines one frame may have.
        max_header_length: the longest header line, in bytes as received
            (escaped, without the EOL).
        version: the negotiated STOMP version; see :attr:`version`.
        commands: the commands this side may receive: :data:`CLIENT_COMMANDS`
            for a server (the default), ``SERVER_COMMANDS`` for a client.
    """

    __slots__ = ("_error", "_fast", "_seen", "_version")

    def __init__(
        self,
        *,
        max_frame_size: int = 16 << 20,
        max_header_count: int = 100,
        max_header_length: int = 8192,
        version: str = "1.2",
        commands: Iterable[str] = CLIENT_COMMANDS,
    ) -> None:
        super().__init__(
            max_frame_size=max_frame_size,
            max_header_count=max_header_count,
            max_header_length=max_header_length,
            commands=commands,
        )
        self._version = ""
        self._fast = True
        self._seen: dict[bytes, tuple[str, tuple[tuple[str, str], ...], int]] = {}
        self.version = version
        self._error: RemoteProtocolError | None = None

    @property
    def version(self) -> str:
        """The STOMP version in use: "1.0", "1.1" or "1.2"; set it once negotiated.

        It decides the header escaping of both directions (§Value Encoding).

        Raises:
            ValueError: on setting a version chute does not speak.
        """
        return self._version

    @version.setter
    def version(self, value: str) -> None:
        if value not in SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported STOMP version {value!r}")
        self._version = value
        self._escape = value != "1.0"
        self._trim = value == "1.0"
        self._fast = not self._trim  # 1.0 trims header text: the general reader only
        self._seen.clear()  # header blocks read under the old version's rules

    def next_frame(self) -> Frame | HeartBeat | NeedData:
        """The next whole frame, :data:`HEARTBEAT`, or :data:`NEED_DATA` / :data:`CLOSED`.

        Raises:
            RemoteProtocolError: the peer broke the protocol; ``error_code`` is one of
                'frame-too-large', 'too-many-headers', 'header-too-long',
                'malformed-frame', 'bad-escape', 'bad-content-length',
                'unknown-command', 'eof-mid-frame'. Any other exception is a bug.
                After it the codec is unusable (it raises the same error again):
                send an ERROR frame and close.
        """
        if self._error is not None:
            raise self._error
        if self._stage is START and self._fast:
            frame = self._fast_frame()
            if frame is not None:
                return frame
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _fast_frame(self) -> Frame | None:
        """The next frame if it is whole, plain and valid; else None, changing nothing.

        Plain means what nearly every client sends: LF line ends, no escape
        sequence, a header block within ``max_header_length`` bytes. It is read
        with a few scans of the buffer in C (the blank line, the first
        ``content-length``, the NUL) instead of line by line, and a header block
        seen lately is not parsed again (:meth:`_plain_headers`). Anything else
        (a heart-beat, CRLF, an escape, STOMP 1.0's trimming, a frame not all
        here yet, any error) is left to the general reader, which also names
        the error; so this path never raises and never decides an error alone.
        """
        buf = self._buf
        pos = self._pos
        blank = buf.find(b"\n\n", pos, pos + self.max_header_length)
        if blank < 0:
            return None
        block = buf[pos:blank] if type(buf) is bytes else bytes(buf[pos:blank])
        head = self._seen.get(block)
        if head is None:
            head = self._plain_headers(block)
            if head is None:
                return None
        command, headers, length = head
        start = blank + 2
        if length < 0:
            end = buf.find(b"\x00", start, pos + self.max_frame_size)
            if end < 0:
                return None
        else:
            end = start + length
            if end - pos >= self.max_frame_size or len(buf) <= end or buf[end] != 0:
                return None
        if end > start and command not in BODY_COMMANDS:
            return None
        body = buf[start:end]
        self._pos = end + 1
        return Frame(command, headers, body if type(body) is bytes else bytes(body))

    def _plain_headers(self, block: bytes) -> tuple[str, tuple[tuple[str, str], ...], int] | None:
        """A plain header block's command, headers and content-length (-1: none), or None.

        Clients repeat the same header block (a producer's SENDs differ in their
        bodies), so the result is remembered by the block's bytes (see
        ``_SEEN_BLOCKS``); the tuples are immutable, so frames may share them.
        """
        if b"\r" in block or b"\\" in block:
            return None
        try:
            text = block.decode()
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        command = self._names.get(lines[0])
        if command is None or len(lines) > self.max_header_count + 1:
            return None
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name:
                return None
            headers.append((name, value))
        length = -1
        at = text.find("\ncontent-length:")
        if at >= 0:
            at += 16  # len("\ncontent-length:")
            eol = text.find("\n", at)
            value = text[at:] if eol < 0 else text[at:eol]
            if not (value.isascii() and value.isdigit()):
                return None
            length = int(value)
        head = (command, tuple(headers), length)
        if command in BODY_COMMANDS and len(block) <= _SEEN_BLOCK_SIZE:  # not ACKs: each differs
            seen = self._seen
            if len(seen) >= _SEEN_BLOCKS:
                seen.clear()
            seen[block] = head
        return head

    def send_receipt(self, receipt_id: str) -> bytes:
        """The bytes of ``Frame.receipt(receipt_id)``, without building the frame.

        Raises:
            LocalProtocolError: as :meth:`send` (a line break in STOMP 1.0).
        """
        return encode_receipt(receipt_id, escaped=self._escape, version=self._version)

    def send(self, frame: Frame | HeartBeat) -> bytes:
        """The bytes of ``frame`` (or of a heart-beat: an LF), to be written to the peer
        (see :func:`chute.stomp.writer.encode_frame`).

        Raises:
            LocalProtocolError: the frame cannot be encoded.
        """
        if type(frame) is HeartBeat:
            return b"\n"
        assert isinstance(frame, Frame)  # noqa: S101 (for mypy)
        return encode_frame(frame, escaped=self._escape, version=self._version)
