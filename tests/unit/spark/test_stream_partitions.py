"""Offsets of streams with partitions as Spark keeps them (Kafka's shape) and as the
source plans with them (per partition's address); the sink's ``key`` column."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import pyarrow as pa

from chute.spark.options import ChuteOptions, OptionError
from chute.spark.schema import READ_SCHEMA, STREAM_READ_SCHEMA, rows_of
from chute.spark.streams import flat, nested, parse_starting, plan


def test_offsets_of_a_stream_with_partitions_nest_as_kafka_writes_them() -> None:
    inside = {"stream:a": 5, "stream:orders": 42, "stream:orders#1": 7, "stream:orders#10": 3}
    spark = nested(inside)
    assert spark == {"stream:a": 5, "stream:orders": {"0": 42, "1": 7, "10": 3}}
    assert list(spark["stream:orders"]) == ["0", "1", "10"]  # partitions in order
    assert flat(spark) == inside
    assert nested({"stream:a": 5}) == {"stream:a": 5}  # one partition: as ever


def test_a_checkpoint_from_before_the_stream_had_partitions_is_partition_0() -> None:
    assert flat({"stream:orders": 201}) == {"stream:orders": 201}


def test_starting_offsets_per_partition() -> None:
    addresses = ["stream:orders", "stream:orders#1", "stream:orders#2"]
    wanted = parse_starting('{"stream:orders": {"0": 3, "1": -2, "2": -1}}', addresses)
    assert wanted == {
        "stream:orders": 3,
        "stream:orders#1": "earliest",
        "stream:orders#2": "latest",
    }
    assert parse_starting("earliest", addresses) == dict.fromkeys(addresses, "earliest")
    for bad in ('{"stream:orders": {"x": 1}}', '{"stream:orders": {"0": "a"}}'):
        with pytest.raises(OptionError, match="per partition"):
            parse_starting(bad, addresses)


def test_each_partition_is_read_by_tasks_of_its_own() -> None:
    start = {"stream:o": 1, "stream:o#1": 1}
    parts = plan(start, {"stream:o": 11, "stream:o#1": 3}, 1)
    assert [(p.address, p.start, p.end) for p in parts] == [
        ("stream:o", 1, 11),
        ("stream:o#1", 1, 3),
    ]


def test_each_task_is_planned_on_its_partitions_home() -> None:
    start = {"stream:o": 1, "stream:o#1": 1, "stream:p": 1}
    homes = {"stream:o": "10.0.0.1:5445", "stream:o#1": "10.0.0.2:5445"}
    parts = plan(start, {"stream:o": 11, "stream:o#1": 5, "stream:p": 3}, 4, homes)
    assert [(p.address, p.home) for p in parts] == [
        *[("stream:o", "10.0.0.1:5445")] * 2,  # split further (numPartitions): one home
        ("stream:o#1", "10.0.0.2:5445"),
        ("stream:p", None),  # no home known: read through the URL
    ]


@pytest.mark.parametrize(
    ("url", "direct"),
    [
        ("chute://h1:5445", True),
        ("chutes://a:b@h1:5446,h2:5446", True),
        ("ws://h1:8445/chute", False),  # a node's native address is no WebSocket's
        ("https://h1:8445/chute", False),
    ],
)
def test_tasks_read_on_homes_over_native_urls_only(url: str, direct: bool) -> None:
    assert ChuteOptions.parse({"url": url, "destination": "stream:o"}).direct is direct


def test_a_read_of_streams_has_a_partition_column() -> None:
    assert STREAM_READ_SCHEMA == READ_SCHEMA + ", partition INT"


def test_the_sinks_key_column_is_the_messages_key() -> None:
    batch = pa.RecordBatch.from_pylist(
        [{"body": b"a", "key": "k1"}, {"body": b"b", "key": None}],
        pa.schema([("body", pa.binary()), ("key", pa.string())]),
    )
    rows = list(rows_of(batch))
    assert rows[0].options == {"properties": {"key": "k1"}}
    assert rows[1].options == {}
    binary = pa.RecordBatch.from_pylist(
        [{"body": b"a", "key": b"k2"}], pa.schema([("body", pa.binary()), ("key", pa.binary())])
    )
    assert next(rows_of(binary)).options == {"properties": {"key": "k2"}}
