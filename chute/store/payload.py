"""Journal records and their payloads: what each :class:`~chute.store.record.Kind` holds.

Pure, no files. Records are named for the act (after Artemis' journal
records) and carry the core's own values (:class:`~chute.core.store.AddOp`,
:class:`~chute.core.store.QueueDefinition`, ...). Payload layouts
(big-endian; ``s16`` is a u16 length and UTF-8, ``o16``/``o32`` a present u8
then the string)::

    ADD        seq u64 | timestamp i64 | expiration i64 | stored_count u32
               | delivery_count u32 | flags u8 (1 redelivered) | destination s16
               | n_queues u16 | queue s16 x n | content (the rest)
    ACK        seq u64 | queue s16
    ACKS       queue s16 | n u32 | seq u64 x n
    DELIVERED  seq u64 | count u32 | queue s16
    MARKS      queue s16 | n u32 | seq u64 x n | count u32 x n
    DEFINE     kind u8 | name s16 | topic o16 | selector o32 | forward_to o16
    UNDEFINE   name s16
    COMMIT     ops
    PREPARE, COMMIT_PREPARED   xid s16 | ops
    ROLLBACK_PREPARED          xid s16
    CHECKPOINT n u32 | (destination s16 | next_seq u64) x n
               | m u32 | (queue s16 | seq u64 | count u32) x m
    ops        n u32 | (tag u8 (1 add, 2 ack) | length u32 | ADD or ACK payload) x n

``content`` is the message's wire content block
(:func:`chute.content.encode_content`, or ``Message.encoded`` when a
codec already made it); timestamp, expiration and the delivery fields are
not in it, so the ADD payload carries them. ``stored_count`` is the store's
delivery count: zero for a new add, the known count for an add that
compaction moved forward.

ACKS and MARKS are what the journal's writer makes of the acks and delivery
marks of one queue that arrived together (:class:`~chute.store.intake.Intake`):
one record, one frame and one CRC for a consumer's whole batch instead of one
each; a lone ack or mark is still written as ACK or DELIVERED.

A COMMIT_PREPARED record repeats the transaction's operations instead of
pointing back at its PREPARE: every record can be replayed on its own, so
reclaiming never needs to keep a prepare alive for a commit that followed it.

Decoding raises only :class:`~chute.store.errors.CorruptRecord`.

Thread-safety: the functions are pure and may run on any thread (the
module's cache of encoded names is a dict, safe to share under the GIL);
a :class:`Names` belongs to the one recovery or scan that made it.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Final

from chute.content import (
    CONTENT_HEAD,
    DEFAULT_MAX_PROPERTIES,
    PERSISTENT_FLAG,
    decode_content,
    encode_content,
)
from chute.core.store import AckOp, AddOp, QueueDefinition, QueueKind, TxOp
from chute.errors import ChuteError
from chute.message import Message
from chute.store.errors import CorruptRecord
from chute.store.record import Kind

_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_ADD: Final = struct.Struct(">QqqIIBH")  # ... flags, destination length
_ADD_SIZE: Final = _ADD.size
_ADD_HEAD: Final = struct.Struct(">QqqIIB")  # _ADD without the destination's length
_SEQ_NAME: Final = struct.Struct(">QH")
_SEQ_COUNT_NAME: Final = struct.Struct(">QIH")
_NEXT_SEQ: Final = struct.Struct(">Q")
_COUNT: Final = struct.Struct(">QI")
_OP_HEAD: Final = struct.Struct(">BI")
_OP_ADD, _OP_ACK = 1, 2
_REDELIVERED = 1

_QUEUE_KINDS: Final = {QueueKind.QUEUE: 0, QueueKind.SUBSCRIPTION: 1, QueueKind.CALLBACK: 2}
_KIND_BY_TAG: Final = {v: k for k, v in _QUEUE_KINDS.items()}

ENCODE_ERRORS: Final = (ChuteError, ValueError, struct.error, OverflowError)
"""What encoding a record the journal cannot hold may raise (a name over 64 KiB, a
message field the content block cannot carry, a sequence number out of range)."""

_DECODE_ERRORS: Final = (
    struct.error,
    UnicodeDecodeError,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    OverflowError,
    ChuteError,  # RemoteProtocolError and InvalidMessage from the content block
)


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
class RollbackPreparedRecord:
    xid: str


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """Carries what deleted segments knew: sequence high-water marks, delivery counts."""

    next_seq: tuple[tuple[str, int], ...]
    counts: tuple[tuple[str, int, int], ...]  # (queue, seq, count) of live messages


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
    | RollbackPreparedRecord
    | CheckpointRecord
)


# -- encoding ------------------------------------------------------------------------

_names: dict[str, bytes] = {}


def _raw(name: str) -> bytes:
    raw = name.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"a name of {len(raw)} bytes does not fit a journal record")
    return raw


def _s16(name: str) -> bytes:
    """``name`` as s16, cached (names repeat: queues, destinations)."""
    encoded = _names.get(name)
    if encoded is None:
        raw = _raw(name)
        encoded = _U16.pack(len(raw)) + raw
        if len(_names) > 4096:
            _names.clear()
        _names[name] = encoded
    return encoded


def _o16(value: str | None) -> bytes:
    return b"\x00" if value is None else b"\x01" + _s16(value)


def _o32(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return b"\x01" + _U32.pack(len(raw)) + raw


def encode_add(op: AddOp, delivery_count: int = 0) -> bytes:
    """The ADD payload of ``op``.

    Raises:
        ENCODE_ERRORS: the message cannot be encoded (a field too long, a name
            over 64 KiB, a sequence number out of range).
    """
    m = op.message
    content = m.encoded
    if content is None:
        content = encode_content(m)
    queues = op.queues
    head = _ADD_HEAD.pack(
        op.seq,
        m.timestamp,
        m.expiration,
        delivery_count,
        m.delivery_count,
        _REDELIVERED if m.redelivered else 0,
    )
    dest = _s16(op.destination)  # the destination's length and name, as _ADD ends
    if len(queues) == 1:
        return b"".join((head, dest, b"\x00\x01", _s16(queues[0]), content))
    return b"".join((head, dest, _U16.pack(len(queues)), *(_s16(q) for q in queues), content))


def encode_ack(op: AckOp) -> bytes:
    raw = _raw(op.queue)
    return _SEQ_NAME.pack(op.seq, len(raw)) + raw


def encode_delivered(queue: str, seq: int, count: int) -> bytes:
    raw = _raw(queue)
    return _SEQ_COUNT_NAME.pack(seq, count, len(raw)) + raw


def encode_acks(queue: str, seqs: Sequence[int]) -> bytes:
    return b"".join((_s16(queue), _U32.pack(len(seqs)), struct.pack(f">{len(seqs)}Q", *seqs)))


def encode_marks(queue: str, seqs: Sequence[int], counts: Sequence[int]) -> bytes:
    n = len(seqs)
    if len(counts) != n:
        raise ValueError(f"{n} delivery marks but {len(counts)} counts")
    return b"".join(
        (_s16(queue), _U32.pack(n), struct.pack(f">{n}Q", *seqs), struct.pack(f">{n}I", *counts))
    )


def encode_ops(ops: Sequence[TxOp]) -> bytes:
    parts = [_U32.pack(len(ops))]
    for op in ops:
        if isinstance(op, AddOp):
            payload = encode_add(op)
            parts.append(_OP_HEAD.pack(_OP_ADD, len(payload)))
        else:
            payload = encode_ack(op)
            parts.append(_OP_HEAD.pack(_OP_ACK, len(payload)))
        parts.append(payload)
    return b"".join(parts)


def encode(record: Record) -> tuple[Kind, bytes]:
    """The kind and payload of any record (the hot adds and acks have their own functions).

    Raises:
        ENCODE_ERRORS: a message or name cannot be encoded (see :func:`encode_add`).
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
                    _s16(d.name),
                    _o16(d.topic),
                    _o32(d.selector),
                    _o16(d.forward_to),
                )
            )
        case UndefineRecord(name):
            return Kind.UNDEFINE, _s16(name)
        case CommitRecord(ops):
            return Kind.COMMIT, encode_ops(ops)
        case PrepareRecord(xid, ops):
            return Kind.PREPARE, _s16(xid) + encode_ops(ops)
        case CommitPreparedRecord(xid, ops):
            return Kind.COMMIT_PREPARED, _s16(xid) + encode_ops(ops)
        case RollbackPreparedRecord(xid):
            return Kind.ROLLBACK_PREPARED, _s16(xid)
        case CheckpointRecord(next_seq, counts):
            parts = [_U32.pack(len(next_seq))]
            for dest, seq in next_seq:
                parts += (_s16(dest), _NEXT_SEQ.pack(seq))
            parts.append(_U32.pack(len(counts)))
            for queue, seq, count in counts:
                parts += (_s16(queue), _COUNT.pack(seq, count))
            return Kind.CHECKPOINT, b"".join(parts)


# -- decoding ------------------------------------------------------------------------


class Names:
    """Decoded names by their bytes: one ``str`` per queue name however many records hold it."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[bytes, str] = {}

    def intern(self, raw: bytes) -> str:
        """The name whose UTF-8 is ``raw``."""
        name = self._cache.get(raw)
        if name is None:
            name = self._cache[raw] = raw.decode()
        return name

    def read(self, data: bytes, p: int) -> tuple[str, int]:
        """The s16 at ``p`` and the offset after it."""
        (length,) = _U16.unpack_from(data, p)
        p += 2
        q = p + length
        if q > len(data):
            raise IndexError("name runs past the record")
        raw = data[p:q]
        name = self._cache.get(raw)
        if name is None:
            name = self._cache[raw] = raw.decode()
        return name, q


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


def add_keys(data: bytes, start: int, names: Names) -> tuple[int, list[str]]:
    """The seq and queues of the ADD payload at ``start``, without decoding the message.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, _, _, _, _, _, dest_len = _ADD.unpack_from(data, start)
        p = start + _ADD_SIZE + dest_len
        (count,) = _U16.unpack_from(data, p)
        p += 2
        queues = []
        for _ in range(count):
            queue, p = names.read(data, p)
            queues.append(queue)
    except _DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed add record: {exc}") from exc
    return seq, queues


@dataclasses.dataclass(frozen=True, slots=True)
class AddHead:
    """What an ADD payload says without decoding its message (lazy recovery)."""

    seq: int
    destination: str
    queues: tuple[str, ...]
    stored_count: int
    persistent: bool
    size: int  # of the content block: about the message's size


def add_head(data: bytes, start: int, end: int, names: Names) -> AddHead:
    """The ADD payload's keys and flags, leaving its message undecoded.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, _, _, stored, _, _, dest_len = _ADD.unpack_from(data, start)
        p = start + _ADD_SIZE
        q = p + dest_len
        destination = names.intern(data[p:q])
        (count,) = _U16.unpack_from(data, q)
        p = q + 2
        queues = []
        for _ in range(count):
            queue, p = names.read(data, p)
            queues.append(queue)
        if p + CONTENT_HEAD.size > end:
            raise IndexError("add header runs past the record")
        flags = data[p + 1]
    except _DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed add record: {exc}") from exc
    return AddHead(seq, destination, tuple(queues), stored, bool(flags & PERSISTENT_FLAG), end - p)


def op_add_keys(
    kind: int, data: bytes, start: int, end: int, names: Names
) -> list[tuple[int, list[str], int, int]]:
    """(seq, queues, start, end) of every add in a COMMIT or COMMIT_PREPARED payload.

    Cheap: the messages are not decoded. Reclaiming asks which adds of a
    transaction record are still live before it decodes any; paging reads back
    only the adds it needs (``decode_add(data, start, end, ...)``).

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        p = start
        if kind != Kind.COMMIT:
            _, p = names.read(data, p)
        (count,) = _U32.unpack_from(data, p)
        p += 4
        keys = []
        for _ in range(count):
            tag, length = _OP_HEAD.unpack_from(data, p)
            p += _OP_HEAD.size
            if tag == _OP_ADD:
                seq, queues = add_keys(data, p, names)
                keys.append((seq, queues, p, p + length))
            p += length
            if p > end:
                raise IndexError("operation runs past the record")
    except _DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed transaction record: {exc}") from exc
    return keys


def decode_add(data: bytes, start: int, end: int, names: Names) -> tuple[AddOp, int]:
    """The add and the stored delivery count of the ADD payload ``data[start:end]``.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, timestamp, expiration, stored, delivered, flags, dest_len = _ADD.unpack_from(
            data, start
        )
        p = start + _ADD_SIZE
        q = p + dest_len
        destination = names.intern(data[p:q])
        (count,) = _U16.unpack_from(data, q)
        p = q + 2
        if count == 1:  # the common case, inlined
            (length,) = _U16.unpack_from(data, p)
            p += 2
            q = p + length
            queues: tuple[str, ...] = (names.intern(data[p:q]),)
            p = q
        else:
            found = []
            for _ in range(count):
                queue, p = names.read(data, p)
                found.append(queue)
            queues = tuple(found)
        if p > end:
            raise IndexError("add header runs past the record")
        message: Message = decode_content(
            data,
            p,
            end,
            DEFAULT_MAX_PROPERTIES,
            timestamp,
            expiration,
            delivered,
            flags & _REDELIVERED != 0,
        )
    except _DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed add record: {exc}") from exc
    return AddOp(destination, queues, seq, message), stored


def decode_ack(data: bytes, start: int, names: Names) -> AckOp:
    """The ack of the ACK payload at ``start``.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, _ = _SEQ_NAME.unpack_from(data, start)
        queue, _ = names.read(data, start + 8)
    except _DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed ack record: {exc}") from exc
    return AckOp(queue, seq)


def _decode_ops(data: bytes, p: int, end: int, names: Names) -> tuple[TxOp, ...]:
    (count,) = _U32.unpack_from(data, p)
    p += 4
    ops: list[TxOp] = []
    for _ in range(count):
        tag, length = _OP_HEAD.unpack_from(data, p)
        p += _OP_HEAD.size
        q = p + length
        if q > end:
            raise IndexError("operation runs past the record")
        if tag == _OP_ADD:
            op, _ = decode_add(data, p, q, names)
            ops.append(op)
        elif tag == _OP_ACK:
            ops.append(decode_ack(data, p, names))
        else:
            raise ValueError(f"unknown operation tag {tag}")
        p = q
    if p != end:
        raise ValueError("operations do not fill the record")
    return tuple(ops)


def decode(kind: int, data: bytes, start: int, end: int, names: Names) -> Record:
    """The record of ``kind`` whose payload is ``data[start:end]``.

    Raises:
        CorruptRecord: an unknown kind or a malformed payload.
    """
    try:
        return _decode(kind, data, start, end, names)
    except CorruptRecord:
        raise
    except _DECODE_ERRORS as exc:
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
            forward_to, _ = _o16_at(data, p, names)
            return DefineRecord(QueueDefinition(name, queue_kind, topic, selector, forward_to))
        case Kind.UNDEFINE:
            return UndefineRecord(names.read(data, start)[0])
        case Kind.COMMIT:
            return CommitRecord(_decode_ops(data, start, end, names))
        case Kind.PREPARE | Kind.COMMIT_PREPARED:
            xid, p = names.read(data, start)
            ops = _decode_ops(data, p, end, names)
            if kind == Kind.PREPARE:
                return PrepareRecord(xid, ops)
            return CommitPreparedRecord(xid, ops)
        case Kind.ROLLBACK_PREPARED:
            return RollbackPreparedRecord(names.read(data, start)[0])
        case Kind.CHECKPOINT:
            return _decode_checkpoint(data, start, names)
    raise CorruptRecord(f"unknown record kind {kind}")


def _counted(data: bytes, p: int, end: int, each: int) -> tuple[int, int]:
    """The u32 count at ``p`` of entries of ``each`` bytes that must fill the record to
    ``end``, and where they start."""
    (n,) = _U32.unpack_from(data, p)
    p += 4
    if p + n * each != end:
        raise ValueError(f"{n} entries of {each} bytes do not fill the record")
    return n, p


def _decode_checkpoint(data: bytes, p: int, names: Names) -> CheckpointRecord:
    (count,) = _U32.unpack_from(data, p)
    p += 4
    next_seq = []
    for _ in range(count):
        dest, p = names.read(data, p)
        (seq,) = _NEXT_SEQ.unpack_from(data, p)
        p += 8
        next_seq.append((dest, seq))
    (count,) = _U32.unpack_from(data, p)
    p += 4
    counts = []
    for _ in range(count):
        queue, p = names.read(data, p)
        seq, n = _COUNT.unpack_from(data, p)
        p += 12
        counts.append((queue, seq, n))
    return CheckpointRecord(tuple(next_seq), tuple(counts))
