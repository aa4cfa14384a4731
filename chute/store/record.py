"""Record framing: how one journal record sits in a segment, and how to find them again.

Pure: bytes in, frames out; no files. Layout (big-endian)::

    magic  4 bytes  MAGIC, a fixed marker that lets a scan resynchronise
    crc    u32      CRC-32 of (segment u64, offset u32, length u32, kind u8)
                    followed by the payload
    length u32      payload length
    kind   u8       a :class:`Kind`
    payload         ``length`` bytes (see :mod:`chute.store.records`)

The CRC covers the record's own position (its segment number and offset)
besides its length, kind and payload. A frame copied elsewhere fails its
check where it lands, so when a scan resynchronises inside a message body
that holds journal frames (a journal file sent as a message, say) it does
not take them for records. (A body crafted to check at the exact place it
will be written is not defended against.)

Scanning (:class:`Scan`) yields every good frame in order. At a bad spot (a
wrong magic, a length past the end, a CRC mismatch) it looks at what follows:

* nothing but zero bytes: the clean end of a pre-allocated segment;
* a good frame further on (found by searching for ``MAGIC`` and checking the
  candidate's CRC): the bytes in between are a corrupt region, reported as
  :class:`Damage` with ``tail=False`` and skipped;
* no good frame at all: a torn tail (a write cut short by a crash), reported
  as :class:`Damage` with ``tail=True``; the caller cuts it off.

Thread-safety: the functions are pure and a :class:`Scan` belongs to the
thread that iterates it.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import zlib
from collections.abc import Iterator
from typing import Final

MAGIC: Final = b"\xc4\x1b\x7e\x5a"
HEADER: Final = struct.Struct(">4sIIB")
HEADER_SIZE: Final = HEADER.size  # 13
_SEAL: Final = struct.Struct(">QIIB")  # segment, offset, length, kind: checked with the payload


class Kind(enum.IntEnum):
    """Record kinds; the numbers are stable on disk."""

    ADD = 1
    ACK = 2
    DELIVERED = 3
    DEFINE = 4
    UNDEFINE = 5
    COMMIT = 6
    PREPARE = 7
    COMMIT_PREPARED = 8
    ROLLBACK_PREPARED = 9
    CHECKPOINT = 10
    ACKS = 11
    MARKS = 12
    PAD = 13  # nothing: where a record the disk refused was written (see the writer)
    SENT = 14  # a producer's request stored (duplicate detection)
    FIRST = 15  # where retention left a stream's first offset
    COMMIT_IN_PLACE = 16  # a PREPARE committed where it lies (its xid only)


def checksum(segment: int, offset: int, kind: int, payload: bytes | memoryview) -> int:
    """The CRC a record of ``kind`` with ``payload`` carries at ``offset`` in ``segment``."""
    return zlib.crc32(payload, seal(segment, offset, len(payload), kind))


def seal(segment: int, offset: int, length: int, kind: int) -> int:
    """The CRC of a record's place, length and kind: its CRC continues over its payload."""
    return zlib.crc32(_SEAL.pack(segment, offset, length, kind))


def frame_header(segment: int, offset: int, kind: int, payload: bytes) -> bytes:
    """The 13 header bytes that go before ``payload`` at ``offset`` in ``segment``."""
    crc = zlib.crc32(payload, zlib.crc32(_SEAL.pack(segment, offset, len(payload), kind)))
    return HEADER.pack(MAGIC, crc, len(payload), kind)


def frame(segment: int, offset: int, kind: int, payload: bytes) -> bytes:
    """A whole record: header and payload."""
    return frame_header(segment, offset, kind, payload) + payload


@dataclasses.dataclass(frozen=True, slots=True)
class Damage:
    """Bytes a scan could not read as records: ``[offset, end)`` of the data scanned."""

    offset: int
    end: int
    reason: str
    tail: bool  # nothing good follows: a torn tail to cut, not a corrupt region to skip


class Scan:
    """The good frames of ``data[start:]`` in order, as ``(offset, kind, start, end)``.

    ``start``/``end`` bound the payload in ``data``. After iterating,
    ``damage`` lists the regions skipped or found torn, and ``end`` is the
    offset just past the last good frame (where a torn tail is cut).
    """

    __slots__ = ("_data", "_segment", "_start", "damage", "end")

    def __init__(self, data: bytes, segment: int, start: int = 0) -> None:
        self._data = data
        self._segment = segment
        self._start = start
        self.damage: list[Damage] = []
        self.end = start

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        data = self._data
        view = memoryview(data)
        segment = self._segment
        size = len(data)
        unpack = HEADER.unpack_from
        seal = _SEAL.pack
        crc32 = zlib.crc32
        last = size - HEADER_SIZE
        p = self._start
        while p < size:
            reason = "truncated record header"
            if p <= last:
                magic, crc, length, kind = unpack(data, p)
                s = p + HEADER_SIZE
                e = s + length
                if magic != MAGIC:
                    reason = "no record marker"
                elif e > size:
                    reason = "record runs past the end of the segment"
                elif crc32(view[s:e], crc32(seal(segment, p, length, kind))) != crc:
                    reason = "CRC mismatch"
                else:
                    yield p, kind, s, e
                    p = e
                    continue
            self.end = p
            if data.count(0, p) == size - p:
                return  # the zero-filled rest of a pre-allocated segment
            found = self._resync(view, p + 1)
            if found < 0:
                self.damage.append(Damage(p, size, reason, tail=True))
                return
            self.damage.append(Damage(p, found, reason, tail=False))
            p = found
        self.end = p

    def _resync(self, view: memoryview, p: int) -> int:
        """Offset of the next good frame at or after ``p``, or -1."""
        data = self._data
        size = len(data)
        while True:
            p = data.find(MAGIC, p)
            if p < 0 or p + HEADER_SIZE > size:
                return -1
            _, crc, length, kind = HEADER.unpack_from(data, p)
            s = p + HEADER_SIZE
            e = s + length
            if e <= size and checksum(self._segment, p, kind, view[s:e]) == crc:
                return p
            p += 1
