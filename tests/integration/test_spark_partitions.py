"""Spark over streams with partitions, as it reads Kafka's (docs/spark.md, "Reading
streams"): a ``partition`` column, offsets per partition in the checkpoint and in
``startingOffsets``/``endingOffsets`` (``{"stream:orders": {"0": 42, "1": 7}}``), a
stream that gains partitions picked up at the next trigger, and the sink writing each
row to the partition of its ``key``, exactly once across a killed driver and a killed
broker."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

import chute
from chute import Connection

from . import test_spark as base
from .conftest import ChuteServer, start_server
from .spark_support import kill_driver, start_driver, wait_for_progress, write_driver
from .test_serve_nodes import start_nodes
from .test_spark import read_all, spark_prepared
from .test_spark_streams import pipe

pytestmark = [pytest.mark.spark(lane="streams"), pytest.mark.timeout(400)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

S = "stream:orders"


def config(tmp_path: Path, **partitions: int) -> Path:
    """A configuration giving each stream (``orders=3``) its partitions."""
    path = tmp_path / "chute.toml"
    path.write_text(
        "".join(
            f'[destinations."stream:{name}"]\npartitions = {count}\n'
            for name, count in partitions.items()
        )
    )
    return path


def start(tmp_path: Path, data: Path, port: int | None = None, **partitions: int) -> ChuteServer:
    """A broker on ``data`` (on ``port``: to start one again where its clients are)."""
    path = config(tmp_path, **partitions)
    return start_server(tmp_path, "--config", str(path), data_dir=data, port=port)


def produce(url: str, address: str, count: int, prefix: str = "m") -> dict[bytes, str | None]:
    """``count`` messages, two in three with a key of five; each body's key."""
    keys: dict[bytes, str | None] = {}
    with chute.connect(url) as conn, conn.session(transacted=True) as s:
        for i in range(count):
            key = f"k{i % 5}" if i % 3 else None
            body = f"{prefix}{i}"
            s.send(address, body, key=key)
            keys[body.encode()] = key
            if i % 500 == 499:
                s.commit()
        s.commit()
    return keys


def heads(conn: Connection, count: int) -> dict[str, int]:
    return {str(p): conn.cursor_open(S if p == 0 else f"{S}#{p}")[1] for p in range(count)}


def partition_of(key: str, count: int) -> int:
    return zlib.crc32(key.encode()) % count


def checkpointed(checkpoint: Path) -> object:
    """The offsets of the last batch a query's checkpoint holds."""
    last = max(
        (checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    return json.loads(last.read_text().splitlines()[-1])


def test_a_batch_read_has_a_partition_column_and_kafka_shaped_offsets(
    spark: SparkSession, tmp_path: Path
) -> None:
    srv = start(tmp_path, tmp_path / "data", orders=3)
    try:
        keys = produce(srv.url, S, 300)
        rows = (
            spark.read.format("chute")
            .option("url", srv.url)
            .option("destination", S)
            .load()
            .select("destination", "partition", "seq", "body")
            .collect()
        )
        assert Counter(bytes(r.body) for r in rows) == Counter(list(keys))
        assert {r.destination for r in rows} == {S}
        by_partition: dict[int, list[int]] = {}
        for r in rows:
            key = keys[bytes(r.body)]
            if key is not None:
                assert r.partition == partition_of(key, 3)
            by_partition.setdefault(r.partition, []).append(r.seq)
        assert sorted(by_partition) == [0, 1, 2]
        for seqs in by_partition.values():
            assert sorted(seqs) == list(range(1, len(seqs) + 1))
        # Kafka's per-partition JSON: partition 0 from offset 3, 1 from the earliest, 2
        # from the latest; up to offset 5 of partition 1
        window = (
            spark.read.format("chute")
            .option("url", srv.url)
            .option("destination", S)
            .option("startingOffsets", json.dumps({S: {"0": 3, "1": -2, "2": -1}}))
            .option("endingOffsets", json.dumps({S: {"0": -1, "1": 5, "2": -1}}))
            .load()
            .select("partition", "seq")
            .collect()
        )
        got = sorted((r.partition, r.seq) for r in window)
        zero = len(by_partition[0])
        assert got == [(0, s) for s in range(3, zero + 1)] + [(1, s) for s in range(1, 5)]
    finally:
        srv.stop()


def test_the_checkpoint_keeps_offsets_per_partition_and_new_partitions_are_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = start(tmp_path, data, orders=1)
    ck = tmp_path / "ck"
    try:
        first = produce(srv.url, S, 200, "a")
        pipe(spark, srv.url, ck, "queue:out", destination=S)
        assert checkpointed(ck) == {S: 201}  # one partition: as ever
        srv.stop()
        srv = start(tmp_path, data, orders=3)  # the stream gains two partitions
        then = produce(srv.url, S, 300, "b")
        pipe(spark, srv.url, ck, "queue:out", destination=S)
        with chute.connect(srv.url) as conn:
            assert Counter(read_all(conn, "queue:out")) == Counter([*first, *then])
            assert checkpointed(ck) == {S: heads(conn, 3)}
            assert heads(conn, 3)["0"] > 201  # partition 0 is the stream it was
    finally:
        srv.stop()


def out_rows(conn: Connection) -> list[tuple[int, bytes, str | None]]:
    """Every message of the two partitions of ``stream:out``: (partition, body, key)."""
    got = []
    for partition, address in enumerate(("stream:out", "stream:out#1")):
        first, head = conn.cursor_open(address)
        for page in conn.cursor_read(address, None, first, head):
            got += [(partition, m.body, m.key) for _, m in page]
    return got


def written(conn: Connection) -> int:
    return len(out_rows(conn))


def test_partitioned_stream_to_stream_exactly_once_across_driver_and_broker_kills(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    srv = start(tmp_path, data, **{"in": 2, "out": 2})
    ck = tmp_path / "ck"
    script = write_driver(
        tmp_path / "query.py",
        "stream:out",
        columns=("body", "properties['key'] AS key"),
        destination="stream:in",
        maxOffsetsPerTrigger=100,
    )

    def driver() -> subprocess.Popen[bytes]:
        return start_driver(script, srv.url, ck)

    try:
        keys = produce(srv.url, "stream:in", 1500)
        child = driver()
        try:
            wait_for_progress(srv.url, written, 200, child)
            kill_driver(child)  # the driver, mid-stream
            child = wait_for_progress(srv.url, written, 600, driver())
            srv.stop(signal.SIGKILL)  # the broker, mid-stream
            srv = start(tmp_path, data, srv.port, **{"in": 2, "out": 2})
            child = wait_for_progress(srv.url, written, 1000, child, restart=driver)
        finally:
            kill_driver(child)
        ran = spark.readStream.format("chute").option("url", srv.url)
        query = (
            ran.option("destination", "stream:in")
            .load()
            .selectExpr("body", "properties['key'] AS key")
            .writeStream.format("chute")
            .option("url", srv.url)
            .option("destination", "stream:out")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        with chute.connect(srv.url) as conn:
            out = out_rows(conn)
            assert Counter(body for _, body, _ in out) == Counter(list(keys))  # each once
            for partition, body, key in out:
                assert key == keys[body]
                if key is not None:
                    assert partition == partition_of(key, 2)  # the partition of its key
            assert spark_prepared(conn) == []
    finally:
        srv.stop()


def test_a_partitioned_stream_on_serve_nodes_2_is_read_whole_from_either_node(
    spark: SparkSession, tmp_path: Path
) -> None:
    nodes = start_nodes(tmp_path, 2, "--config", str(config(tmp_path, orders=2)))
    try:
        nodes.linked()
        keys = produce(nodes.url(0), S, 200, "x")
        keys |= produce(nodes.url(1), S, 200, "y")
        for index in (0, 1):
            expected = len(keys)
            deadline = time.monotonic() + 60
            while True:  # the node's copies of the other node's partition follow its home
                rows = (
                    spark.read.format("chute")
                    .option("url", nodes.url(index))
                    .option("destination", S)
                    .load()
                    .select("partition", "seq", "body")
                    .collect()
                )
                if len(rows) >= expected or time.monotonic() > deadline:
                    break
                time.sleep(0.5)  # polling a copy catching up, with a deadline
            assert Counter(bytes(r.body) for r in rows) == Counter(list(keys))
            for partition in (0, 1):
                seqs = sorted(r.seq for r in rows if r.partition == partition)
                assert seqs == list(range(1, len(seqs) + 1))
            for r in rows:
                key = keys[bytes(r.body)]
                if key is not None:
                    assert r.partition == partition_of(key, 2)
    finally:
        if nodes.server.process.poll() is None:
            nodes.server.stop()
