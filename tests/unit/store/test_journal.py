"""The journal's writer: group commit, sync modes, disk faults, segments, lifecycle."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, TxOp
from chute.errors import StoreError
from chute.store.errors import DiskFailure, DiskFull, JournalClosed
from chute.store.journal import Journal, SyncMode
from chute.store.payload import Names
from chute.store.record import Kind, Scan
from chute.store.records import Record, decode
from chute.store.segment import SEGMENT_HEADER_SIZE, read_segment

from .conftest import Journals
from .helpers import DEADLINE, Callbacks, Gate, add


def test_many_adds_then_one_sync_is_one_fdatasync(journals: Journals) -> None:
    journal = journals.open(preallocate=False, segment_size=1 << 20)
    journal.flush()
    before = journals.disk.data_syncs
    for seq in range(1, 1001):
        journal.add(add("q", seq, b"x" * 100))
    done = Callbacks()
    journal.sync(done)
    assert done.wait() == [None]
    assert journals.disk.data_syncs - before <= 2  # the writer may have synced once already
    assert len(journal.recover().messages["q"]) == 1000


def test_syncs_waiting_behind_a_slow_fsync_share_the_next_one(journals: Journals) -> None:
    gate = Gate("sync")
    journals.disk.hook = gate
    journal = journals.open(preallocate=False)
    first = Callbacks()
    journal.add(add("q", 1))
    journal.sync(first)
    gate.wait_entered()  # the writer is inside the first fdatasync
    before = journals.disk.data_syncs
    rest = Callbacks()
    for seq in range(2, 102):
        journal.add(add("q", seq))
        journal.sync(rest)
    assert first.results == []  # nothing before its fsync
    assert rest.results == []
    gate.released.set()
    assert first.wait() == [None]
    assert rest.wait(100) == [None] * 100
    assert journals.disk.data_syncs - before == 1  # one fdatasync for the hundred
    assert all(name == "chute-journal" for name in first.threads + rest.threads)


def test_concurrent_producers_all_get_their_callbacks(journals: Journals) -> None:
    journal = journals.open()
    journal.flush()
    before = journals.disk.data_syncs
    done = Callbacks()
    per_thread, threads = 50, 8

    def producer(t: int) -> None:
        for i in range(per_thread):
            journal.add(add(f"q{t}", i + 1))
            finished = Callbacks()
            journal.sync(finished)
            assert finished.wait() == [None]
            done(None)

    workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(DEADLINE)
    assert done.wait(per_thread * threads) == [None] * (per_thread * threads)
    assert journals.disk.data_syncs - before <= per_thread * threads
    recovered = journal.recover()
    assert sum(len(v) for v in recovered.messages.values()) == per_thread * threads


def test_records_without_a_sync_are_written_promptly(journals: Journals) -> None:
    written = threading.Event()
    journal = journals.open(preallocate=False)
    journal.flush()
    journals.disk.hook = lambda op: written.set() if op == "write" else None
    journal.ack(AckOp("q", 1))
    assert written.wait(DEADLINE)


def test_sync_mode_never_calls_back_without_fdatasync(journals: Journals) -> None:
    journal = journals.open(sync="never", preallocate=False)
    journal.add(add("q", 1))
    done = Callbacks()
    journal.sync(done)
    assert done.wait() == [None]
    assert journals.disk.data_syncs == 0
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == [1]


def test_sync_mode_batch_calls_back_after_an_fdatasync(journals: Journals) -> None:
    order: list[str] = []
    journals.disk.hook = lambda op: order.append(op) if op == "sync" else None
    journal = journals.open(sync="batch", batch_ms=30, preallocate=False)
    assert journal.mode is SyncMode.BATCH
    done = Callbacks()

    def callback(error: BaseException | None) -> None:
        order.append("callback")
        done(error)

    for seq in range(1, 21):
        journal.add(add("q", seq))
        journal.sync(callback)
    assert done.wait(20) == [None] * 20
    assert order[0] == "sync"
    assert order.count("sync") < 20


def test_an_fsync_failure_fails_the_callbacks_and_refuses_what_they_cover(
    journals: Journals,
) -> None:
    journal = journals.open(preallocate=False)
    refused: list[TxOp] = []
    journal.on_unstored = refused.extend
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.flush()
    journals.disk.sync_error = errno.ENOSPC
    journal.add(add("q", 1))
    failed = Callbacks()
    journal.sync(failed)
    [error] = failed.wait()
    assert isinstance(error, DiskFull)
    assert isinstance(error, StoreError)
    assert "No space left" in str(error)
    assert "was not stored" in str(error)
    assert [(type(op), op.seq) for op in refused] == [(AddOp, 1)]
    journals.disk.sync_error = None
    journal.add(add("q", 2))
    ok = Callbacks()
    journal.sync(ok)
    assert ok.wait() == [None]
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [s.seq for s in recovered.messages["q"]] == [2]  # the refused one is not stored
    assert recovered.clean  # it was overwritten in place, not left torn
    written = [kind for kind, _ in _records(journal, journals.directory)]
    assert Kind.PAD in written


def test_a_write_failure_refuses_what_it_covers_and_the_journal_goes_on(
    journals: Journals,
) -> None:
    journal = journals.open(preallocate=False)
    journal.flush()
    journals.disk.write_error = errno.EIO
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    failed = Callbacks()
    journal.sync(failed)
    [error] = failed.wait()
    assert isinstance(error, DiskFailure)
    again = Callbacks()
    journal.sync(again)  # the definition is kept and retried: still failing
    assert isinstance(again.wait()[0], DiskFailure)
    journals.disk.write_error = None
    journal.add(add("q", 2))
    ok = Callbacks()
    journal.sync(ok)
    assert ok.wait() == [None]
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [d.name for d in recovered.definitions] == ["q"]
    assert [s.seq for s in recovered.messages["q"]] == [2]


def test_a_failing_spare_fails_the_roll_over_until_space_is_back(journals: Journals) -> None:
    journal = journals.open(segment_size=8192)
    journal.flush()  # the first segment exists
    journals.disk.write_error = errno.ENOSPC
    for seq in range(1, 40):  # more than a segment: needs a new spare
        journal.add(add("q", seq, b"x" * 500))
    failed = Callbacks()
    journal.sync(failed)
    assert isinstance(failed.wait()[0], DiskFull)
    journals.disk.write_error = None
    for seq in range(40, 60):
        journal.add(add("q", seq, b"x" * 500))
    journal.flush()
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == list(range(40, 60))


def test_close_writes_and_syncs_what_is_buffered(journals: Journals) -> None:
    journal = journals.open()
    for seq in range(1, 11):
        journal.add(add("q", seq))
    journal = journals.reopen(journal)
    assert len(journal.recover().messages["q"]) == 10


def test_a_closed_journal_refuses_records_and_fails_syncs(journals: Journals) -> None:
    journal = journals.open()
    journal.close()
    journal.close()  # idempotent
    with pytest.raises(JournalClosed):
        journal.add(add("q", 1))
    done = Callbacks()
    journal.sync(done)
    assert isinstance(done.wait()[0], JournalClosed)


def test_a_directory_is_locked_by_one_journal(journals: Journals) -> None:
    journals.open()
    with pytest.raises(StoreError, match="in use"):
        Journal(journals.directory)


def test_records_roll_over_into_new_segments(journals: Journals) -> None:
    journal = journals.open(segment_size=8192, compact_ratio=0)
    for seq in range(1, 201):
        journal.add(add("q", seq, b"y" * 300))
    journal.flush()
    assert len(journal.segments()) > 5
    journal = journals.reopen(journal, segment_size=8192)
    assert [s.seq for s in journal.recover().messages["q"]] == list(range(1, 201))
    assert journal.report.clean


@pytest.mark.parametrize("preallocate", [True, False])
def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(
    journals: Journals, preallocate: bool
) -> None:
    journal = journals.open(segment_size=8192, preallocate=preallocate)
    journal.add(add("q", 1, b"small"))
    journal.add(add("q", 2, b"L" * 50_000))
    journal.add(add("q", 3, b"small again"))
    journal.flush()
    journal = journals.reopen(journal)
    bodies = [len(s.message.body) for s in journal.recover().messages["q"]]
    assert bodies == [5, 50_000, 11]


def test_a_message_that_cannot_be_encoded_is_refused_at_once(journals: Journals) -> None:
    journal = journals.open()
    with pytest.raises(StoreError, match="cannot be journaled"):
        journal.add(add("q" * 70_000, 1))


def test_a_failing_callback_does_not_stop_the_writer(journals: Journals) -> None:
    journal = journals.open()

    def bad(error: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    journal.sync(bad)
    done = Callbacks()
    journal.sync(done)
    assert done.wait() == [None]


def test_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="segment_size"):
        Journal(tmp_path, segment_size=100)
    with pytest.raises(ValueError, match="sync"):
        Journal(tmp_path, sync="sometimes")


# -- syncing on the caller's thread (the broker's loop, when the writer is idle) ------------


def test_an_idle_journal_syncs_inline_on_the_callers_thread(journals: Journals) -> None:
    journal = journals.open(preallocate=False)
    journal.flush()
    journal.add(add("q", 1))
    threads: list[threading.Thread] = []
    done = Callbacks()

    def callback(error: BaseException | None) -> None:
        threads.append(threading.current_thread())
        done(error)

    before = journals.disk.data_syncs
    assert journal.sync_inline([callback])
    assert done.wait() == [None]  # already called: no waiting
    assert threads == [threading.current_thread()]
    assert journals.disk.data_syncs == before + 1
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == [1]


def test_inline_sync_declines_while_the_writer_is_busy(journals: Journals) -> None:
    journal = journals.open(preallocate=False)
    journal.flush()
    gate = Gate("sync")
    journals.disk.hook = gate
    journal.add(add("q", 1))
    first = Callbacks()
    journal.sync(first)  # the writer thread enters its fsync and waits at the gate
    gate.wait_entered()
    journal.add(add("q", 2))
    assert not journal.sync_inline([Callbacks()])  # busy: the caller hands over instead
    gate.released.set()
    assert first.wait() == [None]


def test_an_inline_fsync_failure_fails_the_callbacks_and_the_writer_recovers(
    journals: Journals,
) -> None:
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.flush()
    journals.disk.sync_error = errno.EIO
    journal.add(add("q", 1))
    order: list[str] = []
    journal.on_unstored = lambda ops: order.append(f"refused {[op.seq for op in ops]}")
    failed = Callbacks()
    assert journal.sync_inline([lambda error: order.append(f"told {type(error).__name__}")])
    assert order == ["refused [1]", "told DiskFailure"]  # on the caller's thread, in order
    journals.disk.sync_error = None
    journal.define(QueueDefinition("other", QueueKind.QUEUE))
    journal.sync(failed)  # the writer thread rewrites what failed (the refused add as PAD)
    assert failed.wait() == [None]
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert recovered.messages.get("q", []) == []
    assert recovered.clean


def _records(journal: Journal, directory: Path) -> list[tuple[int, Record]]:
    """Every record in the journal's segments, as (kind, record), in order."""
    found = []
    for segment in journal.segments():
        data = read_segment(str(directory), segment)
        for _, kind, start, end in Scan(data, segment, SEGMENT_HEADER_SIZE):
            found.append((kind, decode(kind, data, start, end, Names())))
    return found


def test_a_consumers_batch_of_acks_and_marks_is_one_record_each(journals: Journals) -> None:
    journal = journals.open()
    for seq in range(1, 101):
        journal.add(add("q", seq))
    journal.flush()
    for seq in range(1, 101):
        journal.delivered("q", seq, 1)
    for seq in range(1, 51):
        journal.ack(AckOp("q", seq))
        journal.add(add("q", 100 + seq))  # a new message: the acks stay gathered
    journal.flush()
    kinds = [kind for kind, _ in _records(journal, journals.directory)]
    assert kinds.count(Kind.MARKS) == 1
    assert kinds.count(Kind.ACKS) == 1
    assert Kind.ACK not in kinds
    assert Kind.DELIVERED not in kinds
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [(s.seq, s.delivery_count) for s in recovered.messages["q"]] == [
        (seq, 1) for seq in range(51, 101)
    ] + [(seq, 0) for seq in range(101, 151)]


def test_gathered_acks_go_before_a_later_add_to_their_queue(journals: Journals) -> None:
    """An ack held back to be gathered is written before anything it must precede, even
    when they all reach the writer together: a new add of the same (queue, seq), whose
    count must not inherit the old mark."""
    gate = Gate("sync")
    journals.disk.hook = gate
    journal = journals.open(preallocate=False)
    journal.add(add("q", 1))
    journal.add(add("r", 1))
    first = Callbacks()
    journal.sync(first)
    gate.wait_entered()  # everything below reaches the writer in one batch
    journal.delivered("q", 1, 3)
    journal.ack(AckOp("q", 1))
    journal.ack(AckOp("r", 1))
    journal.add(add("q", 1))  # the same seq again
    journal.delivered("r", 7, 1)  # nothing live: ignored
    gate.released.set()
    assert first.wait() == [None]
    journal.flush()
    kinds = [kind for kind, _ in _records(journal, journals.directory)]
    # q's mark and ack before the new add; r's after everything, marks before acks
    assert kinds[-5:] == [Kind.DELIVERED, Kind.ACK, Kind.ADD, Kind.DELIVERED, Kind.ACK]
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [(s.seq, s.delivery_count) for s in recovered.messages["q"]] == [(1, 0)]
    assert recovered.messages.get("r", []) == []
