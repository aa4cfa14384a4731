"""Spark reads streams the way it reads Kafka (docs/spark.md, "Reading streams"): offsets
in the checkpoint, queries independent of each other, several streams or a pattern in
one query, Kafka's offset options, failOnDataLoss, and exactly-once from a stream
through Spark into a stream across a killed driver and a killed broker.

One SparkSession for the module; each test has its own broker (or streams) and
checkpoints.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import chute
from chute import Connection

from . import test_spark as base
from .conftest import ChuteServer, start_server
from .spark_support import kill_driver, start_driver, wait_for_progress, write_driver
from .test_spark import produce, read_all, spark_prepared

pytestmark = [pytest.mark.spark(lane="streams"), pytest.mark.timeout(400)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module


def pipe(
    spark: SparkSession,
    url: str,
    checkpoint: Path,
    sink: str,
    *,
    trigger_now: bool = True,
    **options: Any,
) -> StreamingQuery:
    """A pass-through stream of the options' streams into ``sink``; with ``trigger_now``,
    run until everything there now is done."""
    reader = spark.readStream.format("chute").option("url", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .select("body")
        .writeStream.format("chute")
        .option("url", url)
        .option("destination", sink)
        .option("checkpointLocation", str(checkpoint))
    )
    if not trigger_now:
        return writer.trigger(processingTime="100 milliseconds").start()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    assert query.exception() is None
    return query


def bodies_of(conn: Connection, address: str) -> list[bytes]:
    return read_all(conn, address)


def test_two_queries_over_one_stream_each_see_every_message(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    sent = [f"o{i}".encode() for i in range(1200)]
    produce(server.url, "stream:orders", sent)
    pipe(spark, server.url, tmp_path / "a", "queue:a", destination="stream:orders")
    pipe(spark, server.url, tmp_path / "b", "queue:b", destination="stream:orders")
    with chute.connect(server.url) as conn:
        assert Counter(bodies_of(conn, "queue:a")) == Counter(sent)
        assert Counter(bodies_of(conn, "queue:b")) == Counter(sent)
        assert conn.cursor_open("stream:orders") == (1, len(sent) + 1)  # nothing consumed
        more = [f"p{i}".encode() for i in range(300)]
        produce(server.url, "stream:orders", more)
        pipe(spark, server.url, tmp_path / "a", "queue:a", destination="stream:orders")
        assert Counter(bodies_of(conn, "queue:a")) == Counter(sent + more)  # from its checkpoint


def test_several_streams_and_a_pattern_in_one_query(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    eu = [f"eu{i}".encode() for i in range(400)]
    us = [f"us{i}".encode() for i in range(250)]
    produce(server.url, "stream:sales.eu", eu)
    produce(server.url, "stream:sales.us", us)
    pipe(
        spark,
        server.url,
        tmp_path / "list",
        "queue:list",
        destination="stream:sales.eu,stream:sales.us",
        numPartitions=3,
    )
    ck = tmp_path / "pattern"
    pipe(spark, server.url, ck, "queue:pattern", subscribePattern="stream:sales.*")
    with chute.connect(server.url) as conn:
        assert Counter(bodies_of(conn, "queue:list")) == Counter(eu + us)
        assert Counter(bodies_of(conn, "queue:pattern")) == Counter(eu + us)
    asia = [f"asia{i}".encode() for i in range(120)]
    produce(server.url, "stream:sales.asia", asia)  # appears after the query started once
    pipe(spark, server.url, ck, "queue:pattern", subscribePattern="stream:sales.*")
    with chute.connect(server.url) as conn:
        assert Counter(bodies_of(conn, "queue:pattern")) == Counter(eu + us + asia)


def test_the_destination_column_names_each_rows_stream(
    spark: SparkSession, server: ChuteServer
) -> None:
    produce(server.url, "stream:x.one", [b"1", b"2"])
    produce(server.url, "stream:x.two", [b"3"])
    rows = (
        spark.read.format("chute")
        .option("url", server.url)
        .option("pattern", "stream:x.*")
        .load()
        .select("destination", "seq", "body")
        .collect()
    )
    got = sorted((r.destination, r.seq, bytes(r.body)) for r in rows)
    assert got == [("stream:x.one", 1, b"1"), ("stream:x.one", 2, b"2"), ("stream:x.two", 1, b"3")]


def test_kafka_offset_options(spark: SparkSession, server: ChuteServer, tmp_path: Path) -> None:
    old = [f"old{i}".encode() for i in range(100)]
    produce(server.url, "stream:k", old[:50])
    produce(server.url, "stream:k", old[50:])
    with chute.connect(server.url) as conn:
        _, head = conn.cursor_open("stream:k")
        stamps = [m.timestamp for _, m in conn.cursor_fetch("stream:k", None, 1, head)[1]]
    middle = stamps[50]  # the time the second part was accepted
    from_middle = next(i for i, t in enumerate(stamps) if t >= middle)
    pipe(spark, server.url, tmp_path / "latest", "queue:latest", destination="stream:k",
         startingOffsets="latest")  # fmt: skip
    new = [f"new{i}".encode() for i in range(30)]
    produce(server.url, "stream:k", new)
    pipe(spark, server.url, tmp_path / "latest", "queue:latest", destination="stream:k")
    pipe(spark, server.url, tmp_path / "json", "queue:json", destination="stream:k",
         startingOffsets=json.dumps({"stream:k": 91}))  # fmt: skip
    pipe(spark, server.url, tmp_path / "ts", "queue:ts", destination="stream:k",
         startingTimestamp=str(middle))  # fmt: skip
    batch = (
        spark.read.format("chute")
        .option("url", server.url)
        .option("destination", "stream:k")
        .option("startingOffsets", "11")
        .option("endingOffsets", json.dumps({"stream:k": 21}))
        .load()
        .select("seq")
        .collect()
    )
    with chute.connect(server.url) as conn:
        # (a batch's partitions reach the sink in any order: compare as multisets)
        assert Counter(bodies_of(conn, "queue:latest")) == Counter(new)
        assert Counter(bodies_of(conn, "queue:json")) == Counter(old[90:] + new)
        assert Counter(bodies_of(conn, "queue:ts")) == Counter(old[from_middle:] + new)
    assert sorted(r.seq for r in batch) == list(range(11, 21))


def test_max_offsets_per_trigger_bounds_batches_and_progress_shows_the_head(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    produce(server.url, "stream:m", [f"m{i}".encode() for i in range(500)])
    query = pipe(
        spark,
        server.url,
        tmp_path / "ck",
        "queue:m",
        destination="stream:m",
        maxOffsetsPerTrigger=100,
    )
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert rows == [100] * 5
    last = [p for p in query.recentProgress if p["numInputRows"]][-1]["sources"][0]
    assert json.loads(last["endOffset"]) == {"stream:m": 501}
    assert json.loads(last["latestOffset"]) == {"stream:m": 501}  # caught up with the head


def test_fail_on_data_loss_when_retention_removed_unread_offsets(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text('[destinations."stream:short"]\nmax_messages = 50\n')
    srv = start_server(tmp_path, "--config", str(config))
    try:
        produce(srv.url, "stream:short", [f"a{i}".encode() for i in range(40)])
        ck = tmp_path / "ck"
        pipe(spark, srv.url, ck, "queue:out", destination="stream:short")
        produce(srv.url, "stream:short", [f"b{i}".encode() for i in range(100)])
        query = (
            spark.readStream.format("chute")
            .option("url", srv.url)
            .option("destination", "stream:short")
            .load()
            .select("body")
            .writeStream.format("chute")
            .option("url", srv.url)
            .option("destination", "queue:out")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match=r"offsets 41\.\.90 were removed by the stream"):
            query.awaitTermination()
        pipe(spark, srv.url, ck, "queue:out", destination="stream:short", failOnDataLoss="false")
        with chute.connect(srv.url) as conn:
            out = bodies_of(conn, "queue:out")
        kept = [f"b{i}".encode() for i in range(50, 100)]
        assert Counter(out) == Counter([f"a{i}".encode() for i in range(40)] + kept)
    finally:
        srv.stop()


def test_stream_to_stream_exactly_once_across_driver_and_broker_kills(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = start_server(tmp_path, data_dir=data)
    sent = [f"m{i}".encode() for i in range(2000)]
    ck = tmp_path / "ck"
    script = write_driver(
        tmp_path / "query.py", "stream:out", destination="stream:in", maxOffsetsPerTrigger=100
    )

    def driver() -> subprocess.Popen[bytes]:
        return start_driver(script, srv.url, ck)

    def written(conn: Connection) -> int:
        return len(read_all(conn, "stream:out"))

    try:
        produce(srv.url, "stream:in", sent)
        child = driver()
        try:
            wait_for_progress(srv.url, written, 300, child)
            kill_driver(child)  # the driver, mid-stream
            child = wait_for_progress(srv.url, written, 900, driver())
            srv.stop(signal.SIGKILL)  # the broker, mid-stream
            srv = start_server(tmp_path, port=srv.port, data_dir=data)
            child = wait_for_progress(srv.url, written, 1300, child, restart=driver)
        finally:
            kill_driver(child)
        query = pipe(
            spark, srv.url, ck, "stream:out", destination="stream:in", maxOffsetsPerTrigger=500
        )
        assert query.exception() is None
        with chute.connect(srv.url) as conn:
            out = bodies_of(conn, "stream:out")
            assert Counter(out) == Counter(sent)  # nothing lost, nothing twice
            assert spark_prepared(conn) == []
    finally:
        srv.stop()


def test_a_partition_larger_than_the_memory_watermark_is_written_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A task prepares its rows in chunks: a prepared chunk no longer counts against the
    broker's memory watermark, so a partition bigger than it never waits for room that
    only its own commit would free."""
    config = tmp_path / "chute.toml"
    config.write_text(
        '[server]\nmax_memory = "16MiB"\nmemory_high_watermark = "32MiB"\nblock_timeout_ms = 5000\n'
    )
    srv = start_server(tmp_path, "--config", str(config))
    try:
        rows = 40_000  # ~40 MiB of bodies in one partition (~85 MiB held): past the watermark
        frame = spark.range(rows, numPartitions=1).selectExpr(
            "unhex(concat(repeat('ab', 500), lpad(hex(id), 8, '0'))) AS body"
        )
        frame.write.format("chute").option("url", srv.url).option("destination", "stream:big").mode(
            "append"
        ).save()
        with chute.connect(srv.url) as conn:
            assert conn.cursor_open("stream:big") == (1, rows + 1)
            assert spark_prepared(conn) == []
    finally:
        srv.stop()
