"""The Spark connector end to end: local-mode Spark against a real ``chute serve``.

One SparkSession for the whole module (its start costs seconds); each test has
its own broker, destinations and checkpoint. Streams run with
``trigger(availableNow=True)``, which ends by itself once everything that was
there at the start is processed: no sleeps.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

import chute
from chute import Connection
from chute.errors import NotFound

from . import spark_support
from .conftest import ChuteServer, free_port, start_server
from .spark_support import (
    kill_driver,
    start_driver,
    wait_for_progress,
    write_driver,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

pyspark = pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from chute.spark.options import ChuteOptions, Side  # noqa: E402
from chute.spark.sink import ChuteBatchWriter  # noqa: E402

SPARK_CONF = spark_support.SPARK_CONF  # names the Spark modules import from here
_spark_env = spark_support.spark_env


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> Iterator[SparkSession]:
    """The test process's SparkSession (conftest's ``spark_session``) for a module (each
    Spark module's ``spark``): a streaming query of the module's still running at its
    end is stopped there."""
    yield spark_session
    for query in spark_session.streams.active:
        query.stop()


def produce(url: str, address: str, bodies: list[bytes]) -> None:
    with chute.connect(url) as conn, conn.session(transacted=True) as s:
        for i, body in enumerate(bodies, 1):
            s.send(address, body)
            if i % 500 == 0:
                s.commit()
        s.commit()


def read_all(conn: Connection, address: str) -> list[bytes]:
    """Every message a queue holds, in sequence order, without consuming (none for a
    queue nothing ever made: looking does not create it)."""
    try:
        earliest, head = conn.cursor_open(address)
    except NotFound:
        return []
    return [m.body for page in conn.cursor_read(address, None, earliest, head) for _, m in page]


def spark_prepared(conn: Connection) -> list[str]:
    return [x for x in conn.prepared() if x.startswith("spark/")]


def wait_for_no_prepared(conn: Connection, timeout: float = 30.0) -> None:
    """Wait until the broker holds no transaction Spark prepared (its prepared timeout
    rolls back those no task will finish); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while spark_prepared(conn) and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the broker's state, with a deadline
    assert spark_prepared(conn) == []


def stream(
    spark: SparkSession, url: str, source: str, sink: str, checkpoint: Path, **options: Any
) -> Any:
    """A pass-through stream source -> sink, run until everything there now is done."""
    reader = spark.readStream.format("chute").option("url", url).option("destination", source)
    options.setdefault("cursor", "test-query")  # one query per test: one name (docs/spark.md)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .select("body")
        .writeStream.format("chute")
        .option("url", url)
        .option("destination", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def test_stream_reads_n_and_writes_n_exactly_once(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    bodies = [f"order-{i}".encode() for i in range(1000)]
    produce(server.url, "queue:in", bodies)
    query = stream(
        spark, server.url, "queue:in", "queue:out", tmp_path / "ck", maxMessagesPerTrigger=300
    )
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [300, 300, 300, 100]
    with chute.connect(server.url) as conn:
        out = read_all(conn, "queue:out")
        assert len(out) == len(bodies)
        assert Counter(out) == Counter(bodies)  # each once (tasks of a batch may interleave)
        assert spark_prepared(conn) == []
        # Spark acknowledges a batch to its source only at the next one; the last batch,
        # committed by Spark, is consumed when the query stops.
        assert read_all(conn, "queue:in") == []


def test_batch_read_and_write_over_tls(spark: SparkSession, tmp_path: Path) -> None:
    ca = trustme.CA()
    pem, ca_file = tmp_path / "broker.pem", tmp_path / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca.cert_pem.write_to_path(str(ca_file))
    port = free_port()
    srv = start_server(tmp_path, "--tls-port", str(port), "--tls-cert", str(pem))
    url = f"chutes://127.0.0.1:{port}"
    try:
        produce(srv.url, "queue:tls-src", [f"t{i}".encode() for i in range(20)])
        df = (
            spark.read.format("chute")
            .option("url", url)
            .option("tlsCaFile", str(ca_file))
            .option("destination", "queue:tls-src")
            .load()
        )
        assert sorted(r.body for r in df.collect()) == sorted(f"t{i}".encode() for i in range(20))
        (
            df.select("body")
            .write.format("chute")
            .option("url", url)
            .option("tlsCaFile", str(ca_file))
            .option("destination", "queue:tls-dst")
            .mode("append")
            .save()
        )
        with chute.connect(srv.url) as conn:
            assert sorted(read_all(conn, "queue:tls-dst")) == sorted(
                f"t{i}".encode() for i in range(20)
            )
    finally:
        srv.stop()


def test_batch_read_and_write_over_the_http_port(spark: SparkSession, tmp_path: Path) -> None:
    """The connector takes ws:// and http:// URLs as the clients do: a read over a
    WebSocket, a write over plain requests, exactly as over TCP."""
    http_port = free_port()
    srv = start_server(tmp_path, "--http-port", str(http_port))
    try:
        produce(srv.url, "queue:web-src", [f"w{i}".encode() for i in range(20)])
        df = (
            spark.read.format("chute")
            .option("url", f"ws://127.0.0.1:{http_port}/chute")
            .option("destination", "queue:web-src")
            .load()
        )
        assert sorted(r.body for r in df.collect()) == sorted(f"w{i}".encode() for i in range(20))
        (
            df.select("body")
            .write.format("chute")
            .option("url", f"http://127.0.0.1:{http_port}/chute")
            .option("destination", "queue:web-dst")
            .mode("append")
            .save()
        )
        with chute.connect(srv.url) as conn:
            assert sorted(read_all(conn, "queue:web-dst")) == sorted(
                f"w{i}".encode() for i in range(20)
            )
            assert spark_prepared(conn) == []
    finally:
        srv.stop()


def test_batch_read_and_write_round_trip(spark: SparkSession, server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session() as s:
        for i in range(50):
            s.send(
                "queue:src",
                f"row-{i}".encode(),
                priority=i % 10,
                properties={"region": "eu" if i % 2 else "us", "n": i},
                correlation_id=f"c{i}",
            )
    df = spark.read.format("chute").option("url", server.url).option("destination", "queue:src")
    rows = df.load().orderBy("seq").collect()
    assert [r.body for r in rows] == [f"row-{i}".encode() for i in range(50)]
    assert [r.seq for r in rows] == list(range(1, 51))
    assert rows[3].properties == {"region": "eu", "n": "3"}
    assert (rows[3].priority, rows[3].correlation_id, rows[3].destination) == (3, "c3", "queue:src")
    assert rows[3].timestamp is not None

    (
        df.load()
        .select("body", "priority", "properties", "correlation_id")
        .write.format("chute")
        .option("url", server.url)
        .option("destination", "queue:dst")
        .mode("append")
        .save()
    )
    with chute.connect(server.url) as conn, conn.session() as s:
        copied = sorted(s.browse("queue:dst"), key=lambda m: m.correlation_id or "")
        assert sorted(m.body for m in copied) == sorted(r.body for r in rows)
        by_corr = {m.correlation_id: m for m in copied}
        assert by_corr["c3"].priority == 3
        assert by_corr["c3"].properties == {"region": "eu", "n": "3"}
        assert len(s.browse("queue:src")) == 50  # a batch read consumes nothing
        assert spark_prepared(conn) == []


def test_failing_task_rolls_the_sink_back(spark: SparkSession, tmp_path: Path) -> None:
    # A failed task ends the job at once: a sibling still running may prepare after
    # Spark's abort, until Spark kills it (docs/spark.md): the prepared timeout rolls
    # that one back. Whatever was prepared when abort came, abort rolls back
    # (test_batch_abort_rolls_back_what_no_task_reported).
    config = tmp_path / "chute.toml"
    config.write_text("[server]\nprepared_timeout_ms = 1500\nexpiry_interval_ms = 100\n")
    server = start_server(tmp_path, "--config", str(config))
    try:
        rows = [(f"ok-{i}".encode(), "queue:staged") for i in range(40)]
        rows.append((b"poison", "queue:no such name"))  # an invalid address fails its task
        df = spark.createDataFrame(rows, "body BINARY, destination STRING").repartition(2)
        with pytest.raises(Exception, match="invalid destination name"):
            df.write.format("chute").option("url", server.url).mode("append").save()
        with chute.connect(server.url) as conn:
            assert read_all(conn, "queue:staged") == []
            wait_for_no_prepared(conn)
            assert read_all(conn, "queue:staged") == []  # rolled back, never published
    finally:
        server.stop()


def test_batch_abort_rolls_back_what_no_task_reported(server: ChuteServer) -> None:
    # A task that prepared but had not reported when its job failed: abort gets no
    # message from it, and still rolls its transactions back (no prepared timeout here).
    options = ChuteOptions.parse({"url": server.url, "destination": "queue:staged"}, Side.WRITE)
    writer = ChuteBatchWriter(options)
    table = pa.table({"body": [b"a", b"b"]})
    unreported = writer.write(iter(table.to_batches()))
    assert len(unreported.xids) == 1
    other = ChuteBatchWriter(options)  # another job's staged work is not this abort's
    theirs = other.write(iter(table.to_batches()))
    writer.abort([None])
    with chute.connect(server.url) as conn:
        assert spark_prepared(conn) == list(theirs.xids)
        other.abort([theirs])
        assert spark_prepared(conn) == []
        assert read_all(conn, "queue:staged") == []


def test_failing_stream_task_leaves_nothing_visible(spark: SparkSession, tmp_path: Path) -> None:
    # A task that was still running when its sibling failed may prepare after Spark's
    # abort (which names no transaction of a failed batch): the broker's prepared
    # timeout is the safety net for those (docs/spark.md).
    config = tmp_path / "chute.toml"
    config.write_text("[server]\nprepared_timeout_ms = 1500\nexpiry_interval_ms = 100\n")
    broker = start_server(tmp_path, "--config", str(config))
    try:
        _fail_a_stream_task(spark, broker, tmp_path)
    finally:
        broker.stop()


def _fail_a_stream_task(spark: SparkSession, broker: ChuteServer, tmp_path: Path) -> None:
    produce(broker.url, "queue:in", [b"a", b"b", b"poison", b"c"])

    @F.udf("binary")
    def check(body: bytes) -> bytes:
        if body == b"poison":
            raise ValueError("poison message")
        return body

    query = (
        spark.readStream.format("chute")
        .option("url", broker.url)
        .option("destination", "queue:in")
        .option("cursor", "failing-query")
        .option("numPartitions", 2)
        .load()
        .select(check("body").alias("body"))
        .writeStream.format("chute")
        .option("url", broker.url)
        .option("destination", "queue:out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="poison message"):
        query.awaitTermination()
    with chute.connect(broker.url) as conn:
        assert read_all(conn, "queue:out") == []
        wait_for_no_prepared(conn)
        assert read_all(conn, "queue:out") == []  # rolled back, never published
        assert read_all(conn, "queue:in") == [b"a", b"b", b"poison", b"c"]  # nothing consumed


def test_broker_restart_between_batches_keeps_exactly_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = start_server(tmp_path, data_dir=data)
    first = [f"a{i}".encode() for i in range(250)]
    second = [f"b{i}".encode() for i in range(250)]
    try:
        produce(srv.url, "topic:events", [])  # nothing yet: the cursor subscribes first
        ck = tmp_path / "ck"
        opts = {"maxMessagesPerTrigger": 100, "cursor": "restart-test"}
        with chute.connect(srv.url) as conn:
            conn.cursor_open("topic:events", "restart-test")
        produce(srv.url, "topic:events", first)
        stream(spark, srv.url, "topic:events", "queue:out", ck, **opts)
        srv.stop(signal.SIGKILL)
        srv = start_server(tmp_path, port=srv.port, data_dir=data)
        produce(srv.url, "topic:events", second)
        query = stream(spark, srv.url, "topic:events", "queue:out", ck, **opts)
        assert query.exception() is None
        with chute.connect(srv.url) as conn:
            out = read_all(conn, "queue:out")
            assert len(out) == len(first + second)
            assert Counter(out) == Counter(first + second)
            assert spark_prepared(conn) == []
    finally:
        srv.stop()


def test_query_killed_mid_stream_restarts_from_checkpoint_exactly_once(
    spark: SparkSession, server: ChuteServer, tmp_path: Path
) -> None:
    bodies = [f"m{i}".encode() for i in range(1500)]
    produce(server.url, "queue:in", bodies)
    ck = tmp_path / "ck"
    script = write_driver(
        tmp_path / "query.py",
        "queue:out",
        destination="queue:in",
        cursor="test-query",
        maxMessagesPerTrigger=50,
    )
    child = start_driver(script, server.url, ck)
    try:
        wait_for_progress(server.url, lambda conn: len(read_all(conn, "queue:out")), 200, child)
    finally:
        kill_driver(child)
    with chute.connect(server.url) as conn:
        assert 200 <= len(read_all(conn, "queue:out")) < len(bodies)
    query = stream(spark, server.url, "queue:in", "queue:out", ck, maxMessagesPerTrigger=500)
    assert query.exception() is None
    with chute.connect(server.url) as conn:
        out = read_all(conn, "queue:out")
        assert Counter(out) == Counter(bodies)  # nothing lost, nothing twice
        assert spark_prepared(conn) == []


def test_spark_reads_and_writes_only_what_its_user_may(spark: SparkSession, tmp_path: Path) -> None:
    config = tmp_path / "users.toml"
    config.write_text(
        '[users.etl]\npassword = "pw"\nroles = ["etl"]\n'
        '[users.root]\npassword = "pw"\nroles = ["admin"]\n'
        '[roles.etl]\nconsume = ["queue:in.*"]\nbrowse = ["queue:in.*"]\n'
        'send = ["queue:out.*"]\ncreate = ["queue:out.*"]\n'
    )
    srv = start_server(tmp_path, "--config", str(config))

    def read(address: str) -> list[bytes]:
        df = (
            spark.read.format("chute")
            .option("url", srv.url)
            .option("login", "etl")
            .option("passcode", "pw")
            .option("destination", address)
            .load()
        )
        return sorted(r.body for r in df.collect())

    try:
        with chute.connect(srv.url, login="root", passcode="pw") as conn, conn.session() as s:
            for address in ("queue:in.a", "queue:secret"):
                for i in range(5):
                    s.send(address, f"{address}-{i}".encode())
        assert read("queue:in.a") == sorted(f"queue:in.a-{i}".encode() for i in range(5))
        with pytest.raises(Exception, match="may not consume queue:secret"):
            read("queue:secret")
        rows = spark.createDataFrame([(b"x",)], "body binary")
        with pytest.raises(Exception, match=r"may not send queue:in\.a"):
            (
                rows.write.format("chute")
                .option("url", srv.url)
                .option("login", "etl")
                .option("passcode", "pw")
                .option("destination", "queue:in.a")
                .mode("append")
                .save()
            )
        with chute.connect(srv.url, login="root", passcode="pw") as conn, conn.session() as s:
            assert len(s.browse("queue:in.a")) == 5  # nothing written, nothing consumed
            assert len(s.browse("queue:secret")) == 5
            assert conn.prepared() == []
    finally:
        srv.stop()
