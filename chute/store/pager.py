"""Reading paged messages back from the journal's segments.

A paging queue (:mod:`chute.core.paging`) keeps nothing in memory for a
paged message: the journal's :class:`~chute.store.reclaim.LiveIndex` knows
where its live add record is, and :func:`read_paged` reads those records
back, in sequence order. A FIFO backlog's records sit one after another in
a segment, so one ``pread`` per segment fetches a whole window; a record
that the read-ahead cut short is read on its own.

A location can point at an ADD record or at a transaction's COMMIT (or
COMMIT_PREPARED) record holding the add among its operations.

The caller holds the writer's ``index_lock`` (so no location moves and no
segment is deleted meanwhile) and ``files``.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Final

from chute.core.store import AddOp, StoredMessage
from chute.message import Message
from chute.store.errors import CorruptRecord
from chute.store.payload import CommitPreparedRecord, CommitRecord, Names, decode, decode_add
from chute.store.reclaim import SEGMENT_SHIFT, LiveIndex
from chute.store.record import HEADER, HEADER_SIZE, MAGIC, Kind, checksum
from chute.store.segment import segment_path

log = logging.getLogger(__name__)

_SLACK: Final = 64 << 10  # read this much past the last record's start, for its body
_OFFSET_MASK: Final = (1 << SEGMENT_SHIFT) - 1


def read_paged(
    directory: str, index: LiveIndex, queue: str, after: int, limit: int
) -> list[StoredMessage]:
    """Up to ``limit`` live messages of ``queue`` numbered above ``after``, in order.

    A record that fails its check is logged and left out (it is damaged on
    disk; reading it again will not mend it).

    Raises:
        OSError: a segment cannot be read.
    """
    held = index.locations.get(queue)
    if not held or limit <= 0:
        return []
    wanted = list(itertools.islice(held.after(after), limit))
    counts = index.counts.get(queue) or {}
    names = Names()
    out: list[StoredMessage] = []
    for segment, group in itertools.groupby(wanted, key=lambda sl: sl[1] >> SEGMENT_SHIFT):
        picks = list(group)
        fd = os.open(segment_path(directory, segment), os.O_RDONLY | os.O_CLOEXEC)
        try:
            low = min(loc & _OFFSET_MASK for _, loc in picks)
            high = max(loc & _OFFSET_MASK for _, loc in picks)
            chunk = os.pread(fd, high - low + _SLACK, low)
            for seq, location in picks:
                offset = location & _OFFSET_MASK
                message = _message_at(fd, chunk, low, segment, offset, seq, queue, names)
                if message is not None:
                    out.append(StoredMessage(seq, message, counts.get(seq, 0)))
        finally:
            os.close(fd)
    return out


def _message_at(  # noqa: PLR0917 - private
    fd: int,
    chunk: bytes,
    low: int,
    segment: int,
    offset: int,
    seq: int,
    queue: str,
    names: Names,
) -> Message | None:
    p = offset - low
    if p + HEADER_SIZE > len(chunk):
        chunk, p = os.pread(fd, HEADER_SIZE, offset), 0
    magic, crc, length, kind = HEADER.unpack_from(chunk, p)
    start, end = p + HEADER_SIZE, p + HEADER_SIZE + length
    if end > len(chunk):
        chunk = os.pread(fd, HEADER_SIZE + length, offset)
        start, end = HEADER_SIZE, HEADER_SIZE + length
    payload = memoryview(chunk)[start:end]
    if magic != MAGIC or len(payload) != length or checksum(segment, offset, kind, payload) != crc:
        log.error(
            "journal: paged record at segment %d offset %d is damaged; skipped", segment, offset
        )
        return None
    try:
        if kind == Kind.ADD:
            op, _ = decode_add(chunk, start, end, names)
            return op.message
        record = decode(Kind(kind), chunk, start, end, names)
    except (CorruptRecord, ValueError) as exc:
        log.error(
            "journal: paged record at segment %d offset %d: %s; skipped", segment, offset, exc
        )
        return None
    if isinstance(record, CommitRecord | CommitPreparedRecord):
        for tx_op in record.ops:
            if isinstance(tx_op, AddOp) and tx_op.seq == seq and queue in tx_op.queues:
                return tx_op.message
    log.error("journal: segment %d offset %d holds no add of %s #%d", segment, offset, queue, seq)
    return None
