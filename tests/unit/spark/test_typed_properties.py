"""Typed properties as Spark columns: text in ``properties``, the JMS type in
``property_types``, and back to the same types in the sink."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from chute.message import (  # noqa: E402
    Byte,
    Float,
    Int,
    Message,
    PropertyValue,
    Short,
    property_type,
)
from chute.spark.schema import (  # noqa: E402
    ARROW_SCHEMA,
    READ_SCHEMA,
    TYPE_NAMES,
    rows_of,
    to_record_batch,
    typed_properties,
)

EVERY_TYPE: dict[str, PropertyValue] = {
    "flag": True,
    "b": Byte(-128),
    "s": Short(32767),
    "i": Int(-(2**31)),
    "l": 2**63 - 1,
    "f": Float(0.1),
    "d": 1e-300,
    "text": "héllo, 1",
}


def through_spark(message: Message, columns: tuple[str, ...]) -> dict[str, PropertyValue]:
    """The message read as a row, the row's ``columns`` sent back: its properties."""
    batch = to_record_batch("queue:q", [(1, message)]).select(["body", *columns])
    (outgoing,) = rows_of(batch)
    props: dict[str, PropertyValue] = outgoing.options.get("properties", {})
    return props


def same(a: PropertyValue, b: PropertyValue) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b) and property_type(a) == property_type(b)
    return a == b and property_type(a) == property_type(b)


def test_the_read_has_a_property_types_column_last() -> None:
    assert READ_SCHEMA.endswith("property_types MAP<STRING, STRING>")
    assert ARROW_SCHEMA.names[-2:] == ["body", "property_types"]
    message = Message(b"", id="i1")
    message.properties = dict(EVERY_TYPE)
    row = to_record_batch("queue:q", [(1, message)]).to_pylist()[0]
    assert dict(row["property_types"]) == {
        "flag": "boolean",
        "b": "byte",
        "s": "short",
        "i": "int",
        "l": "long",
        "f": "float",
        "d": "double",
        "text": "string",
    }
    assert dict(row["properties"])["flag"] == "true"
    assert set(TYPE_NAMES) == set(dict(row["property_types"]).values())


def test_a_round_trip_with_property_types_keeps_every_type() -> None:
    message = Message(b"", id="i1")
    message.properties = dict(EVERY_TYPE)
    back = through_spark(message, ("properties", "property_types"))
    assert back.keys() == EVERY_TYPE.keys()
    for name, value in EVERY_TYPE.items():
        assert same(back[name], value), (name, back[name], value)


def test_without_property_types_the_sink_sends_strings_as_before() -> None:
    message = Message(b"", id="i1")
    message.properties = {"n": 3, "flag": False}
    assert through_spark(message, ("properties",)) == {"n": "3", "flag": "false"}


jms_values = st.one_of(
    st.booleans(),
    st.integers(-128, 127).map(Byte),
    st.integers(-(2**15), 2**15 - 1).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32).map(Float),
    st.floats(),
    st.text(),
)


@given(st.dictionaries(st.text(min_size=1, max_size=20), jms_values, max_size=8))
def test_any_properties_survive_the_round_trip(properties: dict[str, PropertyValue]) -> None:
    message = Message(b"", id="i1")
    message.properties = properties
    back = through_spark(message, ("properties", "property_types"))
    assert back.keys() == properties.keys()
    for name, value in properties.items():
        assert same(back[name], value), (name, back[name], value)


@pytest.mark.parametrize(
    ("arrow_type", "value", "expected"),
    [
        (pa.int8(), 5, Byte(5)),
        (pa.int16(), 5, Short(5)),
        (pa.int32(), 5, Int(5)),
        (pa.int64(), 5, 5),
        (pa.float32(), 2.5, Float(2.5)),
        (pa.float64(), 2.5, 2.5),
        (pa.bool_(), True, True),
    ],
)
def test_a_map_of_numbers_is_typed_by_its_value_type(
    arrow_type: Any, value: Any, expected: PropertyValue
) -> None:
    schema = pa.schema([("body", pa.binary()), ("properties", pa.map_(pa.string(), arrow_type))])
    batch = pa.RecordBatch.from_pylist([{"body": b"x", "properties": [("n", value)]}], schema)
    (outgoing,) = rows_of(batch)
    assert same(outgoing.options["properties"]["n"], expected)


def test_property_types_override_the_map_and_nulls_are_absent() -> None:
    typed = typed_properties(
        [("n", "7"), ("gone", None), ("t", "x")], types=[("n", "SHORT"), ("ghost", "int")]
    )
    assert typed == {"n": Short(7), "t": "x"}
    assert property_type(typed["n"]) == property_type(Short(0))


@pytest.mark.parametrize(
    ("pairs", "types", "message"),
    [
        ([("n", "7")], [("n", "integer")], "the types are boolean, byte, short, int"),
        ([("n", "seven")], [("n", "int")], "'n' is typed int but its value 'seven'"),
        ([("f", "yes")], [("f", "boolean")], "'f' is typed boolean"),
        ([("n", "300")], [("n", "byte")], "does not fit a JMS byte"),
    ],
)
def test_a_value_its_type_cannot_hold_is_refused(
    pairs: list[tuple[str, Any]], types: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        typed_properties(pairs, types=types)


def test_a_map_of_unsupported_values_is_refused() -> None:
    schema = pa.schema([("body", pa.binary()), ("properties", pa.map_(pa.string(), pa.date32()))])
    batch = pa.RecordBatch.from_pylist([{"body": b"x", "properties": None}], schema)
    with pytest.raises(ValueError, match="strings, booleans or numbers"):
        list(rows_of(batch))
