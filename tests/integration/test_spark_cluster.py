"""Spark exactly once in a cluster (docs/spark.md): a streaming query from a stream with two
partitions into another, each partition's home on a node of its own, through a killed
driver and a killed node, stores each row once in the partition of its key, reads it
back once, and keeps its offsets in the checkpoint as Kafka writes them. Two nodes on
real etcd (the node killed: the home of partition 1, not the one the query's URL
names), and ``chute serve --nodes 2`` (the node killed: the one the URL names, which
its parent starts again). Local-mode Spark, real ``chute serve``, a driver of its own
for the test to kill."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import chute
from tests.integration.conftest import ChuteServer, start_server
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.test_cluster_nodes import DEADLINE, Nodes
from tests.integration.test_serve_nodes import start_nodes

from . import test_spark as base
from .spark_support import kill_driver, start_driver, wait_for_progress, write_driver
from .test_spark import spark_prepared
from .test_spark_partitions import checkpointed, partition_of, produce

pytestmark = [pytest.mark.spark(lane="cluster"), pytest.mark.timeout(600)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

ROWS = 1500
TABLE = "".join(f'[destinations."stream:{n}"]\npartitions = 2\n' for n in ("in", "out"))


def parts(stream: str) -> list[str]:
    return [f"stream:{stream}", f"stream:{stream}#1"]


def heads(urls: Sequence[str], stream: str) -> dict[str, int]:
    """Each partition's head on its home: the highest any node has (a copy is behind)."""
    out: dict[str, int] = {}
    for url in urls:
        with chute.connect(url) as conn:
            for partition, address in enumerate(parts(stream)):
                head = conn.cursor_open(address)[1]
                out[str(partition)] = max(out.get(str(partition), 0), head)
    return out


def settled(url: str, urls: Sequence[str], stream: str) -> dict[str, int]:
    """Wait until the node at ``url`` holds each partition of ``stream`` up to its home's
    head (its copies caught up); those heads."""
    end = time.monotonic() + DEADLINE
    while True:
        wanted = heads(urls, stream)
        if heads([url], stream) == wanted:
            return wanted
        assert time.monotonic() < end, f"the copies of {stream} on {url} did not catch up"
        time.sleep(0.1)  # polling copies catching up, with a deadline


def written(conn: chute.Connection) -> int:
    """Rows of ``stream:out`` the node of ``conn`` holds (its copies may be behind)."""
    return sum(conn.cursor_open(a)[1] - 1 for a in parts("out"))


def exactly_once(
    spark: SparkSession,
    tmp_path: Path,
    url: str,
    urls: Sequence[str],
    kill_node: Callable[[], None],
) -> None:
    """The query from ``stream:in`` into ``stream:out`` through ``url``, its driver killed
    once and a node once (``kill_node``: kills one and starts it again), finished with
    an availableNow run; then every row checked (``urls``: every node)."""
    ck = tmp_path / "ck"
    script = write_driver(
        tmp_path / "query.py",
        "stream:out",
        columns=("body", "properties['key'] AS key"),
        destination="stream:in",
        maxOffsetsPerTrigger=100,
    )

    def driver() -> subprocess.Popen[bytes]:
        return start_driver(script, url, ck)

    keys = produce(url, "stream:in", ROWS)
    child = driver()
    try:
        wait_for_progress(url, written, 200, child)
        kill_driver(child)  # the driver, mid-stream
        child = wait_for_progress(url, written, 500, driver())
        kill_node()  # a node, mid-stream
        child = wait_for_progress(url, written, 900, child, restart=driver)
    finally:
        kill_driver(child)
    query = (
        spark.readStream.format("chute")
        .option("url", url)
        .option("destination", "stream:in")
        .load()
        .selectExpr("body", "properties['key'] AS key")
        .writeStream.format("chute")
        .option("url", url)
        .option("destination", "stream:out")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    # the checkpoint: the next offset of each partition of stream:in, as Kafka writes it
    assert checkpointed(ck) == {"stream:in": settled(url, urls, "in")}
    # read back (each task on its partition's home): every row once, in its key's partition
    settled(url, urls, "out")
    rows = (
        spark.read.format("chute")
        .option("url", url)
        .option("destination", "stream:out")
        .load()
        .select("partition", "body", "properties")
        .collect()
    )
    assert Counter(bytes(r.body) for r in rows) == Counter(list(keys))
    for r in rows:
        key = keys[bytes(r.body)]
        assert (r.properties or {}).get("key") == key
        if key is not None:
            assert r.partition == partition_of(key, 2)
    for node in urls:
        with chute.connect(node) as conn:
            assert spark_prepared(conn) == []


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    made.config.write_text(made.config.read_text() + TABLE)
    yield made
    made.stop()


def test_exactly_once_on_two_nodes_with_etcd_across_a_driver_and_a_home_kill(
    spark: SparkSession, nodes: Nodes, tmp_path: Path
) -> None:
    a, b = nodes.start_linked("a", "b")

    def kill_b() -> None:  # the home of partition 1 of both streams; again on its port
        b.stop(signal.SIGKILL)
        nodes.started["b"] = start_server(
            tmp_path,
            "--config",
            str(nodes.config),
            "--cluster",
            nodes.url,
            "--node",
            "b",
            port=b.port,
            data_dir=b.data_dir,
        )

    exactly_once(spark, tmp_path, a.url, [a.url, b.url], kill_b)
    with chute.connect(a.url) as conn:  # the homes: partition 0 on a, 1 on b
        rows = conn.stat("stream:*")["destinations"]
        homes = {r["address"]: r.get("home") for r in rows}
        assert homes == {
            "stream:in": "a",
            "stream:in#1": "b",
            "stream:out": "a",
            "stream:out#1": "b",
        }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ChuteServer]:
    config = tmp_path / "chute.toml"
    config.write_text(TABLE)
    running = start_nodes(tmp_path, 2, "--config", str(config))
    running.linked()
    running.server.nodes = running  # type: ignore[attr-defined]
    yield running.server
    if running.server.process.poll() is None:
        running.server.stop()


def test_exactly_once_on_serve_nodes_2_across_a_driver_and_a_node_kill(
    spark: SparkSession, served: ChuteServer, tmp_path: Path
) -> None:
    running = served.nodes  # type: ignore[attr-defined]
    urls = [running.url(0), running.url(1)]

    def kill_node_0() -> None:  # the node the URL names: its parent starts it again
        seen = len(served.lines)
        os.kill(running.pid("node-0"), signal.SIGKILL)
        served.wait_for_line("node node-0 started (pid", start=seen, timeout=DEADLINE)

    exactly_once(spark, tmp_path, urls[0], urls, kill_node_0)
