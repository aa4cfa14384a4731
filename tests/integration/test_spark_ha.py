"""The Spark connector and a node's live and backup (docs/spark.md, docs/ha.md): given
both addresses in its URL, a batch write, or a streaming query's micro-batches, that
a ``kill -9`` of the live interrupts move to the backup that takes over, on their own,
and store each row exactly once. Local-mode Spark (one session for the module), real
etcd, real ``chute serve``."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import chute

from . import test_spark as base
from .conftest import ChuteServer
from .test_ha import DEADLINE, Pair, kill
from .test_ha import pair as pair  # noqa: PLC0414
from .test_spark import produce, read_all, spark_prepared, stream

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

ROWS = 100_000


class Killer(threading.Thread):
    """Kills the live once ``under_way`` says so of it (polled); ``in_time``: it did
    before the deadline."""

    def __init__(self, live: ChuteServer, under_way: Callable[[chute.Connection], bool]) -> None:
        super().__init__()
        self.live = live
        self.under_way = under_way
        self.in_time = False
        self.start()

    def run(self) -> None:
        with chute.connect(self.live.url) as conn:
            end = time.monotonic() + 120
            while not (done := self.under_way(conn)) and time.monotonic() < end:
                time.sleep(0.05)  # polling the broker for progress, with a deadline
        self.in_time = done
        kill(self.live)


def test_a_batch_write_through_a_kill_9_of_the_live_stores_each_row_once(
    spark: SparkSession, pair: Pair
) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    url = f"{live.url},127.0.0.1:{backup.port}?order=listed"
    rows = spark.range(0, ROWS, 1, 2).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("body")
    )
    # a chunk of a task is prepared, and the job not committed yet
    killer = Killer(live, lambda c: bool(spark_prepared(c)) and not read_all(c, "queue:out"))
    try:  # Spark's calls stay on this thread: its data sources are found from here
        rows.write.format("chute").option("url", url).option("destination", "queue:out").mode(
            "append"
        ).save()
    finally:
        killer.join(DEADLINE)
    assert killer.in_time, "the live was not killed in the middle of the write"
    with chute.connect(backup.url) as conn:
        out = read_all(conn, "queue:out")
        assert len(out) == ROWS
        assert Counter(out) == Counter(f"row-{i}".encode() for i in range(ROWS))
        assert spark_prepared(conn) == []


def test_a_streaming_query_through_a_kill_9_of_the_live_reads_and_writes_each_row_once(
    spark: SparkSession, pair: Pair, tmp_path: Path
) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    url = f"{live.url},127.0.0.1:{backup.port}?order=listed"
    bodies = [f"order-{i}".encode() for i in range(3000)]
    produce(live.url, "queue:in", bodies)
    killer = Killer(live, lambda c: len(read_all(c, "queue:out")) >= 500)
    try:
        query = stream(
            spark, url, "queue:in", "queue:out", tmp_path / "ck", maxMessagesPerTrigger=250
        )
    finally:
        killer.join(DEADLINE)
    assert killer.in_time, "the live was not killed in the middle of the query"
    assert query.exception() is None
    with chute.connect(backup.url) as conn:
        out = read_all(conn, "queue:out")
        assert Counter(out) == Counter(bodies)  # nothing lost, nothing twice
        assert read_all(conn, "queue:in") == []  # each consumed
        assert spark_prepared(conn) == []
