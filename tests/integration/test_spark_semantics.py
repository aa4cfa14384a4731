"""What reading queues and topics through Spark means (docs/spark.md, "Reading queues
and topics"): a stopped query lets go of its queue at once and keeps its place, every
stream read names its own cursor, and a batch read of a topic is refused without
leaving a subscription behind.

One SparkSession for the module; each test has its own broker and checkpoint. The
broker's cursor lease is the default 60 s: a queue released "at once" is one another
consumer reads from well within that.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

import chute
from chute import Connection

from . import test_spark as base
from .conftest import ChuteServer
from .spark_support import driver_command, write_driver
from .test_spark import read_all

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

RELEASED_WITHIN_S = 15.0
"""Well below the 60 s lease: a queue read from within this was released, not expired."""


def produce(url: str, address: str, bodies: list[bytes]) -> None:
    with chute.connect(url) as conn, conn.session() as s:
        for body in bodies:
            s.send(address, body)


def start(
    spark: SparkSession,
    url: str,
    source: str,
    checkpoint: Path,
    cursor: str,
    *,
    available_now: bool = False,
) -> StreamingQuery:
    """A pass-through stream ``source`` -> queue:out under ``cursor``."""
    writer = (
        spark.readStream.format("chute")
        .option("url", url)
        .option("destination", source)
        .option("cursor", cursor)
        .load()
        .select("body")
        .writeStream.format("chute")
        .option("url", url)
        .option("destination", "queue:out")
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        assert query.exception() is None
        return query
    return writer.trigger(processingTime="100 milliseconds").start()


def first_received(conn: Connection, address: str) -> tuple[bytes, float]:
    """The first message another (plain) consumer of ``address`` gets, and after how
    many seconds; fails if none comes within RELEASED_WITHIN_S."""
    began = time.monotonic()
    with conn.session() as s:
        message = s.consumer(address).receive(timeout=RELEASED_WITHIN_S)
    assert message is not None, f"{address} is still held: no message in {RELEASED_WITHIN_S} s"
    return message.body, time.monotonic() - began


def subscriptions(conn: Connection, topic: str) -> list[str]:
    found = conn.stat(topic)["destinations"]
    return [s["name"] for d in found for s in d.get("subscriptions", [])]


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    return tmp_path / "ck"


def test_query_stop_releases_the_queue_at_once_and_keeps_the_querys_place(
    spark: SparkSession, server: ChuteServer, ck: Path
) -> None:
    first = [f"a{i}".encode() for i in range(5)]
    produce(server.url, "queue:in", first)
    query = start(spark, server.url, "queue:in", ck, "stop-test")
    query.processAllAvailable()
    query.stop()
    with chute.connect(server.url) as conn:
        assert sorted(read_all(conn, "queue:out")) == first
        # Consumed at the stop, although Spark acknowledges a batch only at the next one
        # (the source's process stops once query.stop() returned: within seconds)
        deadline = time.monotonic() + RELEASED_WITHIN_S
        while read_all(conn, "queue:in"):
            assert time.monotonic() < deadline, f"queue:in not consumed in {RELEASED_WITHIN_S} s"
            time.sleep(0.05)  # polling the broker, with a deadline
        produce(server.url, "queue:in", [b"for-another-consumer"])
        body, _ = first_received(conn, "queue:in")
        assert body == b"for-another-consumer"
    later = [f"c{i}".encode() for i in range(3)]
    produce(server.url, "queue:in", later)
    start(spark, server.url, "queue:in", ck, "stop-test", available_now=True)
    with chute.connect(server.url) as conn:
        out = read_all(conn, "queue:out")
        assert Counter(out) == Counter(first + later)  # each once: the place was kept


def test_a_stopped_topic_query_keeps_its_subscription_and_resumes_there(
    spark: SparkSession, server: ChuteServer, ck: Path
) -> None:
    produce(server.url, "topic:events", [])
    query = start(spark, server.url, "topic:events", ck, "events-job")
    query.processAllAvailable()  # the cursor is open: its subscription keeps what comes
    first = [f"e{i}".encode() for i in range(4)]
    produce(server.url, "topic:events", first)
    query.processAllAvailable()
    query.stop()
    later = [f"f{i}".encode() for i in range(3)]
    produce(server.url, "topic:events", later)  # while the query is down
    with chute.connect(server.url) as conn:
        assert subscriptions(conn, "topic:events") == ["cursor:topic:events.events-job"]
    start(spark, server.url, "topic:events", ck, "events-job", available_now=True)
    with chute.connect(server.url) as conn:
        assert Counter(read_all(conn, "queue:out")) == Counter(first + later)


def test_a_batch_read_of_a_topic_is_refused_and_leaves_no_subscription(
    spark: SparkSession, server: ChuteServer
) -> None:
    produce(server.url, "topic:news", [b"before"])
    read = spark.read.format("chute").option("url", server.url).option("destination", "topic:news")
    for _ in range(2):  # the second time no differently from the first
        with pytest.raises(Exception, match="a batch read of a topic is not supported"):
            read.load().collect()
    with pytest.raises(Exception, match="takes no cursor"):
        read.option("destination", "queue:q").option("cursor", "mine").load().collect()
    with chute.connect(server.url) as conn:
        assert subscriptions(conn, "topic:news") == []


def test_a_stream_read_without_a_cursor_fails_saying_why(
    spark: SparkSession, server: ChuteServer, ck: Path
) -> None:
    query = (
        spark.readStream.format("chute")
        .option("url", server.url)
        .option("destination", "queue:in")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(ck))
        .start()
    )
    with pytest.raises(Exception, match='needs option "cursor"'):
        query.awaitTermination(120)


def test_a_driver_that_ends_normally_releases_the_queue_at_once(
    server: ChuteServer, tmp_path: Path
) -> None:
    bodies = [f"m{i}".encode() for i in range(5)]
    produce(server.url, "queue:in", bodies)
    script = write_driver(
        tmp_path / "driver.py",
        "queue:out",
        trigger_ms=100,
        # ends once it processed what there is, its query still running: no
        # query.stop(), no spark.stop()
        then="query.processAllAvailable()\nprint('processed', flush=True)",
        destination="queue:in",
        cursor="exit-test",
    )
    done = subprocess.run(
        driver_command(script, server.url, tmp_path / "ck"),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert "processed" in done.stdout, done.stderr[-3000:]
    with chute.connect(server.url) as conn:
        assert sorted(read_all(conn, "queue:out")) == bodies
        produce(server.url, "queue:in", [b"next"])
        body, _ = first_received(conn, "queue:in")
        assert body == b"next"
