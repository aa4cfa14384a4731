"""The journal's inline sync (the broker's loop writing and syncing a lone producer's
records itself), and how a slow disk sends the syncs back to the writer thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from chute.store.disk import FaultyDisk
from chute.store.journal import Journal
from chute.store.writer import INLINE_PAUSE, INLINE_SLOW

from .helpers import add


def synced_inline(journal: Journal, seq: int) -> tuple[bool, str]:
    """Add a record and ask for its sync inline: (done inline, the thread that called back)."""
    journal.add(add("queue:q", seq, b"x" * 100))
    called: list[str] = []
    done = threading.Event()

    def callback(error: BaseException | None) -> None:
        assert error is None
        called.append(threading.current_thread().name)
        done.set()

    inline = journal.sync_inline([callback])
    if not inline:
        journal.sync(callback)
    assert done.wait(10), "the sync never called back"
    return inline, called[0]


def test_an_idle_writer_lets_the_caller_sync_on_its_own_thread(tmp_path: Path) -> None:
    disk = FaultyDisk()
    with Journal(tmp_path, disk=disk) as journal:
        syncs = disk.data_syncs
        inline, thread = synced_inline(journal, 1)
        assert inline
        assert thread == threading.current_thread().name
        assert disk.data_syncs > syncs


def test_a_slow_sync_sends_the_next_ones_to_the_writer_thread(tmp_path: Path) -> None:
    disk = FaultyDisk()

    def slow_sync(operation: str) -> None:
        if operation == "sync":  # a disk slower than INLINE_SLOW (busy, not a sleep)
            until = time.perf_counter() + INLINE_SLOW * 1.5
            while time.perf_counter() < until:
                pass

    with Journal(tmp_path, disk=disk) as journal:
        disk.hook = slow_sync
        started = time.monotonic()
        first, _ = synced_inline(journal, 1)
        disk.hook = None
        assert first  # nothing told the caller the disk was slow yet
        second, thread = synced_inline(journal, 2)
        if time.monotonic() - started < INLINE_PAUSE:  # still within the pause
            assert not second
            assert thread != threading.current_thread().name  # the writer called back
    with Journal(tmp_path) as journal:
        assert sorted(m.seq for m in journal.recover().messages["queue:q"]) == [1, 2]


def test_while_bulk_work_asks_no_sync_runs_on_the_callers_thread(tmp_path: Path) -> None:
    """A move job keeps the disk busy and asks for its syncs to stay off the loop: a
    producer's sync then goes to the writer thread, and is inline again once that ends."""
    with Journal(tmp_path) as journal:
        journal.syncs_off_loop(60)
        inline, thread = synced_inline(journal, 1)
        assert not inline
        assert thread != threading.current_thread().name  # the writer called back
    with Journal(tmp_path) as journal:
        journal.syncs_off_loop(0)
        inline, thread = synced_inline(journal, 2)
        assert inline
        assert thread == threading.current_thread().name
        assert sorted(m.seq for m in journal.recover().messages["queue:q"]) == [1, 2]
