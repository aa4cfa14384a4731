"""The connector's options, redaction and typed properties in local-mode Spark.

One SparkSession for the module. The option checks need no broker: Spark asks
for a read's schema at ``load()`` and for a writer at ``save()``, and the
connector checks the options there. The round trip runs against a real
``chute serve``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import chute
from chute.message import Byte, Float, Int, PropertyValue, Short, property_type

from .conftest import ChuteServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

import chute.spark  # noqa: E402

from . import test_spark as base  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

NOWHERE = "chute://127.0.0.1:1"  # never connected to: these checks come first


def test_a_misspelt_option_fails_on_load_naming_the_closest(spark: SparkSession) -> None:
    read = spark.read.format("chute").option("uri", NOWHERE).option("destination", "queue:x")
    with pytest.raises(
        Exception, match=r"unknown option 'uri' for a chute read \(did you mean 'url'\?\)"
    ) as info:
        read.load()
    assert "the options of a read are: url, destination, login, password" in str(info.value)

    def stream(key: str, value: str) -> DataFrame:  # a new reader each time: option() mutates
        reader = spark.readStream.format("chute").option("url", NOWHERE)
        return reader.option("destination", "q").option(key, value).load()

    with pytest.raises(Exception, match=r"did you mean 'maxMessagesPerTrigger'"):
        stream("maxMesagesPerTrigger", "10")
    with pytest.raises(Exception, match=r"option failOnDataLoss applies to reads of streams only"):
        stream("failOnDataLoss", "false")  # Kafka's name, for streams (docs/spark.md)
    with pytest.raises(Exception, match=r"(?i)'kafka\.bootstrap\.servers' .* not supported"):
        stream("kafka.bootstrap.servers", "127.0.0.1:9092")
    assert stream("maxOffsetsPerTrigger", "10").isStreaming  # Kafka's name, an alias


def test_a_misspelt_sink_option_fails_the_write(spark: SparkSession, tmp_path: Path) -> None:
    rows = spark.createDataFrame([(b"x",)], "body BINARY")
    with pytest.raises(
        Exception, match=r"unknown option 'destinaton' .*did you mean 'destination'"
    ):
        rows.write.format("chute").option("url", NOWHERE).option("destinaton", "q").mode(
            "append"
        ).save()
    # A stream's sink is planned when the query starts: the query fails at once.
    query = (
        spark.readStream.format("rate")
        .load()
        .selectExpr("CAST(value AS STRING) AS body")
        .writeStream.format("chute")
        .option("url", NOWHERE)
        .option("cursor", "c")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(Exception, match="'cursor' applies to reads"):
        query.awaitTermination(120)


def explained(
    spark: SparkSession, capsys: pytest.CaptureFixture[str], options: dict[str, str]
) -> str:
    capsys.readouterr()
    reader = spark.readStream.format("chute").option("destination", "queue:x")
    for key, value in options.items():
        reader = reader.option(key, value)
    reader.load().explain(extended=True)
    return capsys.readouterr().out


def test_credentials_are_redacted_in_explain(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "chute://alice:in-url-1@127.0.0.1:1"
    plan = explained(spark, capsys, {"url": url, "login": "alice", "password": "pw-1"})
    assert "login=alice" in plan  # the plan shows the options...
    assert "password=*********(redacted)" in plan  # ...but not the credentials
    assert "pw-1" not in plan
    assert "in-url-1" not in plan
    plan = explained(spark, capsys, {"login": "alice", "passcode": "pc-1"})
    assert "passcode=*********(redacted)" in plan  # register() added it to Spark's regex
    assert "pc-1" not in plan
    sql = spark.sql(
        "EXPLAIN EXTENDED CREATE TEMPORARY VIEW v USING chute "
        "OPTIONS (destination 'queue:x', login 'alice', password 'pw-2', passcode 'pc-2')"
    ).collect()[0][0]
    assert "login -> alice" in sql
    assert "pw-2" not in sql
    assert "pc-2" not in sql


def test_without_register_spark_shows_a_passcode(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "spark.sql.redaction.options.regex"
    extended = spark.conf.get(key)
    assert extended is not None
    spark.conf.set(key, "(?i)url")  # Spark's default
    try:
        assert "passcode=pc-3" in explained(spark, capsys, {"passcode": "pc-3"})
        assert "pw-3" not in explained(spark, capsys, {"password": "pw-3"})
    finally:
        spark.conf.set(key, extended)


TYPED: dict[str, PropertyValue] = {
    "flag": True,
    "b": Byte(-7),
    "s": Short(300),
    "i": Int(70_000),
    "l": 2**40,
    "f": Float(2.5),
    "d": 0.1,
    "text": "eu",
}


def test_typed_properties_keep_their_types_through_a_stream(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    with chute.connect(server.url) as conn, conn.session() as s:
        for n in range(3):
            s.send("queue:typed-in", f"m{n}".encode(), properties={**TYPED, "n": Int(n)})
    df = (
        spark.read.format("chute").option("url", server.url).option("destination", "queue:typed-in")
    )
    row = (
        df.load()
        .selectExpr(
            "property_types", "CAST(properties['i'] AS INT) + 1 AS i", "properties['flag'] AS flag"
        )
        .first()
    )
    assert row is not None
    assert (row.i, row.flag) == (70_001, "true")
    assert row.property_types["s"] == "short"
    assert row.property_types["f"] == "float"

    query = (
        spark.readStream.format("chute")
        .option("url", server.url)
        .option("destination", "queue:typed-in")
        .option("cursor", "typed-copy")
        .load()
        .select("body", "properties", "property_types")
        .writeStream.format("chute")
        .option("url", server.url)
        .option("destination", "queue:typed-out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    with chute.connect(server.url) as conn, conn.session() as s:
        copies = sorted(s.browse("queue:typed-out"), key=lambda m: m.body)
    assert [m.body for m in copies] == [b"m0", b"m1", b"m2"]
    for n, message in enumerate(copies):
        expected = {**TYPED, "n": Int(n)}
        assert message.properties == expected
        assert {k: property_type(v) for k, v in message.properties.items()} == {
            k: property_type(v) for k, v in expected.items()
        }
