"""The Spark connector and a node's live and backup (docs/spark.md, docs/ha.md): given
both addresses in its URL, a batch write that a ``kill -9`` of the live interrupts
moves to the backup that takes over, on its own, and stores each row exactly once.
Local-mode Spark (one session for the module), real etcd, real ``chute serve``."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import chute

from . import test_spark as base
from .test_ha import DEADLINE, Pair, kill
from .test_ha import etcd as etcd  # noqa: PLC0414 - the fixtures
from .test_ha import pair as pair  # noqa: PLC0414
from .test_spark import read_all, spark_prepared

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

ROWS = 100_000


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
    mid_write = threading.Event()

    def kill_when_under_way() -> None:
        """Kill the live once the tasks are under way: a chunk of theirs is prepared, and
        the job not committed yet."""
        with chute.connect(live.url) as conn:
            end = time.monotonic() + 120
            while not spark_prepared(conn) and time.monotonic() < end:
                time.sleep(0.05)  # polling the broker for progress, with a deadline
            if spark_prepared(conn) and not read_all(conn, "queue:out"):
                mid_write.set()
        kill(live)

    killer = threading.Thread(target=kill_when_under_way)
    killer.start()
    try:  # Spark's calls stay on this thread: its data sources are found from here
        rows.write.format("chute").option("url", url).option("destination", "queue:out").mode(
            "append"
        ).save()
    finally:
        killer.join(DEADLINE)
    assert mid_write.is_set(), "the live was not killed in the middle of the write"
    with chute.connect(backup.url) as conn:
        out = read_all(conn, "queue:out")
        assert len(out) == ROWS
        assert Counter(out) == Counter(f"row-{i}".encode() for i in range(ROWS))
        assert spark_prepared(conn) == []
