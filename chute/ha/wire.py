"""The replication link's frames (sans-IO): what a live and its backup say.

A frame is ``u32 length`` then ``u8 kind`` then its body (``length`` counts the kind
and the body). Integers are big-endian u64. Every frame from the live carries the
epoch it was sent in; a backup refuses a frame of an older epoch than it has seen.

From the backup: ``HELLO`` (JSON: its id, the newest epoch it saw, and what it holds:
``[segment, used length, crc32 of those bytes]`` per segment file) and ``ACK`` (epoch,
position: everything up to there is on its disk).

From the live: ``WELCOME`` (JSON: the epoch, the live's id), ``WRITE`` (epoch,
segment, offset, bytes), ``TRUNCATE`` (epoch, segment, length: the file is cut or
made to that length, created if absent), ``DELETE`` (epoch, segment) and ``STATE``
(epoch, 1 if the backup is in sync now, 0 if not).

A position is ``segment << 40 | offset``: journal bytes are written in that order.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Final

_LEN: Final = struct.Struct(">IB")
_U64X2: Final = struct.Struct(">QQ")
_U64X3: Final = struct.Struct(">QQQ")
MAX_FRAME: Final = 1 << 30
POSITION_SHIFT: Final = 40


def position(segment: int, offset: int) -> int:
    """The stream position of ``offset`` in ``segment``."""
    return segment << POSITION_SHIFT | offset


class Kind(enum.IntEnum):
    HELLO = 1
    ACK = 2
    WELCOME = 3
    WRITE = 4
    TRUNCATE = 5
    DELETE = 6
    STATE = 7


class WireError(ValueError):
    """A frame that cannot be read: the link is closed."""


@dataclass(frozen=True, slots=True)
class Hello:
    node_id: str
    epoch: int
    segments: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class Welcome:
    epoch: int
    node_id: str


@dataclass(frozen=True, slots=True)
class Ack:
    epoch: int
    position: int


@dataclass(frozen=True, slots=True)
class Write:
    epoch: int
    segment: int
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    epoch: int
    segment: int
    length: int


@dataclass(frozen=True, slots=True)
class Delete:
    epoch: int
    segment: int


@dataclass(frozen=True, slots=True)
class State:
    epoch: int
    in_sync: bool


Frame = Hello | Welcome | Ack | Write | Truncate | Delete | State


def _frame(kind: Kind, body: bytes) -> bytes:
    return _LEN.pack(len(body) + 1, kind) + body


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode(frame: Frame) -> bytes:
    """The bytes of ``frame`` on the link."""
    match frame:
        case Hello(node_id, epoch, segments):
            body = {"id": node_id, "epoch": epoch, "segments": [list(s) for s in segments]}
            return _frame(Kind.HELLO, _json(body))
        case Welcome(epoch, node_id):
            return _frame(Kind.WELCOME, _json({"epoch": epoch, "id": node_id}))
        case Ack(epoch, at):
            return _frame(Kind.ACK, _U64X2.pack(epoch, at))
        case Write(epoch, segment, offset, data):
            return _frame(Kind.WRITE, _U64X3.pack(epoch, segment, offset) + data)
        case Truncate(epoch, segment, length):
            return _frame(Kind.TRUNCATE, _U64X3.pack(epoch, segment, length))
        case Delete(epoch, segment):
            return _frame(Kind.DELETE, _U64X2.pack(epoch, segment))
        case State(epoch, in_sync):
            return _frame(Kind.STATE, _U64X2.pack(epoch, int(in_sync)))
    raise TypeError(f"not a frame: {frame!r}")


def _decode(kind: int, body: bytes) -> Frame:
    try:
        match kind:
            case Kind.HELLO:
                value = json.loads(body)
                segments = tuple((int(s), int(n), int(c)) for s, n, c in value["segments"])
                return Hello(str(value["id"]), int(value["epoch"]), segments)
            case Kind.WELCOME:
                value = json.loads(body)
                return Welcome(int(value["epoch"]), str(value["id"]))
            case Kind.ACK:
                return Ack(*_U64X2.unpack(body))
            case Kind.WRITE:
                epoch, segment, offset = _U64X3.unpack_from(body)
                return Write(epoch, segment, offset, body[_U64X3.size :])
            case Kind.TRUNCATE:
                return Truncate(*_U64X3.unpack(body))
            case Kind.DELETE:
                return Delete(*_U64X2.unpack(body))
            case Kind.STATE:
                epoch, flag = _U64X2.unpack(body)
                return State(epoch, bool(flag))
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise WireError(f"bad replication frame of kind {kind}: {exc}") from exc
    raise WireError(f"unknown replication frame kind {kind}")


class Decoder:
    """Frames out of the bytes fed in, in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes.

        Raises:
            WireError: a frame is malformed or too long.
        """
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        start = 0
        while len(buffer) - start >= _LEN.size:
            length, kind = _LEN.unpack_from(buffer, start)
            if length < 1 or length > MAX_FRAME:
                raise WireError(f"replication frame of {length} bytes")
            end = start + 4 + length
            if end > len(buffer):
                break
            frames.append(_decode(kind, bytes(buffer[start + _LEN.size : end])))
            start = end
        del buffer[:start]
        return frames
