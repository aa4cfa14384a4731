"""CursorPage bytes straight into Arrow: the executor's hot path.

:func:`page_batch` turns the body of a CursorPage answer (what
:meth:`chute.client.blocking.BlockingConnection.cursor_read_raw` yields) into a
``pyarrow.RecordBatch`` of :data:`~chute.spark.schema.ARROW_SCHEMA`, the same
batch :func:`~chute.spark.schema.to_record_batch` makes of the decoded
messages, without a Message per entry: :func:`chute.protocol.columns.page_columns`
reads the page column by column, and each column becomes one Arrow array, most
of them wrapped around buffers the decoder filled (bodies and fixed-width
fields are not copied again; strings are checked as UTF-8 by Arrow; a message
without properties has null maps).

A page of plain messages (no correlation id, reply-to, type or properties, every id
of one length: what producers of bulk data send) takes a shorter way: Python walks
only the entries' lengths, and Arrow cuts the heads, ids and bodies out of the page
(:func:`_plain`).

Raises :class:`~chute.errors.RemoteProtocolError` for a malformed page.
"""

from __future__ import annotations

import struct
from array import array
from typing import Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from chute.content import DEFAULT_MAX_PROPERTIES, malformed
from chute.protocol import columns as c
from chute.protocol.columns import (
    HEAD,
    KIND_NAMES,
    PageColumns,
    check_heads,
    head_column,
    page_columns,
    page_next,
)
from chute.spark.schema import ARROW_SCHEMA

_MAP: Final = ARROW_SCHEMA.field("properties").type
_KIND_NAMES: Final = pa.array(KIND_NAMES, pa.string())
_MS: Final = pa.timestamp("ms", tz="UTC")
_US: Final = ARROW_SCHEMA.field("timestamp").type
_ONE: Final = pa.scalar(1, pa.uint8())
_U32: Final = struct.Struct(">I")
_ENTRY_HEAD: Final = 33  # an entry's bytes before its content block
_LENGTH_AT: Final = 29  # where an entry's content length is
_FLAGS_AT, _ID_LENGTH_AT, _EXTRAS_AT = 34, 36, 38  # in a head: flags, id length, the rest
_PLAIN_FLAGS: Final = b"\x00\x01"  # persistent or not, no optional string


class _Columns(NamedTuple):
    """What a batch is made of: the heads (:data:`~chute.protocol.columns.HEAD` bytes a
    message), ids and bodies as Arrow arrays, and the optional strings and properties
    (None: every message lacks them)."""

    rows: int
    heads: bytes
    ids: pa.Array
    bodies: pa.Array
    rich: PageColumns | None


def page_batch(
    address: str, body: bytes, max_properties: int = DEFAULT_MAX_PROPERTIES
) -> pa.RecordBatch:
    """The CursorPage body ``body`` (read from ``address``) as a RecordBatch of
    :data:`~chute.spark.schema.ARROW_SCHEMA`.

    Raises:
        RemoteProtocolError: the page is malformed (bad layout, a string that is not
            UTF-8, a timestamp out of range).
    """
    try:
        cols = _plain(body)
        if cols is None:
            page = page_columns(body, max_properties)
            n = page.count
            ids = pa.array(page.ids, pa.binary())
            bodies = pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(page.offsets), pa.py_buffer(page.bodies)]
            )
            cols = _Columns(n, page.heads, ids, bodies, page if page.rich else None)
        return _batch(address, cols)
    except (pa.ArrowInvalid, pa.ArrowIndexError) as exc:
        raise malformed(f"malformed CursorPage packet: {exc}") from exc


def _plain(data: bytes) -> _Columns | None:
    """The columns of a page of plain messages (see the module docstring), or None for
    any other page (:func:`~chute.protocol.columns.page_columns` reads it, and says
    what is wrong with a malformed one).

    Raises:
        RemoteProtocolError: a head field out of range.
    """
    count = page_next(data)[1]
    size = len(data)
    if not count or count * HEAD > size or size >= 1 << 31:
        return None
    starts = array("i", bytes(4 * (count + 1)))  # each entry's offset, then the end
    length = _U32.unpack_from
    pos = 12
    try:
        for i in range(count):
            starts[i] = pos
            pos += _ENTRY_HEAD + length(data, pos + _LENGTH_AT)[0]
    except (struct.error, OverflowError):
        return None
    if pos != size:
        return None
    starts[count] = pos
    entries = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(starts), pa.py_buffer(data)]
    )
    heads = _data(pc.binary_slice(entries, 0, HEAD))
    if len(heads) != count * HEAD or heads[_FLAGS_AT::HEAD].translate(None, _PLAIN_FLAGS):
        return None
    for at in range(_EXTRAS_AT, HEAD):  # no optional string, no property
        if heads[at::HEAD].count(0) != count:
            return None
    high, low = heads[_ID_LENGTH_AT::HEAD], heads[_ID_LENGTH_AT + 1 :: HEAD]
    if high.count(high[0]) != count or low.count(low[0]) != count:
        return None  # ids of several lengths
    id_end = HEAD + (high[0] << 8 | low[0])
    if pc.min(pc.binary_length(entries)).as_py() < id_end:
        return None  # an id overruns its content block
    check_heads(heads)
    ids = pc.binary_slice(entries, HEAD, id_end)
    return _Columns(count, heads, ids, pc.binary_slice(entries, id_end, size), None)


def _data(values: pa.Array) -> bytes:
    """The bytes of a binary array's values, back to back."""
    _, offsets, buffer = values.buffers()
    if offsets is None or buffer is None or not len(values):
        return b""
    at = memoryview(offsets).cast("i")[values.offset : values.offset + len(values) + 1]
    data: bytes = buffer.slice(at[0], at[-1] - at[0]).to_pybytes()
    return data


def _batch(address: str, cols: _Columns) -> pa.RecordBatch:
    n = cols.rows
    flags = _fixed(cols, c.FLAGS, pa.uint8())
    properties, types = _maps(cols.rich, n)
    arrays = [
        _fixed(cols, c.SEQ, pa.int64()),
        cols.ids.cast(pa.string()),
        pa.repeat(pa.scalar(address, pa.string()), n),
        _fixed(cols, c.PRIORITY, pa.uint8()).cast(pa.int32()),
        _fixed(cols, c.TIMESTAMP, _MS).cast(_US),
        _fixed(cols, c.EXPIRATION, pa.int64()),
        _text(cols.rich, n, "correlation_ids"),
        _text(cols.rich, n, "reply_tos"),
        _text(cols.rich, n, "types"),
        pc.bit_wise_and(flags, _ONE).cast(pa.bool_()),
        _fixed(cols, c.REDELIVERED, pa.uint8()).cast(pa.bool_()),
        _fixed(cols, c.DELIVERY_COUNT, pa.int32()),
        _KIND_NAMES.take(_fixed(cols, c.KIND, pa.uint8())),
        properties,
        cols.bodies,
        types,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _fixed(cols: _Columns, field: c.Field, kind: pa.DataType) -> pa.Array:
    """A fixed-width field of every message, as an array of ``kind`` around its bytes."""
    column = head_column(cols.heads, cols.rows, field)
    return pa.Array.from_buffers(kind, cols.rows, [None, pa.py_buffer(column)])


def _text(page: PageColumns | None, n: int, name: str) -> pa.Array:
    """An optional string field (UTF-8 bytes or None) as a string array; Arrow checks
    the UTF-8."""
    if page is None:
        return pa.nulls(n, pa.string())
    values: list[bytes | None] = getattr(page, name)
    return pa.array(values, pa.binary()).cast(pa.string())


def _maps(page: PageColumns | None, n: int) -> tuple[pa.Array, pa.Array]:
    """The ``properties`` and ``property_types`` columns: null where a message has none."""
    if page is None or not page.properties.counts:
        return pa.nulls(n, _MAP), pa.nulls(n, _MAP)
    props = page.properties
    offsets: list[int | None] = [None] * (n + 1)  # a null map: Arrow takes the next offset
    at = 0
    for i, count in props.counts.items():  # in message order
        offsets[i] = at
        at += count
    offsets[n] = at
    offset_array = pa.array(offsets, pa.int32())
    keys = pa.array(props.names, pa.string())
    return (
        pa.MapArray.from_arrays(offset_array, keys, pa.array(props.values, pa.string()), type=_MAP),
        pa.MapArray.from_arrays(offset_array, keys, pa.array(props.types, pa.string()), type=_MAP),
    )
