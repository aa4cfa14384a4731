"""Spark over a compacted stream: a query that resumes at an offset compaction removed reads
on from the next message kept, without reporting data loss (Kafka's compacted topics), also
after a broker restart left it below the oldest message kept."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

import chute
from chute.message import Message

from . import test_spark as base
from .conftest import ChuteServer, start_server
from .hostile import wait_until
from .test_spark import read_all
from .test_spark_streams import pipe
from .test_stream_compaction import removed

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession  # noqa: E402

spark = base.spark  # the SparkSession fixture, one for this module

STREAM = "stream:state"
KEYS = 20


def send(url: str, address: str, rounds: range, keys: int = KEYS, *, keyed: bool = True) -> None:
    """Round ``r`` sends ``k{K}:{r}`` to each key ``k{K}`` (keyless with ``keyed`` false)."""
    with chute.connect(url) as conn:
        session = conn.session()
        for r in rounds:
            session.send_many(
                address,
                [
                    Message.create(
                        f"k{k}:{r}".encode().ljust(500, b"."), key=f"k{k}" if keyed else None
                    )
                    for k in range(keys)
                ],
            )


def start_compacting(tmp_path: Path) -> ChuteServer:
    """A broker whose ``STREAM`` is compacted, with small segments and a quick sweep (so
    compaction runs soon); started again on the same data by a second call."""
    config = tmp_path / "chute.toml"
    config.write_text(
        '[server]\nsegment_size = "64KiB"\nexpiry_interval_ms = 50\n\n'
        f'[destinations."{STREAM}"]\ncleanup = "compact"\n'
    )
    return start_server(tmp_path, "--config", str(config))


def test_a_query_resuming_at_a_compacted_offset_reads_on_from_the_next_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    srv = start_compacting(tmp_path)
    try:
        send(srv.url, STREAM, range(1), keys=100)  # offsets 1-100, a key each: none compacted
        ck = tmp_path / "ck"
        pipe(spark, srv.url, ck, "queue:out", destination=STREAM)  # the query is at 101 now
        send(srv.url, STREAM, range(1, 6))  # offsets 101-200 over k0-k19: only 181-200 stay
        send(srv.url, "stream:filler", range(20), keyed=False)  # the segments roll over
        wait_until(lambda: removed(srv.url) == 100, "all but the newest of each key", 60)
        pipe(spark, srv.url, ck, "queue:out", destination=STREAM)
        with chute.connect(srv.url) as conn:
            out = [body.rstrip(b".") for body in read_all(conn, "queue:out")]
        first = [f"k{k}:0".encode() for k in range(100)]
        newest = [f"k{k}:5".encode() for k in range(KEYS)]
        assert Counter(out) == Counter(first + newest)
    finally:
        srv.stop()


def test_a_query_resuming_below_the_oldest_kept_after_a_restart_reads_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    srv = start_compacting(tmp_path)
    try:
        send(srv.url, STREAM, range(1))  # offsets 1-20 over k0-k19
        ck = tmp_path / "ck"
        pipe(spark, srv.url, ck, "queue:out", destination=STREAM)  # the query is at 21 now
        send(srv.url, STREAM, range(1, 6))  # offsets 21-120: only 101-120 stay
        send(srv.url, "stream:filler", range(20), keyed=False)  # the segments roll over
        wait_until(lambda: removed(srv.url) == 100, "all but the newest of each key", 60)
        send(srv.url, "stream:filler", range(1), keyed=False)  # confirmed: so are the removals
        srv.stop(signal.SIGKILL)
        srv = start_compacting(tmp_path)
        # the query resumes at 21, below the oldest kept (101): compaction removed 21-100,
        # retention nothing, so nothing was lost
        pipe(spark, srv.url, ck, "queue:out", destination=STREAM, failOnDataLoss="true")
        with chute.connect(srv.url) as conn:
            out = [body.rstrip(b".") for body in read_all(conn, "queue:out")]
        first = [f"k{k}:0".encode() for k in range(KEYS)]
        newest = [f"k{k}:5".encode() for k in range(KEYS)]
        assert Counter(out) == Counter(first + newest)
    finally:
        srv.stop()
