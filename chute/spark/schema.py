"""Columns: the message model as Spark rows, and rows back into messages.

The read schema is :data:`READ_SCHEMA` (body as binary, ``seq`` the offset).
Pages from the broker become ``pyarrow.RecordBatch`` es of exactly that schema
(Spark checks names, types and nullability). The sink takes ``body`` (binary
or string) and, when present, ``destination``, ``priority``, ``ttl``,
``correlation_id``, ``reply_to``, ``type``, ``id``, ``properties``,
``property_types`` and ``key`` (the message's key: on a stream with partitions, the
partition); other columns are ignored.

Typed properties: ``properties`` holds each value as text and ``property_types``
its JMS type name (:data:`TYPE_NAMES`), so ``CAST(properties['n'] AS INT)`` gets
the number back and the sink sends each property with the type it came with. The
sink also takes a ``properties`` map of numbers or booleans, typed by its Arrow
value type (int → int, bigint → long, float → float, double → double, ...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa

from chute.message import (
    KEY_PROPERTY,
    Message,
    PropertyType,
    PropertyValue,
    property_type,
    typed_value,
)

READ_SCHEMA: Final = (
    "seq BIGINT, id STRING, destination STRING, priority INT, timestamp TIMESTAMP, "
    "expiration BIGINT, correlation_id STRING, reply_to STRING, type STRING, "
    "persistent BOOLEAN, redelivered BOOLEAN, delivery_count INT, kind STRING, "
    "properties MAP<STRING, STRING>, body BINARY, property_types MAP<STRING, STRING>"
)
"""The columns of a read, as Spark DDL."""

STREAM_READ_SCHEMA: Final = READ_SCHEMA + ", partition INT"
"""The columns of a read of streams: a read's, and the stream partition of each message
(0 on a stream with one), as Kafka's source has it."""

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
        ("property_types", pa.map_(pa.string(), pa.string())),
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
    "property_types",
    "key",
)

TYPE_NAMES: Final = tuple(t.name.lower() for t in PropertyType)
"""The JMS property type names of the ``property_types`` column."""

_ARROW_TYPES: Final = {
    pa.bool_(): PropertyType.BOOLEAN,
    pa.int8(): PropertyType.BYTE,
    pa.int16(): PropertyType.SHORT,
    pa.int32(): PropertyType.INT,
    pa.int64(): PropertyType.LONG,
    pa.float32(): PropertyType.FLOAT,
    pa.float64(): PropertyType.DOUBLE,
    pa.string(): PropertyType.STRING,
    pa.large_string(): PropertyType.STRING,
}


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
        [_property_types(m) for m in messages],
    ]
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, ARROW_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _string_properties(message: Message) -> list[tuple[str, str]] | None:
    if not message.properties:
        return None
    return [(k, _text(v)) for k, v in message.properties.items()]


def _property_types(message: Message) -> list[tuple[str, str]] | None:
    if not message.properties:
        return None
    return [(k, property_type(v).name.lower()) for k, v in message.properties.items()]


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
    types = cols.pop("property_types", None)
    keys = cols.pop("key", None)
    value_type = _map_value_type(batch) if props is not None else PropertyType.STRING
    for i, body in enumerate(bodies):
        options: dict[str, Any] = {k: v[i] for k, v in cols.items() if v[i] is not None}
        if ttls is not None and ttls[i]:
            options["ttl"] = int(ttls[i])
        if props is not None and props[i]:
            options["properties"] = typed_properties(
                props[i], value_type, types[i] if types is not None else None
            )
        if keys is not None and keys[i] is not None:  # the key: the string property "key"
            options.setdefault("properties", {})[KEY_PROPERTY] = _key_text(keys[i])
        if "priority" in options:
            options["priority"] = int(options["priority"])
        yield Outgoing(
            destinations[i] if destinations is not None else None,
            b"" if body is None else body,
            options,
        )


def _key_text(value: object) -> str:
    """A ``key`` column's value as the message's key: text as it is, binary as UTF-8
    (Kafka's key column is binary)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return _text(value)


def _map_value_type(batch: pa.RecordBatch) -> PropertyType:
    kind = batch.schema.field("properties").type
    if not isinstance(kind, pa.MapType) or kind.key_type not in (pa.string(), pa.large_string()):
        raise ValueError(f"the sink's 'properties' column must be a map of strings, not {kind}")
    try:
        return _ARROW_TYPES[kind.item_type]
    except KeyError:
        raise ValueError(
            f"the sink's 'properties' map must hold strings, booleans or numbers, not "
            f"{kind.item_type} values"
        ) from None


def typed_properties(
    pairs: Sequence[tuple[str, Any]],
    value_type: PropertyType = PropertyType.STRING,
    types: Sequence[tuple[str, str]] | None = None,
) -> dict[str, PropertyValue]:
    """One row's properties as values that keep their JMS types: a property named in
    ``types`` (the ``property_types`` column) gets that type, any other the map's.

    Raises:
        ValueError: an unknown type name, or a value its type cannot hold.
    """
    named = dict(types) if types else {}
    typed: dict[str, PropertyValue] = {}
    for name, value in pairs:  # Arrow gives a map as (key, value) pairs
        if value is None:
            continue  # a JMS property has no null: absent, as properties['x'] reads it
        type_name = named.get(name)
        kind = value_type if type_name is None else _type_named(name, type_name)
        typed[name] = _typed(name, value, kind)
    return typed


def _type_named(name: str, type_name: str) -> PropertyType:
    try:
        return PropertyType[type_name.strip().upper()]
    except KeyError:
        raise ValueError(
            f"property_types gives property {name!r} the type {type_name!r}; "
            f"the types are {', '.join(TYPE_NAMES)}"
        ) from None


def _typed(name: str, value: Any, kind: PropertyType) -> PropertyValue:
    if isinstance(value, str) and kind is not PropertyType.STRING:
        value = _parse(name, value, kind)
    return typed_value(kind, value)


def _parse(name: str, text: str, kind: PropertyType) -> PropertyValue:
    try:
        if kind is PropertyType.BOOLEAN:
            return {"true": True, "false": False}[text.strip().lower()]
        if kind in (PropertyType.FLOAT, PropertyType.DOUBLE):
            return float(text)
        return int(text)
    except (KeyError, ValueError):
        raise ValueError(
            f"property {name!r} is typed {kind.name.lower()} but its value {text!r} is not one"
        ) from None
