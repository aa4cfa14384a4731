"""The packets a cluster's nodes send each other about streams (version 3 on).

A stream lives on one node, its home (:mod:`chute.core.rules.cluster_streams`). Another
node keeps a copy of it, read from the home with the home's offsets: it asks with
``PeerStreamRead`` (the offset it wants next, and how many messages at most), and the
home answers with one ``PeerStreamRecords`` once it has messages from there (at once,
or as soon as they are appended). One read is outstanding per stream and link, so the
reading node's pace is the flow control. Sends to a stream on another node travel as
hand-overs (``PeerHandover`` naming the stream).

Bytes::

    PeerStreamRead     address s16 | start u64 | limit u32
    PeerStreamRecords  address s16 | next u64 | count u32, then per record:
                       offset u64 | timestamp i64 | expiration i64 | length u32 | content

Plain frozen data like every packet; their tags are
:class:`chute.protocol.packets.PacketType`'s and :mod:`chute.protocol.spec` registers
the codecs below. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from chute.content import decode_content, encode_content, malformed
from chute.message import Message

_U16: Final = struct.Struct(">H")
_READ: Final = struct.Struct(">QI")  # start | limit
_HEAD: Final = struct.Struct(">QI")  # next | count
_RECORD: Final = struct.Struct(">QqqI")  # offset | timestamp | expiration | length
Records = tuple[tuple[int, Message], ...]
"""A stream's messages on the wire: (offset, message) pairs, in offset order."""


@dataclass(frozen=True, slots=True)
class PeerStreamRead:
    """Send stream ``address``'s messages from offset ``start`` on, ``limit`` at most."""

    address: str
    start: int
    limit: int


@dataclass(frozen=True, slots=True)
class PeerStreamRecords:
    """Stream ``address``'s messages asked for by a read; ``next``: where the next read
    starts (past offsets a rolled-back transaction never placed, too)."""

    address: str
    next: int
    records: Records


def _text(value: str) -> bytes:
    data = value.encode()
    return _U16.pack(len(data)) + data


def _address(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(data, pos)
    pos += _U16.size
    if pos + n > len(data):
        raise malformed("string overruns the packet")
    return data[pos : pos + n].decode(), pos + n


def encode_read(packet: PeerStreamRead) -> tuple[int, int, bytes]:
    return 0, 0, _text(packet.address) + _READ.pack(packet.start, packet.limit)


def decode_read(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerStreamRead:
    body = data[start:end]
    address, pos = _address(body, 0)
    first, limit = _READ.unpack_from(body, pos)
    if pos + _READ.size != len(body):
        raise malformed("trailing bytes in PeerStreamRead")
    return PeerStreamRead(address, first, limit)


def encode_records(packet: PeerStreamRecords) -> tuple[int, int, bytes]:
    parts = [_text(packet.address), _HEAD.pack(packet.next, len(packet.records))]
    for offset, m in packet.records:
        content = m.encoded if m.encoded is not None else encode_content(m)
        parts.append(_RECORD.pack(offset, m.timestamp, m.expiration, len(content)))
        parts.append(content)
    return 0, 0, b"".join(parts)


def decode_records(
    data: bytes, start: int, end: int, header: Any, max_properties: int
) -> PeerStreamRecords:
    body = data[start:end]
    address, pos = _address(body, 0)
    following, count = _HEAD.unpack_from(body, pos)
    pos += _HEAD.size
    if count * _RECORD.size > len(body) - pos:
        raise malformed("list overruns the packet")
    records: list[tuple[int, Message]] = []
    for _ in range(count):
        offset, ts, exp, length = _RECORD.unpack_from(body, pos)
        pos += _RECORD.size
        if pos + length > len(body):
            raise malformed("a record overruns the packet")
        message = decode_content(body, pos, pos + length, max_properties, ts, exp)
        records.append((offset, message))
        pos += length
    if pos != len(body):
        raise malformed("trailing bytes in PeerStreamRecords")
    return PeerStreamRecords(address, following, tuple(records))
