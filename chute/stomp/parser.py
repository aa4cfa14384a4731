"""FrameParser: STOMP's general frame reader, the reference every fast path must agree with.

STOMP 1.2 §Augmented BNF::

    frame-stream = 1*frame
    frame        = command EOL *( header EOL ) EOL *OCTET NULL *( EOL )
    EOL          = [CR] LF

and any EOL between frames is a heart-beat (§Heart-beating). The parser is a
three-stage machine over the bytes not yet returned:

``START``
    Skip EOLs; a run of them that arrived together comes out as one
    :data:`~chute.stomp.frames.HEARTBEAT` (the driver only needs to know that
    one arrived, the count means nothing). Any other byte starts a frame.
``HEADERS``
    The command line, then header lines up to the blank line. Lines are parsed
    as they complete, and the stage remembers where the next one starts, so a
    frame trickling in a byte at a time is scanned once.
``BODY``
    With ``content-length`` (the first one, §Repeated Header Entries): that
    many octets, NULs included, then a NUL (§Header content-length). Without:
    up to the first NUL, the search resuming where it stopped.

It reads any valid frame, whatever its line ends, escapes or version, and names every
error. :class:`~chute.stomp.codec.StompCodec` is a FrameParser with the fast path
in front (the frame nearly every client sends, whole and plain) and the writer
behind; what the fast path declines, errors included, comes here.

Every limit is checked as soon as the bytes in hand break it: a frame whose
headers plus ``content-length`` exceed ``max_frame_size`` is refused before its
body arrives, a header line before its EOL, a body without ``content-length``
once ``max_frame_size`` bytes have come without a NUL.

Escaping and trimming follow the version the codec sets (``_escape``,
``_trim``: STOMP 1.2's rules until it does); see the codec for the rules.

Buffering: one read is parsed in place; only when a frame spans reads are the
unparsed bytes moved to a ``bytearray`` that later reads are appended to, and
its consumed head is dropped only once it is more than half of it. Feeding a
frame byte by byte therefore costs O(n), not O(n²).

Not thread-safe; each connection owns one (as its codec).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Final

from chute.errors import RemoteProtocolError
from chute.sansio import CLOSED, NEED_DATA, NeedData
from chute.stomp.frames import (
    ALL_COMMANDS,
    BODY_COMMANDS,
    HEARTBEAT,
    UNESCAPED_COMMANDS,
    Frame,
    HeartBeat,
)
from chute.stomp.headers import split_headers, unescape


class Stage(enum.Enum):
    """Where the parser is: between frames, in a frame's headers, or in its body."""

    START = enum.auto()
    HEADERS = enum.auto()
    BODY = enum.auto()


START: Final = Stage.START
_HEADERS: Final = Stage.HEADERS
_BODY: Final = Stage.BODY

_MAX_COMMAND_LINE: Final = max(len(c) for c in ALL_COMMANDS) + 1  # + CR
_EOLS: Final = re.compile(rb"(?:\r?\n)+")


def _shorten(data: bytes | bytearray, limit: int = 40) -> str:
    return repr(bytes(data[:limit])) + ("..." if len(data) > limit else "")


class FrameParser:
    """STOMP's general reader, sans-IO: bytes in (:meth:`receive_data`), and, one at a
    time from :meth:`_next`, whole frames, heart-beats or :data:`NEED_DATA` /
    :data:`CLOSED`. Raises :class:`~chute.errors.RemoteProtocolError` as
    :meth:`chute.stomp.codec.StompCodec.next_frame` documents.

    The arguments are the limits and commands of :class:`~chute.stomp.codec.StompCodec`.
    """

    __slots__ = (
        "_body",
        "_buf",
        "_command",
        "_commands",
        "_eof",
        "_escape",
        "_headers",
        "_length",
        "_line",
        "_names",
        "_pos",
        "_scan",
        "_stage",
        "_trim",
        "max_frame_size",
        "max_header_count",
        "max_header_length",
    )

    def __init__(
        self,
        *,
        max_frame_size: int,
        max_header_count: int,
        max_header_length: int,
        commands: Iterable[str],
    ) -> None:
        self.max_frame_size = max_frame_size
        self.max_header_count = max_header_count
        self.max_header_length = max_header_length
        self._commands: dict[bytes, str] = {}
        self._names: dict[str, str] = {}
        for command in commands:
            if command not in ALL_COMMANDS:
                raise ValueError(f"{command!r} is not a STOMP command")
            name = command.encode()
            self._commands[name] = self._names[name.decode()] = name.decode()  # a plain str
        self._escape = True  # header escaping (§Value Encoding): the codec's version decides
        self._trim = False  # STOMP 1.0's trimming of header text
        self._buf: bytes | bytearray = b""  # unparsed bytes start at _pos
        self._pos = 0
        self._eof = False
        # the frame being read; _line, _body and _scan are indices into _buf
        self._stage = START
        self._command: str | None = None
        self._headers: list[tuple[str, str]] = []
        self._line = 0  # where the next header line starts
        self._body = 0  # where the body starts
        self._length = -1  # content-length, or -1
        self._scan = 0  # where the search for the body's NUL resumes

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames or heart-beats."""
        return len(self._buf) - self._pos

    @property
    def head(self) -> tuple[str, list[tuple[str, str]]] | None:
        """The command and headers of the frame being received, once they are all here
        and while its body is not (else None): a driver may refuse the frame from them
        before its body arrives. The list is the frame's own: a new one per frame."""
        if self._stage is not _BODY or self._command is None:
            return None
        return self._command, self._headers

    def discard(self) -> None:
        """Drop every byte buffered (the connection is gone): a frame begun may be large,
        and the connection object may outlive its loss until the garbage collector
        breaks its reference cycles."""
        self._buf = b""
        self._pos = self._line = self._body = self._scan = 0
        self._headers = []
        self._stage = START

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` means the peer closed its side.

        Raises:
            RemoteProtocolError: data after EOF (a driver bug, reported as the peer's).
        """
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RemoteProtocolError("data received after end of stream", "eof-mid-frame")
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):  # nothing pending (so stage START): parse this read in place
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
        elif isinstance(buf, bytearray):
            if pos > len(buf) >> 1:
                del buf[:pos]
                self._shift(pos)
            buf += data
        else:  # a frame spans reads: keep its bytes, and the reads to come, in a bytearray
            with memoryview(buf) as view:
                grown = bytearray(view[pos:])
            grown += data
            self._buf = grown
            self._shift(pos)

    def _shift(self, n: int) -> None:
        self._pos -= n
        self._line -= n
        self._body -= n
        self._scan -= n

    def _next(self) -> Frame | HeartBeat | NeedData:
        stage = self._stage
        if stage is START:
            buf = self._buf
            pos = self._pos
            if pos >= len(buf):
                return self._short()
            first = buf[pos]
            if first == 10 or first == 13:  # noqa: PLR1714 (an int from a bytes-like)
                return self._heartbeat()
            self._stage = stage = _HEADERS
            self._command = None
            self._headers = []
            self._line = pos
            self._length = -1
            if self._whole_headers():
                stage = _BODY
        if stage is _HEADERS and not self._read_headers():
            return self._short()
        frame = self._read_body()
        return self._short() if frame is None else frame

    def _heartbeat(self) -> HeartBeat | NeedData:
        buf = self._buf
        start = self._pos
        match = _EOLS.match(buf, start)
        end = start if match is None else match.end()
        if end + 1 < len(buf) and buf[end] == 13:  # CR not followed by LF
            raise RemoteProtocolError("CR not followed by LF between frames", "malformed-frame")
        self._consumed(end)
        return HEARTBEAT if end > start else self._short()

    def _whole_headers(self) -> bool:
        """The fast path of :meth:`_read_headers`: every header line has arrived.

        It decodes the header block in one go when its EOLs are all LF or all
        CRLF and it is clean; on anything else it returns False, changing
        nothing, and the line-by-line reader takes over (and names the error).
        """
        buf = self._buf
        pos = self._pos
        eol = buf.find(b"\n", pos, pos + _MAX_COMMAND_LINE + 1)
        if eol < 0:
            return False
        limit = pos + self.max_header_length
        if buf[eol - 1] == 13:  # CRLF (eol > pos: the frame does not start with an EOL)
            blank = buf.find(b"\r\n\r\n", eol - 1, limit)
            if blank < 0:
                return False
            block = buf[pos:blank]
            if block.count(b"\n") != block.count(b"\r\n"):
                return False  # mixed EOLs
            separator = "\r\n"
            body = blank + 4
        else:
            blank = buf.find(b"\n\n", eol, limit)
            if blank < 0:
                return False
            block = buf[pos:blank]
            if b"\r" in block:
                return False  # mixed EOLs, or raw CRs
            separator = "\n"
            body = blank + 2
        try:
            text = block.decode()
        except UnicodeDecodeError:
            return False
        lines = text.split(separator)
        command = self._names.get(lines[0])
        if command is None or len(lines) > self.max_header_count + 1:
            return False
        del lines[0]
        escaped = self._escape and command not in UNESCAPED_COMMANDS
        headers = split_headers(lines, escaped and "\\" in text, self._trim)
        if headers is None:
            return False
        length = -1
        for name, value in headers:
            if name == "content-length":
                if not (value.isascii() and value.isdigit()):
                    return False
                length = int(value)
                break
        self._command = command
        self._headers = headers
        self._length = length
        self._body = self._scan = body
        self._stage = _BODY
        self._check_least_size(body, length)
        return True

    def _check_least_size(self, body: int, length: int) -> None:
        least = body - self._pos + max(length, 0) + 1
        if least > self.max_frame_size:
            raise RemoteProtocolError(
                f"frame of at least {least} bytes exceeds the limit of {self.max_frame_size}",
                "frame-too-large",
            )

    def _read_headers(self) -> bool:
        """Parse header lines up to the blank one; False if it has not arrived yet."""
        buf = self._buf
        line = self._line
        command = self._command
        headers = self._headers
        max_length = self.max_header_length
        escaped = self._escape and command not in UNESCAPED_COMMANDS
        while True:
            eol = buf.find(b"\n", line)
            if eol < 0:
                self._line = line
                self._check_partial_line(len(buf) - line)
                return False
            end = eol - 1 if eol > line and buf[eol - 1] == 13 else eol
            if command is None:
                command = self._commands.get(bytes(buf[line:end]))
                if command is None:
                    raise self._unknown_command(buf[line:end])
                self._command = command
                escaped = self._escape and command not in UNESCAPED_COMMANDS
            elif end == line:  # the blank line: headers done
                break
            else:
                if end - line > max_length:
                    raise RemoteProtocolError(
                        f"header line of {end - line} bytes exceeds the limit of {max_length}",
                        "header-too-long",
                    )
                if len(headers) >= self.max_header_count:
                    raise RemoteProtocolError(
                        f"more than {self.max_header_count} headers", "too-many-headers"
                    )
                name, value = self._header(buf[line:end], escaped)
                if name == "content-length" and self._length < 0:
                    self._length = self._content_length(value)
                headers.append((name, value))
            line = eol + 1
        self._body = self._scan = eol + 1
        self._stage = _BODY
        self._check_least_size(eol + 1, self._length)
        return True

    def _header(self, raw: bytes | bytearray, escaped: bool) -> tuple[str, str]:
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise RemoteProtocolError(
                f"header line is not UTF-8: {_shorten(raw)}", "malformed-frame"
            ) from None
        name, colon, value = text.partition(":")
        if not colon:
            raise RemoteProtocolError(
                f"header line {text[:40]!r} is not name:value", "malformed-frame"
            )
        if escaped:
            name = unescape(name)
            value = unescape(value)
        elif self._trim:
            name = name.strip()
            value = value.strip()
        if not name:
            raise RemoteProtocolError(f"header line {text[:40]!r} has no name", "malformed-frame")
        return name, value

    def _check_partial_line(self, partial: int) -> None:
        """Refuse the line being received if it is already too long, or its frame too large."""
        if self._command is None:
            start = self._line
            head = bytes(self._buf[start : start + partial])
            if head.endswith(b"\r"):
                head = head[:-1]
            if not any(name.startswith(head) for name in self._commands):
                raise self._unknown_command(head)
        elif partial > self.max_header_length + 1:  # + 1: it may end with the CR of a CRLF
            raise RemoteProtocolError(
                f"header line of over {self.max_header_length} bytes", "header-too-long"
            )
        self._check_incomplete_size()

    def _check_incomplete_size(self) -> None:
        pending = len(self._buf) - self._pos
        if pending >= self.max_frame_size:  # and the NUL is still to come
            raise RemoteProtocolError(
                f"frame of over {self.max_frame_size} bytes exceeds the limit", "frame-too-large"
            )

    def _unknown_command(self, data: bytes | bytearray) -> RemoteProtocolError:
        return RemoteProtocolError(
            f"unknown or unexpected STOMP command {_shorten(data)}", "unknown-command"
        )

    @staticmethod
    def _content_length(value: str) -> int:
        if not (value.isascii() and value.isdigit()):
            raise RemoteProtocolError(
                f"content-length {value[:40]!r} is not a number of octets", "bad-content-length"
            )
        return int(value)

    def _read_body(self) -> Frame | None:
        """The frame, once its body and NUL have arrived; None until then."""
        buf = self._buf
        start = self._body
        length = self._length
        if length >= 0:
            end = start + length
            if len(buf) <= end:
                return None
            if buf[end] != 0:
                raise RemoteProtocolError(
                    f"content-length {length} is not followed by a NUL", "bad-content-length"
                )
        else:
            limit = self._pos + self.max_frame_size
            end = buf.find(b"\x00", self._scan, limit)
            if end < 0:
                self._scan = min(len(buf), limit)
                self._check_incomplete_size()
                return None
        body = buf[start:end]
        command = self._command
        assert command is not None  # noqa: S101 (set by _read_headers)
        if body and command not in BODY_COMMANDS:
            raise RemoteProtocolError(f"a {command} frame may not have a body", "malformed-frame")
        frame = Frame(command, tuple(self._headers), body if type(body) is bytes else bytes(body))
        self._stage = START
        self._consumed(end + 1)
        return frame

    def _consumed(self, pos: int) -> None:
        if pos >= len(self._buf):
            self._buf = b""
            self._pos = 0
        else:
            self._pos = pos

    def _short(self) -> NeedData:
        if not self._eof:
            return NEED_DATA
        if self.buffered:
            raise RemoteProtocolError(
                f"connection closed in the middle of a frame ({self.buffered} bytes pending)",
                "eof-mid-frame",
            )
        return CLOSED


__all__ = ["START", "FrameParser", "Stage"]
