"""Columns: the message model as Spark rows, and rows back into messages.

The read schema is :data:`READ_SCHEMA` (body as binary, ``seq`` the offset).
Pages from the broker become ``pyarrow.RecordBatch`` es of exactly that schema
(Spark checks names, types and nullability). The sink takes ``body`` (binary
or string) and, when present, ``destination``, ``priority``, ``ttl``,
``correlation_id``, ``reply_to``, ``type``, ``id`` and ``properties``; other
columns are ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from chute.message import Message

READ_SCHEMA: Final = (
    "seq BIGINT, id STRING, destination STRING, priority INT, timestamp TIMESTAMP, "
    "expiration BIGINT, correlation_id STRING, reply_to STRING, type STRING, "
    "persistent BOOLEAN, redelivered BOOLEAN, delivery_count INT, kind STRING, "
    "properties MAP<STRING, STRING>, body BINARY"
)
"""The columns of a read, as Spark DDL."""

ARROW_SCHEMA: Final = pa.schema(
    [
        ("seq", pa.int64()),
        ("id", pa.string()),
        ("destination", pa.string()),
        ("priority", pa.int32()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("expiration", pa.int64()),
        ("correlation_id", pa.string()),
        ("reply_to", pa.string()),
        ("type", pa.string()),
        ("persistent", pa.bool_()),
        ("redelivered", pa.bool_()),
        ("delivery_count", pa.int32()),
        ("kind", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
    ]
)
"""The same columns as Arrow types (what ``read()`` yields)."""

SINK_COLUMNS: Final = (
    "body",
    "destination",
    "priority",
    "ttl",
    "correlation_id",
    "reply_to",
    "type",
    "id",
    "properties",
)


def to_record_batch(address: str, page: Sequence[tuple[int, Message]]) -> pa.RecordBatch:
    """One page of ``(seq, message)`` as a RecordBatch of :data:`ARROW_SCHEMA`."""
    messages = [m for _, m in page]
    columns: list[Any] = [
        [seq for seq, _ in page],
        [m.id for m in messages],
        [address] * len(page),
        [m.priority for m in messages],
        [m.timestamp * 1000 for m in messages],
        [m.expiration for m in messages],
        [m.correlation_id for m in messages],
        [m.reply_to for m in messages],
        [m.type for m in messages],
        [m.persistent for m in messages],
        [m.redelivered for m in messages],
        [m.delivery_count for m in messages],
        [m.kind.value for m in messages],
        [_string_properties(m) for m in messages],
        [m.body for m in messages],
    ]
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, ARROW_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _string_properties(message: Message) -> list[tuple[str, str]] | None:
    if not message.properties:
        return None
    return [(k, _text(v)) for k, v in message.properties.items()]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Outgoing:
    """One row to send: the arguments of ``Session.send`` (see :func:`rows_of`)."""

    __slots__ = ("body", "destination", "options")

    def __init__(self, destination: str | None, body: bytes | str, options: dict[str, Any]) -> None:
        self.destination = destination
        self.body = body
        self.options = options


def rows_of(batch: pa.RecordBatch) -> Iterator[Outgoing]:
    """The rows of an Arrow batch as messages to send.

    Raises:
        ValueError: no ``body`` column, or a value of the wrong kind.
    """
    names = batch.schema.names
    if "body" not in names:
        raise ValueError(
            f"the chute sink needs a 'body' column (binary or string); the columns are {names}"
        )
    cols = {name: batch.column(name).to_pylist() for name in SINK_COLUMNS if name in names}
    bodies = cols.pop("body")
    destinations = cols.pop("destination", None)
    ttls = cols.pop("ttl", None)
    props = cols.pop("properties", None)
    for i, body in enumerate(bodies):
        options: dict[str, Any] = {k: v[i] for k, v in cols.items() if v[i] is not None}
        if ttls is not None and ttls[i]:
            options["ttl"] = int(ttls[i])
        if props is not None and props[i]:
            raw = props[i]
            options["properties"] = dict(raw)  # Arrow gives a map as (key, value) pairs
        if "priority" in options:
            options["priority"] = int(options["priority"])
        yield Outgoing(
            destinations[i] if destinations is not None else None,
            b"" if body is None else body,
            options,
        )
