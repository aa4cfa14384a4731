"""The connector's pure parts: options, partition planning, Arrow columns, orphan xids."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from chute.message import Byte, Float, Int, Message, Short  # noqa: E402
from chute.spark.options import ChuteOptions, OptionError  # noqa: E402
from chute.spark.schema import ARROW_SCHEMA, rows_of, to_record_batch  # noqa: E402
from chute.spark.sink import _orphan  # noqa: E402
from chute.spark.source import _max_rows, _starting, split  # noqa: E402


def test_options_are_case_insensitive_strings() -> None:
    o = ChuteOptions.parse(
        {
            "URL": "chute://h:1",
            "destination": "orders",
            "maxmessagespertrigger": "500",
            "subscription": "s1",
            "startingOffsets": "LATEST",
            "numPartitions": "4",
        }
    )
    assert (o.url, o.address, o.max_per_trigger, o.cursor, o.starting, o.partitions) == (
        "chute://h:1",
        "queue:orders",
        500,
        "s1",
        "latest",
        4,
    )


def test_tls_options_name_the_files() -> None:
    o = ChuteOptions.parse(
        {
            "url": "chutes://alice@h",
            "destination": "q",
            "tlsCaFile": "ca.pem",
            "tlsCertFile": "alice.pem",
            "tls.keyFile": "alice-key.pem",
        }
    )
    assert (o.tls_ca, o.tls_cert, o.tls_key) == ("ca.pem", "alice.pem", "alice-key.pem")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "destination"),
        ({"destination": "a/b"}, "invalid destination"),
        ({"destination": "q", "startingOffsets": "soon"}, "startingOffsets"),
        ({"destination": "q", "maxMessagesPerTrigger": "many"}, "integer"),
        ({"destination": "q", "numPartitions": "-2"}, "negative"),
    ],
)
def test_bad_options_are_refused_clearly(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ChuteOptions.parse(options)


def test_split_is_deterministic_and_covers_the_range() -> None:
    parts = split(10, 21, 3)
    assert [(p.start, p.end) for p in parts] == [(10, 14), (14, 18), (18, 21)]
    assert split(5, 5, 2) == []
    assert [(p.start, p.end) for p in split(1, 2, 4)] == [(1, 2)]


def test_starting_positions_and_limits() -> None:
    assert (_starting("earliest", 3, 9), _starting("latest", 3, 9), _starting("7", 3, 9)) == (
        3,
        9,
        7,
    )
    assert _max_rows({"max_rows": 20, "_type": "ReadMaxRows"}) == 20
    assert _max_rows(None) == 0


def test_a_page_becomes_a_record_batch_of_the_read_schema() -> None:
    m = Message(b"\x00body", id="i1", priority=7, timestamp=1_700_000_000_123, type="order")
    m.properties = {"region": "eu", "flag": True, "n": 3}
    batch = to_record_batch("queue:q", [(5, m), (6, Message(b"", id="i2"))])
    assert batch.schema == ARROW_SCHEMA
    row = batch.to_pylist()[0]
    assert (row["seq"], row["body"], row["priority"], row["type"]) == (5, b"\x00body", 7, "order")
    assert row["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert dict(row["properties"]) == {"region": "eu", "flag": "true", "n": "3"}
    assert batch.to_pylist()[1]["properties"] is None


def test_typed_properties_are_plain_text_in_the_properties_column() -> None:
    m = Message(b"", id="i1")
    m.properties = {"y": Byte(-128), "h": Short(-20000), "i": Int(0), "f": Float(2.5)}
    row = to_record_batch("queue:q", [(1, m)]).to_pylist()[0]
    assert dict(row["properties"]) == {"y": "-128", "h": "-20000", "i": "0", "f": "2.5"}


def test_rows_become_send_arguments() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"body": "text", "priority": 9, "ttl": 1000, "destination": None, "extra": 1},
            {"body": b"raw", "priority": None, "ttl": 0, "destination": "queue:x", "extra": 2},
        ],
        schema=pa.schema(
            [
                ("body", pa.string()),
                ("priority", pa.int64()),
                ("ttl", pa.int64()),
                ("destination", pa.string()),
                ("extra", pa.int64()),
            ]
        ),
    )
    first, second = rows_of(batch)
    assert (first.destination, first.body, first.options) == (
        None,
        "text",
        {"priority": 9, "ttl": 1000},
    )
    assert second.destination == "queue:x"
    with pytest.raises(ValueError, match="body"):
        list(rows_of(pa.RecordBatch.from_pylist([{"x": 1}])))


def test_orphans_are_this_querys_transactions_at_or_below_the_batch() -> None:
    assert _orphan("spark/q1/3/0/0/ab", "q1", 3, [])
    assert not _orphan("spark/q1/3/0/0/ab", "q1", 3, ["spark/q1/3/0/0/ab"])
    assert not _orphan("spark/q1/4/0/0/ab", "q1", 3, [])
    assert not _orphan("spark/q2/1/0/0/ab", "q1", 3, [])
    assert not _orphan("batch-7", "q1", 3, [])
