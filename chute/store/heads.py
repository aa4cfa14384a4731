"""Reading the core's payloads without decoding their messages: keys, heads, blocks.

Pure, no files. What the journal's hot readers need of an ADD payload or a
transaction's ``ops`` (:mod:`chute.store.payload` has the layouts) without a
``Message``: the seq and queues of each add (reclaiming, paging:
:func:`add_keys`, :func:`op_add_keys`), its head for lazy recovery
(:func:`add_head`, :func:`op_heads`), and where a queue's content blocks sit,
for a stream read that sends them on as they are stored (:func:`queue_blocks`).
A BATCH's messages are each given as an add of their own.

Raises only :class:`~chute.store.errors.CorruptRecord`.

Thread-safety: the functions are pure and may run on any thread.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import Final

from chute.content import CONTENT_HEAD, PERSISTENT_FLAG, content_size
from chute.core.model.store import AckOp
from chute.store.blocklayout import (
    BatchRun,
    BlockLayout,
    BlockSpan,
    batch_run,
    block_size,
    first_of,
)
from chute.store.errors import CorruptRecord
from chute.store.payload import (
    ADD_FIXED,
    BATCH_FIRST,
    DECODE_ERRORS,
    NAMES_AT,
    OP_ACK,
    OP_ADD,
    OP_ADD_TIMES,
    OP_BATCH,
    OP_HEAD,
    Names,
    OpSpan,
    batch_items,
    decode_ack,
    op_spans,
    s16,
)
from chute.store.record import Kind

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")


def add_keys(data: bytes, start: int, names: Names) -> tuple[int, list[str]]:
    """The seq and queues of the ADD payload at ``start``, without decoding the message.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        seq, _, _, _, _, _, dest_len = ADD_FIXED.unpack_from(data, start)
        p = start + ADD_FIXED.size + dest_len
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
        seq, _, _, stored, _, _, dest_len = ADD_FIXED.unpack_from(data, start)
        p = start + ADD_FIXED.size
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
    """The :data:`AddKey` of every add in a COMMIT, COMMIT_PREPARED or PREPARE payload.

    Cheap: the messages are not decoded. Reclaiming asks which adds of a
    transaction record are still live before it decodes any; paging reads back
    only the adds it needs.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        keys: list[AddKey] = []
        # not ``whole``: reclaiming skips a damaged record that holds no live add
        for tag, p, q in _op_spans(kind, data, start, end, names, whole=False):
            if tag == OP_ADD:
                seq, queues = add_keys(data, p, names)
                keys.append((seq, queues, p, q, None))
            elif tag == OP_BATCH:
                first, _, batch_queues, items = batch_items(data, p, q, names)
                listed = list(batch_queues)
                keys += [
                    (first + i, listed, a, b, (timestamp, expiration))
                    for i, (timestamp, expiration, a, b) in enumerate(items)
                ]
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed transaction record: {exc}") from exc
    return keys


def op_heads(kind: int, data: bytes, start: int, end: int, names: Names) -> list[AddHead | AckOp]:
    """The operations of a COMMIT or COMMIT_PREPARED payload without decoding a message:
    each add's :class:`AddHead` (a batch's messages each theirs), each ack. What lazy
    recovery indexes a transaction's record by.

    Raises:
        CorruptRecord: the payload is malformed.
    """
    try:
        heads: list[AddHead | AckOp] = []
        for tag, p, q in _op_spans(kind, data, start, end, names):
            if tag == OP_ADD:
                heads.append(add_head(data, p, q, names))
            elif tag == OP_BATCH:
                first, destination, queues, items = batch_items(data, p, q, names)
                heads += [
                    AddHead(
                        first + i,
                        destination,
                        queues,
                        0,
                        bool(data[a + 1] & PERSISTENT_FLAG),
                        content_size(data, a, b),
                    )
                    for i, (_, _, a, b) in enumerate(items)
                ]
            elif tag == OP_ACK:
                heads.append(decode_ack(data, p, names))
            else:
                raise ValueError(f"unknown operation tag {tag}")
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed transaction record: {exc}") from exc
    return heads


def _op_spans(
    kind: int, data: bytes, start: int, end: int, names: Names, *, whole: bool = True
) -> Iterator[OpSpan]:
    """The operations of the COMMIT, COMMIT_PREPARED or PREPARE payload ``data[start:end]``
    (:func:`~chute.store.payload.op_spans`, after the xid of the last two)."""
    if kind != Kind.COMMIT:
        _, start = names.read(data, start)
    return op_spans(data, start, end, whole=whole)


def queue_blocks(  # noqa: PLR0917 - hot path, called positionally
    kind: int, data: bytes, start: int, end: int, queue: str, base: int = 0
) -> BlockLayout:
    """Where the block of every add of ``queue`` is in an ADD, COMMIT, COMMIT_PREPARED or
    PREPARE payload ``data[start:end]`` (its positions plus ``base``), without decoding a message:
    what a stream read sends on as it is stored. A batch's messages are found by their
    lengths alone (:mod:`chute.store.blocklayout`).

    Raises:
        CorruptRecord: the payload is malformed.
    """
    key = s16(queue)
    layout = BlockLayout()
    found = layout.spans
    try:
        if kind == Kind.ADD:
            _block_of(data, start, end, key, base, found)
            return layout
        p = start
        if kind != Kind.COMMIT:  # COMMIT_PREPARED, PREPARE: the xid first
            (length,) = _U16.unpack_from(data, p)
            p += 2 + length
        (count,) = _U32.unpack_from(data, p)
        p += 4
        # the usual add: to ``queue`` alone, from the destination of the same name (a
        # stream's, a queue's): its names are these bytes, matched at once
        alone = key + b"\x00\x01" + key
        names_end = NAMES_AT + len(alone)
        op_head, op_add = OP_HEAD.unpack_from, OP_ADD_TIMES.unpack_from
        for _ in range(count):
            if data[p] != OP_ADD:  # an ack, or a batch
                tag, length = op_head(data, p)
                p += OP_HEAD.size
                q = p + length
                if q > end:
                    raise IndexError("operation runs past the record")
                if tag == OP_BATCH:
                    run = _batch_run(data, p, q, key, base)
                    if run is not None:
                        layout.runs.append(run)
                p = q
                continue
            _, length, seq, timestamp, expiration = op_add(data, p)
            p += OP_HEAD.size
            q = p + length
            if q > end:
                raise IndexError("operation runs past the record")
            if data.startswith(alone, p + NAMES_AT):
                c = p + names_end
                found[seq] = (timestamp, expiration, base + c, base + q, block_size(data, c, q))
            else:
                _block_of(data, p, q, key, base, found)
            p = q
    except DECODE_ERRORS as exc:
        raise CorruptRecord(f"malformed record: {exc}") from exc
    layout.runs.sort(key=first_of)
    return layout


def _batch_run(data: bytes, p: int, q: int, key: bytes, base: int) -> BatchRun | None:
    """The :data:`~chute.store.blocklayout.BatchRun` of the BATCH ``data[p:q]`` if the
    queue whose s16 is ``key`` is among its queues, else None."""
    first, count = BATCH_FIRST.unpack_from(data, p)
    r = p + BATCH_FIRST.size
    (length,) = _U16.unpack_from(data, r)  # the destination
    r += 2 + length
    (n_queues,) = _U16.unpack_from(data, r)
    r += 2
    mine = False
    for _ in range(n_queues):
        if data.startswith(key, r):
            mine = True
        (length,) = _U16.unpack_from(data, r)
        r += 2 + length
    if not mine:
        return None
    return batch_run(data, r, q, first, count, base=base)


def _block_of(  # noqa: PLR0917 - private
    data: bytes, p: int, q: int, key: bytes, base: int, found: dict[int, BlockSpan]
) -> None:
    """Add the ADD payload ``data[p:q]``'s BlockSpan to ``found`` if ``key`` (a queue's s16)
    is among its queues."""
    seq, timestamp, expiration, _, _, _, dest_len = ADD_FIXED.unpack_from(data, p)
    r = p + ADD_FIXED.size + dest_len
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
