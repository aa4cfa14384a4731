"""Journal records: what each :class:`~chute.store.record.Kind` holds, as values and as bytes.

Pure, no files. Records are named for the act (after Artemis' journal
records) and carry the core's own values (:class:`~chute.core.model.store.AddOp`,
:class:`~chute.core.model.store.QueueDefinition`, ...). :func:`encode` gives any
record's kind and payload and :func:`decode` reads it back. The payloads of
the core's operations, which the journal's hot paths write and read without
a record around them (ADD, ACK, and the ``ops`` of a transaction), are
:mod:`chute.store.payload`'s, with the names every payload holds. The other
layouts (big-endian; ``s16`` is a u16 length and UTF-8, ``o16``/``o32`` a
present u8 then the string)::

    ACKS       queue s16 | n u32 | seq u64 x n
    DELIVERED  seq u64 | count u32 | queue s16
    MARKS      queue s16 | n u32 | seq u64 x n | count u32 x n
    DEFINE     kind u8 | name s16 | topic o16 | selector o32 | forward_to o16
               [| owner o16: who made it (a subscription's user, a queue's maker); absent
                in older journals]
    UNDEFINE   name s16
    COMMIT     ops
    PREPARE, COMMIT_PREPARED   xid s16 | ops
    ROLLBACK_PREPARED          xid s16
    COMMIT_IN_PLACE            xid s16: commits the PREPARE of xid, whose adds stay
                               where that record holds them; absent in older journals
    CHECKPOINT n u32 | (destination s16 | next_seq u64) x n
               | m u32 | (queue s16 | seq u64 | count u32) x m
               [| k u32 | (first u64 | last u64) x k: the segments the pass kept,
                as runs; absent in older journals
                [| j u32 | (stream s16 | first u64) x j: each stream's first offset as
                 the last FIRST record of it said; absent in older journals]]
    PAD        zero bytes (any number): holds nothing
    SENT       producer s16 | message id s16: a producer's request stored (duplicate
               detection, chute.core.rules.dedup); keeps nothing alive
    FIRST      stream s16 | first u64: where retention (or a purge) left a compacted
               stream's first offset, which compaction never moves (Kafka's log start
               offset; other streams' first is their oldest message kept); the
               newest of a stream holds; keeps nothing alive (a checkpoint carries it
               on); absent in older journals

ACKS and MARKS are what the journal's writer makes of the acks and delivery
marks of one queue that arrived together (:class:`~chute.store.intake.Intake`):
one record, one frame and one CRC for a consumer's whole batch instead of one
each; a lone ack or mark is still written as ACK or DELIVERED.

A PAD record takes the place of records the writer wrote but then refused
(a failed sync, :mod:`chute.store.writer`): same length, same place, nothing in
it, so the records around it stay where their checksums say they are.

A prepared transaction is committed by a COMMIT_IN_PLACE record, its xid only:
the messages stay in the PREPARE record, written (and synced) once, and that
record is where they live from then on (:class:`~chute.store.reclaim.LiveIndex`
keeps the commit for as long as the PREPARE's segment is kept, so the two are
replayed together or not at all). Older journals committed with COMMIT_PREPARED,
which repeats the transaction's operations; they are still read.

Decoding raises only :class:`~chute.store.errors.CorruptRecord`.

Thread-safety: a record is a value nobody changes once it is made, and the
functions are pure: both may be shared across threads.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any, Final

from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, TxOp
from chute.store.errors import CorruptRecord
from chute.store.payload import (
    DECODE_ERRORS,
    Names,
    decode_ack,
    decode_add,
    decode_ops,
    encode_ack,
    encode_add,
    encode_ops,
    name_bytes,
    s16,
)
from chute.store.record import Kind

_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_SEQ_COUNT_NAME: Final = struct.Struct(">QIH")
_NEXT_SEQ: Final = struct.Struct(">Q")
_COUNT: Final = struct.Struct(">QI")
_RUN: Final = struct.Struct(">QQ")
_FIRST: Final = struct.Struct(">Q")

_QUEUE_KINDS: Final = {
    QueueKind.QUEUE: 0,
    QueueKind.SUBSCRIPTION: 1,
    QueueKind.CALLBACK: 2,
    QueueKind.STREAM: 3,
    QueueKind.LEDGER: 4,
    QueueKind.EXCHANGE: 5,
    QueueKind.BINDING: 6,
    QueueKind.DECLARATION: 7,
}
_KIND_BY_TAG: Final = {v: k for k, v in _QUEUE_KINDS.items()}


# -- records -------------------------------------------------------------------------
# Values nobody changes; the per-message ones are not ``frozen`` only because a frozen
# dataclass's ``__init__`` costs about 2.5 times as much.


@dataclasses.dataclass(slots=True)
class AddRecord:
    op: AddOp
    delivery_count: int = 0  # the store's count (non-zero only for a compacted add)


@dataclasses.dataclass(slots=True)
class AckRecord:
    op: AckOp


@dataclasses.dataclass(slots=True)
class AcksRecord:
    """Acks of several messages of one queue."""

    queue: str
    seqs: tuple[int, ...]


@dataclasses.dataclass(slots=True)
class DeliveredRecord:
    queue: str
    seq: int
    count: int


@dataclasses.dataclass(slots=True)
class MarksRecord:
    """Delivery marks of several messages of one queue: ``counts[i]`` is ``seqs[i]``'s."""

    queue: str
    seqs: tuple[int, ...]
    counts: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class DefineRecord:
    definition: QueueDefinition


@dataclasses.dataclass(frozen=True, slots=True)
class UndefineRecord:
    name: str


@dataclasses.dataclass(slots=True)
class CommitRecord:
    ops: tuple[TxOp, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class PrepareRecord:
    xid: str
    ops: tuple[TxOp, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CommitPreparedRecord:
    xid: str
    ops: tuple[TxOp, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CommitInPlaceRecord:
    """Commits the prepared transaction ``xid``: its operations are its PREPARE's."""

    xid: str


@dataclasses.dataclass(frozen=True, slots=True)
class RollbackPreparedRecord:
    xid: str


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """Carries what deleted segments knew: sequence high-water marks, delivery counts; and
    which segments the reclaim pass that wrote it kept, so that a recovery can tell a
    segment reclaimed from one lost (:mod:`chute.store.gaps`)."""

    next_seq: tuple[tuple[str, int], ...]
    counts: tuple[tuple[str, int, int], ...]  # (queue, seq, count) of live messages
    kept: tuple[tuple[int, int], ...] | None = None  # runs (first, last); None: not known
    firsts: tuple[tuple[str, int], ...] = ()  # (stream, first): what FIRST records said


@dataclasses.dataclass(frozen=True, slots=True)
class FirstRecord:
    """Where retention (or a purge) left stream ``stream``'s first offset: a restart
    recovers it there, whatever compaction removed above it since."""

    stream: str
    first: int


@dataclasses.dataclass(slots=True)
class SentRecord:
    """A producer's request stored, named by its first message id (not frozen: one is
    written per request of a producer that names itself)."""

    producer: str
    message_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class PadRecord:
    """Nothing, ``size`` bytes long: a refused record's place."""

    size: int


Record = (
    AddRecord
    | AckRecord
    | AcksRecord
    | DeliveredRecord
    | MarksRecord
    | DefineRecord
    | UndefineRecord
    | CommitRecord
    | PrepareRecord
    | CommitPreparedRecord
    | CommitInPlaceRecord
    | RollbackPreparedRecord
    | CheckpointRecord
    | PadRecord
    | SentRecord
    | FirstRecord
)


# -- encoding ------------------------------------------------------------------------


def _o16(value: str | None) -> bytes:
    return b"\x00" if value is None else b"\x01" + s16(value)


def _o32(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return b"\x01" + _U32.pack(len(raw)) + raw


def encode_delivered(queue: str, seq: int, count: int) -> bytes:
    raw = name_bytes(queue)
    return _SEQ_COUNT_NAME.pack(seq, count, len(raw)) + raw


def encode_acks(queue: str, seqs: Sequence[int]) -> bytes:
    return b"".join((s16(queue), _U32.pack(len(seqs)), struct.pack(f">{len(seqs)}Q", *seqs)))


def encode_marks(queue: str, seqs: Sequence[int], counts: Sequence[int]) -> bytes:
    n = len(seqs)
    if len(counts) != n:
        raise ValueError(f"{n} delivery marks but {len(counts)} counts")
    return b"".join(
        (s16(queue), _U32.pack(n), struct.pack(f">{n}Q", *seqs), struct.pack(f">{n}I", *counts))
    )


def encode(record: Record) -> tuple[Kind, bytes]:
    """The kind and payload of any record (the hot adds and acks have their own functions).

    Raises:
        ENCODE_ERRORS: a message or name cannot be encoded (see
            :data:`~chute.store.payload.ENCODE_ERRORS`).
    """
    match record:
        case AddRecord(op, count):
            return Kind.ADD, encode_add(op, count)
        case AckRecord(op):
            return Kind.ACK, encode_ack(op)
        case AcksRecord(queue, seqs):
            return Kind.ACKS, encode_acks(queue, seqs)
        case DeliveredRecord(queue, seq, count):
            return Kind.DELIVERED, encode_delivered(queue, seq, count)
        case MarksRecord(queue, seqs, counts):
            return Kind.MARKS, encode_marks(queue, seqs, counts)
        case DefineRecord(d):
            return Kind.DEFINE, b"".join(
                (
                    _U8.pack(_QUEUE_KINDS[d.kind]),
                    s16(d.name),
                    _o16(d.topic),
                    _o32(d.selector),
                    _o16(d.forward_to),
                    _o16(d.owner) if d.owner is not None else b"",
                )
            )
        case UndefineRecord(name):
            return Kind.UNDEFINE, s16(name)
        case CommitRecord(ops):
            return Kind.COMMIT, encode_ops(ops)
        case PrepareRecord(xid, ops):
            return Kind.PREPARE, encode_ops(ops, s16(xid))
        case CommitPreparedRecord(xid, ops):
            return Kind.COMMIT_PREPARED, encode_ops(ops, s16(xid))
        case CommitInPlaceRecord(xid):
            return Kind.COMMIT_IN_PLACE, s16(xid)
        case RollbackPreparedRecord(xid):
            return Kind.ROLLBACK_PREPARED, s16(xid)
        case CheckpointRecord(next_seq, counts, kept, firsts):
            parts = [_U32.pack(len(next_seq))]
            for dest, seq in next_seq:
                parts += (s16(dest), _NEXT_SEQ.pack(seq))
            parts.append(_U32.pack(len(counts)))
            for queue, seq, count in counts:
                parts += (s16(queue), _COUNT.pack(seq, count))
            if kept is not None:
                parts.append(_U32.pack(len(kept)))
                parts += (_RUN.pack(first, last) for first, last in kept)
            elif firsts:
                raise ValueError("a checkpoint carries first offsets only with its kept segments")
            if firsts:
                parts.append(_U32.pack(len(firsts)))
                for stream, first in firsts:
                    parts += (s16(stream), _FIRST.pack(first))
            return Kind.CHECKPOINT, b"".join(parts)
        case PadRecord(size):
            return Kind.PAD, bytes(size)
        case SentRecord(producer, message_id):
            return Kind.SENT, s16(producer) + s16(message_id)
        case FirstRecord(stream, first):
            return Kind.FIRST, s16(stream) + _FIRST.pack(first)


# -- decoding ------------------------------------------------------------------------


def decode(kind: int, data: bytes, start: int, end: int, names: Names) -> Record:
    """The record of ``kind`` whose payload is ``data[start:end]``.

    Raises:
        CorruptRecord: an unknown kind or a malformed payload.
    """
    try:
        return _decode(kind, data, start, end, names)
    except CorruptRecord:
        raise
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed record of kind {kind}: {exc}") from exc


def _decode(kind: int, data: bytes, start: int, end: int, names: Names) -> Record:
    match kind:
        case Kind.ADD:
            op, count = decode_add(data, start, end, names)
            return AddRecord(op, count)
        case Kind.ACK:
            return AckRecord(decode_ack(data, start, names))
        case Kind.DELIVERED:
            seq, count, _ = _SEQ_COUNT_NAME.unpack_from(data, start)
            queue, _ = names.read(data, start + 12)
            return DeliveredRecord(queue, seq, count)
        case Kind.ACKS:
            queue, p = names.read(data, start)
            n, p = _counted(data, p, end, 8)
            return AcksRecord(queue, struct.unpack_from(f">{n}Q", data, p))
        case Kind.MARKS:
            queue, p = names.read(data, start)
            n, p = _counted(data, p, end, 12)
            seqs = struct.unpack_from(f">{n}Q", data, p)
            return MarksRecord(queue, seqs, struct.unpack_from(f">{n}I", data, p + 8 * n))
        case Kind.DEFINE:
            queue_kind = _KIND_BY_TAG[data[start]]
            name, p = names.read(data, start + 1)
            topic, p = _o16_at(data, p, names)
            selector, p = _o32_at(data, p)
            forward_to, p = _o16_at(data, p, names)
            owner = _o16_at(data, p, names)[0] if p < end else None
            return DefineRecord(
                QueueDefinition(name, queue_kind, topic, selector, forward_to, owner)
            )
        case Kind.UNDEFINE:
            return UndefineRecord(names.read(data, start)[0])
        case Kind.COMMIT:
            return CommitRecord(decode_ops(data, start, end, names))
        case Kind.PREPARE | Kind.COMMIT_PREPARED:
            xid, p = names.read(data, start)
            ops = decode_ops(data, p, end, names)
            if kind == Kind.PREPARE:
                return PrepareRecord(xid, ops)
            return CommitPreparedRecord(xid, ops)
        case Kind.COMMIT_IN_PLACE:
            return CommitInPlaceRecord(names.read(data, start)[0])
        case Kind.ROLLBACK_PREPARED:
            return RollbackPreparedRecord(names.read(data, start)[0])
        case Kind.CHECKPOINT:
            return _decode_checkpoint(data, start, end, names)
        case Kind.PAD:
            return PadRecord(end - start)
        case Kind.SENT:
            producer, p = names.read(data, start)
            (length,) = _U16.unpack_from(data, p)
            if p + 2 + length != end:
                raise ValueError("a SENT record's id does not end the record")
            return SentRecord(producer, data[p + 2 : end].decode())
        case Kind.FIRST:
            stream, p = names.read(data, start)
            if p + _FIRST.size != end:
                raise ValueError("a FIRST record's offset does not end the record")
            (first,) = _FIRST.unpack_from(data, p)
            return FirstRecord(stream, first)
    raise CorruptRecord(f"unknown record kind {kind}")


def _counted(data: bytes, p: int, end: int, each: int) -> tuple[int, int]:
    """The u32 count at ``p`` of entries of ``each`` bytes that must fill the record to
    ``end``, and where they start."""
    (n,) = _U32.unpack_from(data, p)
    p += 4
    if p + n * each != end:
        raise ValueError(f"{n} entries of {each} bytes do not fill the record")
    return n, p


def _named(
    data: bytes, p: int, names: Names, layout: struct.Struct
) -> tuple[list[tuple[Any, ...]], int]:
    """A u32 count at ``p`` of entries, each a name then ``layout``: the entries as
    ``(name, *fields)``, and where they end."""
    (count,) = _U32.unpack_from(data, p)
    p += 4
    entries: list[tuple[Any, ...]] = []
    for _ in range(count):
        name, p = names.read(data, p)
        entries.append((name, *layout.unpack_from(data, p)))
        p += layout.size
    return entries, p


def _decode_checkpoint(data: bytes, p: int, end: int, names: Names) -> CheckpointRecord:
    next_seq, p = _named(data, p, names, _NEXT_SEQ)
    counts, p = _named(data, p, names, _COUNT)
    if p >= end:
        return CheckpointRecord(tuple(next_seq), tuple(counts))
    (n,) = _U32.unpack_from(data, p)
    p += 4
    if p + n * _RUN.size > end:
        raise ValueError(f"{n} kept runs run past the record")
    kept = tuple(_RUN.unpack_from(data, p + i * _RUN.size) for i in range(n))
    p += n * _RUN.size
    if p == end:  # a checkpoint without first offsets (as older journals wrote them all)
        return CheckpointRecord(tuple(next_seq), tuple(counts), kept)
    firsts, p = _named(data, p, names, _FIRST)
    if p != end:
        raise ValueError("a checkpoint's first offsets do not fill the record")
    return CheckpointRecord(tuple(next_seq), tuple(counts), kept, tuple(firsts))


def _o16_at(data: bytes, p: int, names: Names) -> tuple[str | None, int]:
    if data[p] == 0:
        return None, p + 1
    return names.read(data, p + 1)


def _o32_at(data: bytes, p: int) -> tuple[str | None, int]:
    if data[p] == 0:
        return None, p + 1
    (length,) = _U32.unpack_from(data, p + 1)
    q = p + 5 + length
    if q > len(data):
        raise IndexError("string runs past the record")
    return data[p + 5 : q].decode(), q
