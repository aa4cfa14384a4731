"""The payloads of the core's operations: an add, an ack, and a transaction's list of them.

Pure, no files. These are the journal's hot paths: every message goes in
through :func:`encode_add` and comes back through :func:`add_head` (lazy
recovery), :func:`add_keys` and :func:`op_add_keys` (reclaiming, paging) or
:func:`decode_add`. They take and give the core's own values
(:class:`~chute.core.model.store.AddOp`, :class:`~chute.core.model.store.AckOp`); the
records that carry them, and the payloads of every other kind, are
:mod:`chute.store.records`', built on the names and errors here. Payload
layouts (big-endian; ``s16`` is a u16 length and UTF-8)::

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

import dataclasses
import struct
from collections.abc import Sequence
from typing import Final, cast

from chute.content import (
    CONTENT_HEAD,
    DEFAULT_MAX_PROPERTIES,
    PERSISTENT_FLAG,
    content_size,
    decode_content,
    encode_content,
)
from chute.core.model.store import AckOp, AddOp, TxOp
from chute.errors import ChuteError
from chute.message import SIZE_OVERHEAD, Message
from chute.store.errors import CorruptRecord
from chute.store.record import Kind

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_ADD: Final = struct.Struct(">QqqIIBH")  # ... flags, destination length
_ADD_SIZE: Final = _ADD.size
_ADD_HEAD: Final = struct.Struct(">QqqIIB")  # _ADD without the destination's length
_SEQ_NAME: Final = struct.Struct(">QH")
_OP_HEAD: Final = struct.Struct(">BI")
_OP_ADD_TIMES: Final = struct.Struct(">BIQqq")  # _OP_HEAD, then an ADD's seq and times
_OP_ADD_HEAD: Final = struct.Struct(">BIQqqIIB")  # _OP_HEAD, then _ADD_HEAD
_NAMES_AT: Final = _ADD_SIZE - 2  # where an ADD payload's destination (length, name) starts
_OP_BATCH_HEAD: Final = struct.Struct(">BIQI")  # _OP_HEAD, then _BATCH_FIRST
_BATCH_FIRST: Final = struct.Struct(">QI")  # a BATCH's first seq and count
_BATCH_ITEM: Final = struct.Struct(">qqI")  # a batched message's timestamp, expiration, length
_OP_ADD, _OP_ACK, _OP_BATCH = 1, 2, 3
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
    dest = s16(op.destination)  # the destination's length and name, as _ADD ends
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
                    _OP_ADD,
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
            append(_OP_HEAD.pack(_OP_ACK, len(payload)))
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
    pack = _BATCH_ITEM.pack
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
    length = _BATCH_FIRST.size + len(names) + _BATCH_ITEM.size * count + size
    parts[start] = _OP_BATCH_HEAD.pack(_OP_BATCH, length, first.seq, count) + names


def _names_of(op: AddOp) -> bytes:
    """An ADD payload's names: its destination and queues, as :func:`encode_add` writes."""
    queues = op.queues
    return b"".join((s16(op.destination), _U16.pack(len(queues)), *(s16(q) for q in queues)))


# -- decoding ------------------------------------------------------------------------


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
    except DECODE_ERRORS as exc:
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
    size: int  # the message's ``Message.size`` (what a queue's byte bound counts)


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
        size = content_size(data, p, end)
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed add record: {exc}") from exc
    return AddHead(seq, destination, tuple(queues), stored, bool(flags & PERSISTENT_FLAG), size)


AddKey = tuple[int, list[str], int, int, tuple[int, int] | None]
"""Where an add sits in a transaction's payload: (seq, queues, start, end, times). With
``times`` None, ``[start, end)`` is an ADD payload (:func:`decode_add`); else it is the
content block of a message of a BATCH and ``times`` its (timestamp, expiration)
(:func:`decode_batched`)."""


def op_add_keys(kind: int, data: bytes, start: int, end: int, names: Names) -> list[AddKey]:
    """The :data:`AddKey` of every add in a COMMIT or COMMIT_PREPARED payload.

    Cheap: the messages are not decoded. Reclaiming asks which adds of a
    transaction record are still live before it decodes any; paging reads back
    only the adds it needs.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        p = start
        if kind != Kind.COMMIT:
            _, p = names.read(data, p)
        (count,) = _U32.unpack_from(data, p)
        p += 4
        keys: list[AddKey] = []
        for _ in range(count):
            tag, length = _OP_HEAD.unpack_from(data, p)
            p += _OP_HEAD.size
            q = p + length
            if q > end:
                raise IndexError("operation runs past the record")
            if tag == _OP_ADD:
                seq, queues = add_keys(data, p, names)
                keys.append((seq, queues, p, q, None))
            elif tag == _OP_BATCH:
                first, _, batch_queues, items = batch_items(data, p, q, names)
                listed = list(batch_queues)
                keys += [
                    (first + i, listed, a, b, (timestamp, expiration))
                    for i, (timestamp, expiration, a, b) in enumerate(items)
                ]
            p = q
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed transaction record: {exc}") from exc
    return keys


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
    first, count = _BATCH_FIRST.unpack_from(data, p)
    destination, r = names.read(data, p + _BATCH_FIRST.size)
    (n_queues,) = _U16.unpack_from(data, r)
    r += 2
    queues = []
    for _ in range(n_queues):
        queue, r = names.read(data, r)
        queues.append(queue)
    items: list[BatchItem] = []
    append = items.append
    unpack = _BATCH_ITEM.unpack_from
    step = _BATCH_ITEM.size
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


BlockSpan = tuple[int, int, int, int, int]
"""Where an add's content block sits: (timestamp, expiration, block start, block end,
``Message.size``)."""


def queue_blocks(  # noqa: PLR0917 - hot path, called positionally
    kind: int, data: bytes, start: int, end: int, queue: str, base: int = 0
) -> dict[int, BlockSpan]:
    """``seq -> BlockSpan`` of every add of ``queue`` in an ADD, COMMIT or COMMIT_PREPARED
    payload ``data[start:end]``, its positions plus ``base``, without decoding a message:
    what a stream read sends on as it is stored.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    key = s16(queue)
    found: dict[int, BlockSpan] = {}
    try:
        if kind == Kind.ADD:
            _block_of(data, start, end, key, base, found)
            return found
        p = start
        if kind != Kind.COMMIT:  # COMMIT_PREPARED: the xid first
            (length,) = _U16.unpack_from(data, p)
            p += 2 + length
        (count,) = _U32.unpack_from(data, p)
        p += 4
        # the usual add: to ``queue`` alone, from the destination of the same name (a
        # stream's, a queue's): its names are these bytes, matched at once
        alone = key + b"\x00\x01" + key
        names_end = _NAMES_AT + len(alone)
        op_head, op_add = _OP_HEAD.unpack_from, _OP_ADD_TIMES.unpack_from
        content_head = CONTENT_HEAD.unpack_from
        for _ in range(count):
            if data[p] != _OP_ADD:  # an ack, or a batch
                tag, length = op_head(data, p)
                p += _OP_HEAD.size
                q = p + length
                if q > end:
                    raise IndexError("operation runs past the record")
                if tag == _OP_BATCH:
                    _batch_blocks(data, p, q, queue, base, found)
                p = q
                continue
            _, length, seq, timestamp, expiration = op_add(data, p)
            p += _OP_HEAD.size
            q = p + length
            if q > end:
                raise IndexError("operation runs past the record")
            if data.startswith(alone, p + _NAMES_AT):
                c = p + names_end
                _, _, _, id_len, corr_len, reply_len, type_len, n_props = content_head(data, c)
                if n_props:
                    size = content_size(data, c, q)
                else:
                    body = c + CONTENT_HEAD.size + id_len + corr_len + reply_len + type_len
                    if body > q:
                        raise IndexError("content runs past the record")
                    size = SIZE_OVERHEAD + q - body
                found[seq] = (timestamp, expiration, base + c, base + q, size)
            else:
                _block_of(data, p, q, key, base, found)
            p = q
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed record: {exc}") from exc
    return found


def _batch_blocks(  # noqa: PLR0917 - private
    data: bytes, p: int, q: int, queue: str, base: int, found: dict[int, BlockSpan]
) -> None:
    """Add the BlockSpan of each message of the BATCH ``data[p:q]`` to ``found`` if
    ``queue`` is among its queues: one pass, a message without properties sized from its
    head alone (as :func:`queue_blocks` does an ADD)."""
    first, count = _BATCH_FIRST.unpack_from(data, p)
    r = p + _BATCH_FIRST.size
    (length,) = _U16.unpack_from(data, r)  # the destination
    r += 2 + length
    (n_queues,) = _U16.unpack_from(data, r)
    r += 2
    key = s16(queue)
    mine = False
    for _ in range(n_queues):
        if data.startswith(key, r):
            mine = True
        (length,) = _U16.unpack_from(data, r)
        r += 2 + length
    if not mine:
        return
    unpack, step = _BATCH_ITEM.unpack_from, _BATCH_ITEM.size
    content_head, head_size = CONTENT_HEAD.unpack_from, CONTENT_HEAD.size
    for seq in range(first, first + count):
        timestamp, expiration, length = unpack(data, r)
        c = r + step
        r = c + length
        _, _, _, id_len, corr_len, reply_len, type_len, n_props = content_head(data, c)
        if n_props:
            size = content_size(data, c, r)
        else:
            body = c + head_size + id_len + corr_len + reply_len + type_len
            if body > r:
                raise IndexError("content runs past the message")
            size = SIZE_OVERHEAD + r - body
        found[seq] = (timestamp, expiration, base + c, base + r, size)
    if r != q:
        raise ValueError("a batch's messages do not fill its operation")


def _block_of(  # noqa: PLR0917 - private
    data: bytes, p: int, q: int, key: bytes, base: int, found: dict[int, BlockSpan]
) -> None:
    """Add the ADD payload ``data[p:q]``'s BlockSpan to ``found`` if ``key`` (a queue's s16)
    is among its queues."""
    seq, timestamp, expiration, _, _, _, dest_len = _ADD.unpack_from(data, p)
    r = p + _ADD_SIZE + dest_len
    (count,) = _U16.unpack_from(data, r)
    r += 2
    mine = False
    for _ in range(count):
        if data.startswith(key, r):
            mine = True
        (length,) = _U16.unpack_from(data, r)
        r += 2 + length
    if r > q:
        raise IndexError("add header runs past the record")
    if mine:
        found[seq] = (timestamp, expiration, base + r, base + q, content_size(data, r, q))


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


def decode_ops(data: bytes, p: int, end: int, names: Names) -> tuple[TxOp, ...]:
    """The operations of the ``ops`` payload at ``p``, which must end at ``end``.

    Raises:
        DECODE_ERRORS: the payload is malformed (its caller,
            :func:`chute.store.records.decode`, makes them a CorruptRecord).
    """
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
        elif tag == _OP_BATCH:
            ops += _decode_batch(data, p, q, names)
        elif tag == _OP_ACK:
            ops.append(decode_ack(data, p, names))
        else:
            raise ValueError(f"unknown operation tag {tag}")
        p = q
    if p != end:
        raise ValueError("operations do not fill the record")
    return tuple(ops)
