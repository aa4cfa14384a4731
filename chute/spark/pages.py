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

Raises :class:`~chute.errors.RemoteProtocolError` for a malformed page.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from chute.content import DEFAULT_MAX_PROPERTIES, malformed
from chute.protocol import columns as c
from chute.protocol.columns import KIND_NAMES, PageColumns, page_columns
from chute.spark.schema import ARROW_SCHEMA

_MAP: Final = ARROW_SCHEMA.field("properties").type
_KIND_NAMES: Final = pa.array(KIND_NAMES, pa.string())
_MS: Final = pa.timestamp("ms", tz="UTC")
_US: Final = ARROW_SCHEMA.field("timestamp").type
_ONE: Final = pa.scalar(1, pa.uint8())


def page_batch(
    address: str, body: bytes, max_properties: int = DEFAULT_MAX_PROPERTIES
) -> pa.RecordBatch:
    """The CursorPage body ``body`` (read from ``address``) as a RecordBatch of
    :data:`~chute.spark.schema.ARROW_SCHEMA`.

    Raises:
        RemoteProtocolError: the page is malformed (bad layout, a string that is not
            UTF-8, a timestamp out of range).
    """
    page = page_columns(body, max_properties)
    try:
        return _batch(address, page)
    except (pa.ArrowInvalid, pa.ArrowIndexError) as exc:
        raise malformed(f"malformed CursorPage packet: {exc}") from exc


def _batch(address: str, page: PageColumns) -> pa.RecordBatch:
    n = page.count
    flags = _fixed(page, c.FLAGS, pa.uint8())
    properties, types = _maps(page)
    arrays = [
        _fixed(page, c.SEQ, pa.int64()),
        pa.array(page.ids, pa.binary()).cast(pa.string()),
        pa.repeat(pa.scalar(address, pa.string()), n),
        _fixed(page, c.PRIORITY, pa.uint8()).cast(pa.int32()),
        _fixed(page, c.TIMESTAMP, _MS).cast(_US),
        _fixed(page, c.EXPIRATION, pa.int64()),
        _text(page, page.correlation_ids),
        _text(page, page.reply_tos),
        _text(page, page.types),
        pc.bit_wise_and(flags, _ONE).cast(pa.bool_()),
        _fixed(page, c.REDELIVERED, pa.uint8()).cast(pa.bool_()),
        _fixed(page, c.DELIVERY_COUNT, pa.int32()),
        _KIND_NAMES.take(_fixed(page, c.KIND, pa.uint8())),
        properties,
        pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(page.offsets), pa.py_buffer(page.bodies)]
        ),
        types,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _fixed(page: PageColumns, field: c.Field, kind: pa.DataType) -> pa.Array:
    """A fixed-width field of every message, as an array of ``kind`` around its bytes."""
    return pa.Array.from_buffers(kind, page.count, [None, pa.py_buffer(page.column(field))])


def _text(page: PageColumns, values: list[bytes | None]) -> pa.Array:
    """An optional string field (UTF-8 bytes or None) as a string array; Arrow checks
    the UTF-8."""
    if not page.rich:
        return pa.nulls(page.count, pa.string())
    return pa.array(values, pa.binary()).cast(pa.string())


def _maps(page: PageColumns) -> tuple[pa.Array, pa.Array]:
    """The ``properties`` and ``property_types`` columns: null where a message has none."""
    n = page.count
    props = page.properties
    if not props.counts:
        return pa.nulls(n, _MAP), pa.nulls(n, _MAP)
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
