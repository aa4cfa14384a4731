"""The payloads of the core's operations: an add, an ack, and a transaction's list of them.

Pure, no files. These are the journal's hot paths: every message goes in
through :func:`encode_add` (or :func:`encode_ops`) and comes back through
:func:`decode_add` (or :func:`decode_ops`), or is read without being decoded
(:mod:`chute.store.heads`: lazy recovery, reclaiming, paging, stream reads). They
take and give the core's own values (:class:`~chute.core.model.store.AddOp`,
:class:`~chute.core.model.store.AckOp`); the records that carry them, and the
payloads of every other kind, are :mod:`chute.store.records`', built on the names
and errors here. Payload layouts (big-endian; ``s16`` is a u16 length and UTF-8)::

    ADD        seq u64 | timestamp i64 | expiration i64 | stored_count u32
               | delivery_count u32 | flags u8 (1 redelivered) | destination s16
               | n_queues u16 | queue s16 x n | content (the rest)
    ACK        seq u64 | queue s16
    ops        n u32 | (tag u8 (1 add, 2 ack, 3 batch) | length u32 | payload) x n
    BATCH      first u64 | count u32 | destination s16 | n_queues u16 | queue s16 x n
               | (timestamp i64 | expiration i64 | length u32 | content) x count

A BATCH (an operation of a transaction's ``ops``) holds ``count`` new messages
(stored and delivery counts 0, not redelivered) added to the same queues, numbered
``first`` on: what a ``send_many`` or a prepared chunk of the Spark sink brings,
each message's names and numbers written once for all of them (journals written
before it hold an ADD operation for each).

``content`` is the message's wire content block
(:func:`chute.content.encode_content`, or ``Message.encoded`` when a
codec already made it); timestamp, expiration and the delivery fields are
not in it, so the ADD payload carries them. ``stored_count`` is the store's
delivery count: zero for a new add, the known count for an add that
compaction moved forward.

Decoding raises only :class:`~chute.store.errors.CorruptRecord`, but for
:func:`decode_ops`, whose caller turns its :data:`DECODE_ERRORS` into one.

Thread-safety: the functions are pure and may run on any thread (the
module's cache of encoded names is a dict, safe to share under the GIL);
a :class:`Names` belongs to the one recovery or scan that made it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Final, cast

from chute.content import (
    DEFAULT_MAX_PROPERTIES,
    decode_content,
    encode_content,
)
from chute.core.model.store import AckOp, AddOp, TxOp
from chute.errors import ChuteError
from chute.message import Message
from chute.store.errors import CorruptRecord

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
# the layouts, shared with chute.store.heads (which reads them without decoding)
ADD_FIXED: Final = struct.Struct(">QqqIIBH")  # an ADD's head up to its destination's length
_ADD_HEAD: Final = struct.Struct(">QqqIIB")  # ADD_FIXED without the destination's length
_SEQ_NAME: Final = struct.Struct(">QH")
OP_HEAD: Final = struct.Struct(">BI")
OP_ADD_TIMES: Final = struct.Struct(">BIQqq")  # OP_HEAD, then an ADD's seq and times
_OP_ADD_HEAD: Final = struct.Struct(">BIQqqIIB")  # OP_HEAD, then _ADD_HEAD
NAMES_AT: Final = ADD_FIXED.size - 2  # where an ADD payload's destination (length, name) starts
_OP_BATCH_HEAD: Final = struct.Struct(">BIQI")  # OP_HEAD, then BATCH_FIRST
BATCH_FIRST: Final = struct.Struct(">QI")  # a BATCH's first seq and count
BATCH_ITEM: Final = struct.Struct(">qqI")  # a batched message's timestamp, expiration, length
OP_ADD: Final = 1  # an operation's tag
OP_ACK: Final = 2
OP_BATCH: Final = 3
_REDELIVERED = 1

ENCODE_ERRORS: Final = (ChuteError, ValueError, struct.error, OverflowError)
"""What encoding a record the journal cannot hold may raise (a name over 64 KiB, a
message field the content block cannot carry, a sequence number out of range)."""

DECODE_ERRORS: Final = (
    struct.error,
    UnicodeDecodeError,
    IndexError,
    KeyError,
    ValueError,
    TypeError,
    OverflowError,
    ChuteError,  # RemoteProtocolError and InvalidMessage from the content block
)
"""What decoding a malformed payload may raise before it is turned into
:class:`~chute.store.errors.CorruptRecord`."""


# -- names ---------------------------------------------------------------------------

_names: dict[str, bytes] = {}


def name_bytes(name: str) -> bytes:
    """``name`` in UTF-8, refused if its length does not fit a u16."""
    raw = name.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"a name of {len(raw)} bytes does not fit a journal record")
    return raw


def s16(name: str) -> bytes:
    """``name`` as s16, cached (names repeat: queues, destinations)."""
    encoded = _names.get(name)
    if encoded is None:
        raw = name_bytes(name)
        encoded = _U16.pack(len(raw)) + raw
        if len(_names) > 4096:
            _names.clear()
        _names[name] = encoded
    return encoded


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


# -- encoding ------------------------------------------------------------------------


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
    dest = s16(op.destination)  # the destination's length and name, as ADD_FIXED ends
    if len(queues) == 1:
        return b"".join((head, dest, b"\x00\x01", s16(queues[0]), content))
    return b"".join((head, dest, _U16.pack(len(queues)), *(s16(q) for q in queues), content))


def encode_ack(op: AckOp) -> bytes:
    raw = name_bytes(op.queue)
    return _SEQ_NAME.pack(op.seq, len(raw)) + raw


def encode_ops(ops: Sequence[TxOp], head: bytes = b"") -> bytes:
    """The ``ops`` payload of a transaction's operations.

    What arrives together (a ``send_many``, a prepared chunk of the Spark sink) is a run
    of adds of one destination to the same queues at consecutive numbers: such a run of
    new messages (never delivered) is one BATCH operation, its names and first number
    written once and each message its times, its length and its content block, in one
    join for the whole payload. An add on its own is an ADD operation, the bytes
    :func:`encode_add` makes.

    ``head`` goes before it (a PREPARE's xid): the payload is joined once, not copied
    again to put it behind.

    Raises:
        ENCODE_ERRORS: as :func:`encode_add`.
    """
    parts = [head, b""]
    append = parts.append
    entries = 0
    i = 0
    n = len(ops)
    while i < n:
        op = ops[i]
        entries += 1
        if isinstance(op, AddOp):
            j = _run_end(ops, op, i)
            if j - i > 1:
                _encode_batch(ops, op, i, j, parts)
                i = j
                continue
            m = op.message
            content = m.encoded
            if content is None:
                content = encode_content(m)
            names = _names_of(op)
            append(
                _OP_ADD_HEAD.pack(
                    OP_ADD,
                    _ADD_HEAD.size + len(names) + len(content),
                    op.seq,
                    m.timestamp,
                    m.expiration,
                    0,
                    m.delivery_count,
                    _REDELIVERED if m.redelivered else 0,
                )
            )
            append(names)
            append(content)
        else:
            payload = encode_ack(op)
            append(OP_HEAD.pack(OP_ACK, len(payload)))
            append(payload)
        i += 1
    parts[1] = _U32.pack(entries)
    return b"".join(parts)


def _run_end(ops: Sequence[TxOp], first: AddOp, i: int) -> int:
    """The index after the run of adds from ``first`` (``ops[i]``) that one BATCH can
    hold: new messages of the same destination and queues at consecutive numbers."""
    if first.message.delivery_count or first.message.redelivered:
        return i + 1
    destination, queues, seq = first.destination, first.queues, first.seq
    j = i + 1
    n = len(ops)
    while j < n:
        op = ops[j]
        seq += 1
        if (
            type(op) is not AddOp
            or op.seq != seq
            or op.destination != destination
            or op.queues != queues
            or op.message.delivery_count
            or op.message.redelivered
        ):
            break
        j += 1
    return j


def _encode_batch(ops: Sequence[TxOp], first: AddOp, i: int, j: int, parts: list[bytes]) -> None:
    """Append the BATCH operation of ``ops[i:j]`` (a run :func:`_run_end` found from
    ``first``) to ``parts``."""
    names = _names_of(first)
    start = len(parts)
    parts.append(b"")  # the head, once the length is known
    append = parts.append
    pack = BATCH_ITEM.pack
    size = 0
    for k in range(i, j):
        m = cast("AddOp", ops[k]).message  # _run_end checked
        content = m.encoded
        if content is None:
            content = encode_content(m)
        append(pack(m.timestamp, m.expiration, len(content)))
        append(content)
        size += len(content)
    count = j - i
    length = BATCH_FIRST.size + len(names) + BATCH_ITEM.size * count + size
    parts[start] = _OP_BATCH_HEAD.pack(OP_BATCH, length, first.seq, count) + names


def _names_of(op: AddOp) -> bytes:
    """An ADD payload's names: its destination and queues, as :func:`encode_add` writes."""
    queues = op.queues
    return b"".join((s16(op.destination), _U16.pack(len(queues)), *(s16(q) for q in queues)))


# -- decoding ------------------------------------------------------------------------


OpSpan = tuple[int, int, int]
"""An operation of an ``ops`` payload: (tag, payload start, payload end)."""

BatchItem = tuple[int, int, int, int]
"""A message of a BATCH: (timestamp, expiration, content block start, end)."""


def batch_items(
    data: bytes, p: int, q: int, names: Names
) -> tuple[int, str, tuple[str, ...], list[BatchItem]]:
    """The first number, destination, queues and messages of the BATCH operation
    ``data[p:q]``, none decoded.

    Raises:
        DECODE_ERRORS: the operation is malformed.
    """
    first, count = BATCH_FIRST.unpack_from(data, p)
    destination, r = names.read(data, p + BATCH_FIRST.size)
    (n_queues,) = _U16.unpack_from(data, r)
    r += 2
    queues = []
    for _ in range(n_queues):
        queue, r = names.read(data, r)
        queues.append(queue)
    items: list[BatchItem] = []
    append = items.append
    unpack = BATCH_ITEM.unpack_from
    step = BATCH_ITEM.size
    for _ in range(count):
        timestamp, expiration, length = unpack(data, r)
        r += step
        e = r + length
        append((timestamp, expiration, r, e))
        r = e
    if r != q:
        raise ValueError("a batch's messages do not fill its operation")
    return first, destination, tuple(queues), items


def decode_batched(data: bytes, start: int, end: int, times: tuple[int, int]) -> Message:
    """The message of a BATCH whose content block is ``data[start:end]`` and whose
    (timestamp, expiration) are ``times``.

    Raises:
        CorruptRecord: the block is malformed.
    """
    try:
        message = decode_content(data, start, end, DEFAULT_MAX_PROPERTIES, *times)
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed message in a batch: {exc}") from exc
    message.encoded = bytes(data[start:end])
    return message


def _decode_batch(data: bytes, p: int, q: int, names: Names) -> list[AddOp]:
    first, destination, queues, items = batch_items(data, p, q, names)
    ops = []
    for i, (timestamp, expiration, a, b) in enumerate(items):
        message = decode_content(data, a, b, DEFAULT_MAX_PROPERTIES, timestamp, expiration)
        message.encoded = bytes(data[a:b])
        ops.append(AddOp(destination, queues, first + i, message))
    return ops


def decode_add(data: bytes, start: int, end: int, names: Names) -> tuple[AddOp, int]:
    """The add and the stored delivery count of the ADD payload ``data[start:end]``.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, timestamp, expiration, stored, delivered, flags, dest_len = ADD_FIXED.unpack_from(
            data, start
        )
        p = start + ADD_FIXED.size
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
        message.encoded = bytes(data[p:end])  # the block as stored: what a delivery sends
    except DECODE_ERRORS as exc:
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
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed ack record: {exc}") from exc
    return AckOp(queue, seq)


def decode_ops(data: bytes, start: int, end: int, names: Names) -> tuple[TxOp, ...]:
    """The operations of the ``ops`` payload at ``start``, which must end at ``end``.

    Raises:
        DECODE_ERRORS: the payload is malformed (its caller,
            :func:`chute.store.records.decode`, makes them a CorruptRecord).
    """
    ops: list[TxOp] = []
    for tag, p, q in op_spans(data, start, end):
        if tag == OP_ADD:
            op, _ = decode_add(data, p, q, names)
            ops.append(op)
        elif tag == OP_BATCH:
            ops += _decode_batch(data, p, q, names)
        elif tag == OP_ACK:
            ops.append(decode_ack(data, p, names))
        else:
            raise ValueError(f"unknown operation tag {tag}")
    return tuple(ops)


def op_spans(data: bytes, start: int, end: int, *, whole: bool = True) -> Iterator[OpSpan]:
    """The :data:`OpSpan` of each operation of the ``ops`` payload at ``start``, in
    order, none decoded: what :func:`decode_ops` and the readers of
    :mod:`chute.store.heads` walk. Each operation must end by ``end``; with ``whole``,
    the last must end at ``end`` (a reader that skips a damaged record's operations
    rather than refuse it passes False).

    Raises:
        DECODE_ERRORS: the payload is malformed (when the walk reaches the fault).
    """
    (count,) = _U32.unpack_from(data, start)
    p = start + 4
    unpack, size = OP_HEAD.unpack_from, OP_HEAD.size
    for _ in range(count):
        tag, length = unpack(data, p)
        p += size
        q = p + length
        if q > end:
            raise IndexError("operation runs past the record")
        yield tag, p, q
        p = q
    if whole and p != end:
        raise ValueError("operations do not fill the record")
