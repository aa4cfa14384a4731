"""What the writer wrote since its last good sync, and the records it refuses when the disk fails.

Theory of operation
-------------------
A record is not durable until the ``fdatasync`` after its write succeeds, and
the journal's :class:`~chute.store.reclaim.LiveIndex` only learns of a record
then (:meth:`Unsynced.applied`): reclaiming and paging never act on a record
that may yet be lost. Until then the writer keeps each write here, its bytes
and its records, to write it again at the same place after a failed sync (the
kernel may have dropped those pages) or to take records out of it.

When a write or a sync fails, every sync callback waiting gets an error: the
producers behind them are told their messages were *not stored*. That must be
true, or a producer that sends again makes a duplicate nobody can tell apart.
So the records those callbacks cover (everything appended before them) that
carry what a producer or a committer was told about are *refused*:

* ADD and COMMIT records: new messages and local transactions. Their
  operations go back to the broker, which takes the messages out of their
  queues before anyone is sent them (``Broker.unstored``).
* ACK and ACKS records covered with them, if any add or commit is refused. A
  dead-letter or expiry move is an add of a copy then an ack of the original,
  appended together: refusing the add but writing the ack would lose the
  message. Refusing an ack never loses anything: the message stays in the
  journal and comes back after a restart. Acks with no add refused beside
  them (consumers acking while producers are held off) are kept and written
  again, so consumers can go on freeing space on a full disk.

Everything else (delivery marks, definitions, prepared transactions) is kept
and written again: writing it late changes nothing, and a prepared
transaction's coordinator retries by xid. Records appended after the last
failed callback are not covered by any: they stay, and whoever syncs next is
told the truth about them.

A refused record not yet written is dropped. One already written (the sync
failed) is overwritten in place by a PAD record of the same length
(:class:`~chute.store.records.PadRecord`), so that the records around it stay
where their checksums say they are; the rewrite before the next sync makes
that durable. A write cut short (the disk filled up in the middle) leaves
bytes past what the retry writes; the next write zeroes them (``Appender.write``),
so a scan never finds a refused record there.

Thread-safety: belongs to the writer (whoever holds its cycle lock); the
index is applied under the caller's index lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from chute.core.model.store import AckOp, AddOp, TxOp
from chute.store.disk import Disk
from chute.store.intake import Item
from chute.store.reclaim import LiveIndex
from chute.store.record import HEADER_SIZE, Kind, frame_header
from chute.store.records import AckRecord, AcksRecord, AddRecord, CommitRecord, Record

NEW: Final = frozenset({Kind.ADD, Kind.COMMIT})  # what producers and committers wait for
REFUSABLE: Final = NEW | {Kind.ACK, Kind.ACKS}  # ... and acks, if any of those is refused


def adds_messages(item: Item) -> bool:
    """Whether ``item`` brings new messages: an ADD, or a COMMIT with an add in it (a
    commit of acks only is a consumer's, and goes where acks go)."""
    kind, _, record = item
    if kind == Kind.ADD:
        return True
    return (
        kind == Kind.COMMIT
        and isinstance(record, CommitRecord)
        and any(isinstance(op, AddOp) for op in record.ops)
    )


NOT_REFUSABLE: Final = -1  # the ordinal of a record the writer made itself (reclaiming)
_OFFSET_MASK: Final = (1 << 32) - 1


@dataclasses.dataclass(slots=True)
class Written:
    """One write: its bytes at ``offset`` of the current segment, and its records as
    (ordinal, location, item); ordinals number what the writer took from its intake."""

    offset: int
    data: bytes | bytearray
    records: list[tuple[int, int, Item]]


class Unsynced:
    """The writes to the current segment since its last good sync."""

    __slots__ = ("size", "writes")

    def __init__(self) -> None:
        self.writes: list[Written] = []
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self.writes)

    def add(self, offset: int, data: bytes, records: list[tuple[int, int, Item]]) -> None:
        self.writes.append(Written(offset, data, records))
        self.size += len(data)

    def rewrite(self, disk: Disk, fd: int) -> None:
        """Write every write again at its place (after a failure).

        Raises:
            OSError: a write failed.
        """
        for written in self.writes:
            disk.write(fd, bytes(written.data), written.offset)

    def applied(self, index: LiveIndex) -> None:
        """The sync succeeded: the index learns every record (index lock held); forget all."""
        apply = index.apply
        for written in self.writes:
            for _, location, (_, _, record) in written.records:
                apply(record, location)
        self.writes.clear()
        self.size = 0

    def covers_new(self, covered: int) -> bool:
        """Whether an add or a commit numbered below ``covered`` is here."""
        return any(
            0 <= ordinal < covered and adds_messages(item)
            for written in self.writes
            for ordinal, _, item in written.records
        )

    def refuse(self, segment: int, covered: int, kinds: frozenset[Kind]) -> list[Record]:
        """Overwrite with PAD every record of ``kinds`` numbered below ``covered``; returns
        them."""
        refused: list[Record] = []
        for written in self.writes:
            keep: list[tuple[int, int, Item]] = []
            for entry in written.records:
                ordinal, location, (kind, payload, record) = entry
                if not 0 <= ordinal < covered or kind not in kinds:
                    keep.append(entry)
                    continue
                if isinstance(written.data, bytes):
                    written.data = bytearray(written.data)
                offset = location & _OFFSET_MASK
                at = offset - written.offset
                pad = bytes(len(payload))
                written.data[at : at + HEADER_SIZE + len(payload)] = (
                    frame_header(segment, offset, Kind.PAD, pad) + pad
                )
                refused.append(record)
            written.records = keep
        return refused


def located(
    items: Iterable[Item], location: int, ordinal: int | None
) -> list[tuple[int, int, Item]]:
    """(ordinal, location, item) of ``items`` written back to back from ``location``;
    ordinals count up from ``ordinal``, or are all ``NOT_REFUSABLE`` if it is None."""
    out = []
    for item in items:
        out.append((NOT_REFUSABLE if ordinal is None else ordinal, location, item))
        location += HEADER_SIZE + len(item[1])
        if ordinal is not None:
            ordinal += 1
    return out


def refuse(
    unsynced: Unsynced, carry: list[Item], segment: int | None, covered: int, carried: int
) -> list[Record]:
    """Refuse what the callbacks failing now cover (the records numbered below ``covered``;
    ``carry[0]`` is numbered ``carried``), written (to ``segment``) or not; returns them."""
    count = min(len(carry), covered - carried)
    if not unsynced.covers_new(covered) and not any(
        adds_messages(item) for item in carry[: max(count, 0)]
    ):
        return []  # nothing new refused: acks and the rest are written again
    refused = unsynced.refuse(segment, covered, REFUSABLE) if segment is not None else []
    if count > 0:
        head = carry[:count]
        refused += [record for kind, _, record in head if kind in REFUSABLE]
        carry[:count] = [item for item in head if item[0] not in REFUSABLE]
    return refused


def refused_ops(records: list[Record]) -> list[TxOp]:
    """The core's operations in refused records, in order."""
    ops: list[TxOp] = []
    for record in records:
        match record:
            case AddRecord(op):
                ops.append(op)
            case CommitRecord(tx_ops):
                ops.extend(tx_ops)
            case AckRecord(op):
                ops.append(op)
            case AcksRecord(queue, seqs):
                ops.extend(AckOp(queue, seq) for seq in seqs)
    return ops
