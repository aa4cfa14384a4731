"""Arrow batches into SendMany packets without a Python object per row: the sink's hot path.

A row that sets nothing but its ``body`` (the usual sink row: every other column the
sink reads is absent or null) is a message with ``send``'s defaults: persistent,
priority 4, a new id, no headers. Its place in a SendMany packet is
``content_len u32 | content``, where the content block (:mod:`chute.content`) is a
fixed 15-byte head, the 32-byte id and the body. :func:`framed` builds that for a
whole batch with Arrow's compute functions, column against column (lengths, ids,
heads and bodies joined row by row inside Arrow), into one buffer; :func:`packets`
cuts it where SendMany's limits say, each piece a slice of that buffer, ready for
:meth:`chute.client.link.Link.send_many_framed`.

Ids are generated as :class:`chute.message.MessageIds` makes them (a 48-bit ms clock,
32 random bits, a 48-bit counter: 32 hex digits), with random bits and a counter start
drawn afresh for each batch, so ids stay unique across tasks and batches and ordered
by time.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Iterator
from typing import Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from chute.client.outgoing import SEND_MANY_BYTES
from chute.content import CONTENT_HEAD, KIND_CODES, PERSISTENT_FLAG
from chute.message import DEFAULT_PRIORITY, GENERATED_ID_SIZE, BodyKind
from chute.protocol.packets import SEND_MANY_MAX
from chute.spark.schema import SINK_COLUMNS

FRAME_OVERHEAD: Final = 4 + CONTENT_HEAD.size + GENERATED_ID_SIZE
"""Bytes of a framed plain message besides its body: length, content head, id."""
_HEX: Final = pa.array([b"%04x" % v for v in range(1 << 16)], pa.binary())
"""Each 16-bit value as its 4 hex digits."""
_U32: Final = pa.uint32()
_U64: Final = pa.uint64()
_BYTE: Final = pa.scalar(0xFF, _U32)
_QUARTER: Final = pa.scalar(0xFFFF, _U64)
_EMPTY: Final = pa.scalar(b"", pa.binary())
_ID_MASK: Final = 0xFFFF_FFFF_FFFF
_index: pa.Array = pa.array(range(4096), _U64)
"""0, 1, 2, ...: the counter part of a batch's ids is its start plus a slice of this."""


def plain(batch: pa.RecordBatch) -> bool:
    """Whether every row of ``batch`` sets only its body (the other columns the sink
    reads are absent or null everywhere) and the body is binary, or text without nulls."""
    names = batch.schema.names
    if "body" not in names:
        return False
    kind = batch.schema.field("body").type
    if not pa.types.is_binary(kind) and not (
        pa.types.is_string(kind) and not batch.column("body").null_count
    ):
        return False  # (a null text body is sent as empty bytes, row by row)
    return all(
        batch.column(name).null_count == batch.num_rows
        for name in SINK_COLUMNS
        if name != "body" and name in names
    )


def framed(batch: pa.RecordBatch) -> pa.BinaryArray:
    """Each row of a :func:`plain` batch as its SendMany entry (``content_len u32 |
    content``): a binary array whose data buffer holds them all, back to back."""
    n = batch.num_rows
    column = batch.column("body")
    kind = BodyKind.TEXT if pa.types.is_string(column.type) else BodyKind.BYTES
    bodies = pc.fill_null(column.cast(pa.binary()), _EMPTY)
    head = CONTENT_HEAD.pack(
        DEFAULT_PRIORITY, PERSISTENT_FLAG, KIND_CODES[kind], GENERATED_ID_SIZE, 0, 0, 0, 0
    )
    length = pc.add(
        pc.binary_length(bodies).cast(_U32),
        pa.scalar(CONTENT_HEAD.size + GENERATED_ID_SIZE, _U32),
    )
    joined = pc.binary_join_element_wise(
        _big_endian(length, n), pa.scalar(head, pa.binary()), *_ids(n), bodies, _EMPTY
    )
    return joined


class Packet(NamedTuple):
    """One SendMany's share of a framed batch: ``entries`` entries, their bytes."""

    entries: int
    framed: memoryview
    body_bytes: int


def packets(
    entries: pa.BinaryArray, max_bytes: int = SEND_MANY_BYTES, max_count: int = SEND_MANY_MAX
) -> Iterator[Packet]:
    """``entries`` (from :func:`framed`) in runs of at most ``max_count`` entries and
    ``max_bytes`` (an entry larger than that goes alone), each a view of their buffer."""
    n = len(entries)
    if not n:
        return
    offsets_buffer, data_buffer = entries.buffers()[1:3]
    if offsets_buffer is None or data_buffer is None:  # pragma: no cover - n > 0 has both
        raise ValueError("a binary array without buffers")
    offsets = memoryview(offsets_buffer).cast("i")[entries.offset : entries.offset + n + 1]
    data = memoryview(data_buffer)
    lo = 0
    while lo < n:
        hi = min(n, lo + max_count)
        hi = min(
            hi, max(lo + 1, bisect.bisect_right(offsets, offsets[lo] + max_bytes, lo, hi + 1) - 1)
        )
        size = offsets[hi] - offsets[lo]
        count = hi - lo
        yield Packet(count, data[offsets[lo] : offsets[hi]], size - FRAME_OVERHEAD * count)
        lo = hi


def _big_endian(values: pa.Array, n: int) -> pa.Array:
    """uint32 ``values`` as 4-byte big-endian binary values."""
    swapped = pc.bit_wise_or(
        pc.bit_wise_or(
            pc.shift_left(pc.bit_wise_and(values, _BYTE), pa.scalar(24, _U32)),
            pc.shift_left(
                pc.bit_wise_and(pc.shift_right(values, pa.scalar(8, _U32)), _BYTE),
                pa.scalar(16, _U32),
            ),
        ),
        pc.bit_wise_or(
            pc.shift_left(
                pc.bit_wise_and(pc.shift_right(values, pa.scalar(16, _U32)), _BYTE),
                pa.scalar(8, _U32),
            ),
            pc.shift_right(values, pa.scalar(24, _U32)),
        ),
    )
    buffer = swapped.buffers()[1]  # little-endian in memory: the bytes of the big-endian value
    return pa.Array.from_buffers(pa.binary(4), n, [None, buffer], offset=swapped.offset).cast(
        pa.binary()
    )


def _ids(n: int) -> list[pa.Scalar | pa.Array]:
    """New message ids for ``n`` messages, as the parts :func:`framed` joins: a prefix
    (the ms clock and random bits) and the counter's 12 hex digits, in three arrays of 4."""
    global _index
    if len(_index) < n:
        _index = pa.array(range(max(n, 2 * len(_index))), _U64)
    ms = time.time_ns() // 1_000_000
    node = int.from_bytes(os.urandom(4), "big")
    start = int.from_bytes(os.urandom(6), "big") & (_ID_MASK >> 1)
    prefix = b"%012x%08x" % (ms & _ID_MASK, node)
    counter = pc.add(_index.slice(0, n), pa.scalar(start, _U64))
    digits = [
        _HEX.take(pc.bit_wise_and(pc.shift_right(counter, pa.scalar(shift, _U64)), _QUARTER))
        for shift in (32, 16, 0)
    ]
    return [pa.scalar(prefix, pa.binary()), *digits]
