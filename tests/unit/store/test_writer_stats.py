"""The journal's fsync figures: each group commit's latency and records, in buckets."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from chute.errors import StoreError
from chute.store.disk import FaultyDisk
from chute.store.journal import Journal
from chute.store.syncstats import RECORDS_BOUNDS, SECONDS_BOUNDS, SyncStats

from .helpers import add


def test_observations_land_in_the_first_bucket_that_holds_them() -> None:
    stats = SyncStats()
    stats.record(0.0001, 1)  # on a bound: in that bucket (Prometheus' le is <=)
    stats.record(0.003, 3)
    stats.record(10.0, 10_000)  # past every bound
    snapshot = stats.snapshot()
    assert snapshot.seconds.count == snapshot.records.count == 3
    assert snapshot.seconds.total == pytest.approx(10.0031)
    assert snapshot.records.total == 10_004
    seconds = dict(snapshot.seconds.cumulative())
    assert seconds[0.0001] == 1
    assert seconds[0.0025] == 1
    assert seconds[0.005] == 2
    assert seconds[SECONDS_BOUNDS[-1]] == 2
    assert seconds[float("inf")] == 3
    records = dict(snapshot.records.cumulative())
    assert (records[1], records[2], records[4], records[RECORDS_BOUNDS[-1]]) == (1, 1, 2, 2)
    assert records[float("inf")] == 3


def test_a_snapshot_does_not_change_with_later_observations() -> None:
    stats = SyncStats()
    stats.record(0.001, 2)
    before = stats.snapshot()
    stats.record(0.001, 2)
    assert (before.seconds.count, stats.snapshot().seconds.count) == (1, 2)


def test_each_fsync_of_the_journal_is_counted_with_the_records_it_covered(
    tmp_path: Path,
) -> None:
    disk = FaultyDisk()
    with Journal(tmp_path, disk=disk) as journal:
        assert journal.sync_stats().seconds.count == 0
        for seq in range(1, 11):
            journal.add(add("queue:q", seq))
        journal.flush()
        snapshot = journal.sync_stats()
        assert snapshot.seconds.count == disk.data_syncs >= 1
        assert snapshot.records.total == 10  # every add, each in exactly one group commit
        assert journal.bytes_written > 10 * 20


def test_the_latency_measured_is_the_disk_sync(tmp_path: Path) -> None:
    disk = FaultyDisk()

    def slow_sync(operation: str) -> None:
        if operation == "sync":  # a slow disk: 5 ms a sync (busy, not a sleep)
            until = time.perf_counter() + 0.005
            while time.perf_counter() < until:
                pass

    with Journal(tmp_path, disk=disk) as journal:
        disk.hook = slow_sync
        journal.add(add("queue:q", 1))
        journal.flush()
        seconds = journal.sync_stats().seconds
        disk.hook = None
    assert seconds.count >= 1
    assert seconds.total >= 0.005 * seconds.count
    assert dict(seconds.cumulative())[0.0025] == 0  # none counted as faster than the disk


def test_a_failed_sync_is_not_counted_and_its_records_count_in_the_next_one(
    tmp_path: Path,
) -> None:
    disk = FaultyDisk()
    with Journal(tmp_path, disk=disk) as journal:
        journal.add(add("queue:q", 1))
        journal.flush()
        disk.sync_error = errno.EIO
        journal.add(add("queue:q", 2))
        with pytest.raises(StoreError):
            journal.flush()
        failed = journal.sync_stats()
        assert (failed.seconds.count, failed.records.total) == (1, 1)
        disk.sync_error = None
        journal.add(add("queue:q", 3))
        journal.flush()
        after = journal.sync_stats()
    assert after.seconds.count == disk.data_syncs - 1 == 2  # the failed one not counted
    # the next good sync covered what was written since the last one: the refused add's
    # record too (written, then refused), and the third add
    assert after.records.total == 3
