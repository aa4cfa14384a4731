"""What a failed write or sync refuses: exactly what the failed callbacks cover that carries
new messages, transactions or acks; never something acknowledged; nothing a restart reads."""

from __future__ import annotations

import errno
from collections.abc import Callable

from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind, TxOp
from chute.store.errors import DiskFull
from chute.store.journal import Journal

from .conftest import Journals
from .helpers import Callbacks, add


def _fail_next_sync(journals: Journals, error: int = errno.ENOSPC) -> None:
    journals.disk.sync_error = error


def _with_a_failing_sync(
    journals: Journals, journal: Journal, record: Callable[[], object]
) -> list[TxOp]:
    """``record()`` while the disk fails the next sync (full); that sync fails with
    DiskFull, then the disk works again. What the journal refused."""
    refused: list[TxOp] = []
    journal.on_unstored = refused.extend
    _fail_next_sync(journals)
    record()
    failed = Callbacks()
    journal.sync(failed)
    assert isinstance(failed.wait()[0], DiskFull)
    journals.disk.sync_error = None
    return refused


def test_a_write_the_full_disk_cut_short_leaves_nothing_a_restart_would_read(
    journals: Journals,
) -> None:
    """A torn write left whole frames of refused records on disk; the retry, shorter,
    zeroes them instead of leaving them for a scan to find."""
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.flush()
    refused: list[TxOp] = []
    journal.on_unstored = refused.extend
    journal.add(add("q", 1, b"a" * 500))
    journal.add(add("q", 2, b"b" * 10))
    journal.add(add("q", 3, b"c" * 3000))
    journals.disk.write_error = errno.ENOSPC
    journals.disk.torn_writes = 700  # the frames of 1 and 2 whole, a bit of 3
    failed = Callbacks()
    journal.sync(failed)
    assert isinstance(failed.wait()[0], DiskFull)
    assert sorted(op.seq for op in refused) == [1, 2, 3]
    journals.disk.write_error = None
    journal.add(add("q", 4, b"d"))  # written where 1 was: much shorter than 1 and 2
    journal.flush()
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [s.seq for s in recovered.messages["q"]] == [4]
    assert recovered.clean, recovered.report


def test_records_appended_while_a_sync_fails_are_kept_for_the_next_one(
    journals: Journals,
) -> None:
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.flush()
    late: list[int] = []

    def hook(operation: str) -> None:  # on the writer thread, inside the failing cycle
        if operation == "sync" and journals.disk.sync_error and not late:
            late.append(2)
            journal.add(add("q", 2))  # after the failing callback: not covered by it

    journals.disk.hook = hook
    journal.add(add("q", 1))
    _fail_next_sync(journals)
    failed = Callbacks()
    journal.sync(failed)
    assert isinstance(failed.wait()[0], DiskFull)
    journals.disk.sync_error = None
    ok = Callbacks()
    journal.sync(ok)  # covers 2: it must be stored if this says so
    assert ok.wait() == [None]
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == [2]


def test_a_dead_letter_move_is_refused_whole_so_the_original_stays(journals: Journals) -> None:
    """The move is an add of a copy then an ack of the original: refusing the add but
    writing the ack would lose the message."""
    journal = journals.open(preallocate=False)
    for name in ("q", "dlq"):
        journal.define(QueueDefinition(name, QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.flush()  # acknowledged to its producer

    def move() -> None:
        journal.add(add("dlq", 1))
        journal.ack(AckOp("q", 1))

    _with_a_failing_sync(journals, journal, move)
    journal.flush()
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert [s.seq for s in recovered.messages["q"]] == [1]  # not lost: back after a restart
    assert recovered.messages.get("dlq", []) == []


def test_a_refused_commit_is_all_or_nothing(journals: Journals) -> None:
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.flush()
    refused = _with_a_failing_sync(
        journals, journal, lambda: journal.commit([add("q", 2), AckOp("q", 1)])
    )
    assert [(type(op), op.seq) for op in refused] == [(AddOp, 2), (AckOp, 1)]
    journal.flush()
    journal = journals.reopen(journal)
    assert [s.seq for s in journal.recover().messages["q"]] == [1]


def test_delivery_marks_and_definitions_are_kept_and_written_once_the_disk_works(
    journals: Journals,
) -> None:
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.flush()

    def mark_and_define() -> None:
        journal.delivered("q", 1, 1)
        journal.define(QueueDefinition("r", QueueKind.QUEUE))

    _with_a_failing_sync(journals, journal, mark_and_define)
    journal.flush()
    journal = journals.reopen(journal)
    recovered = journal.recover()
    assert sorted(d.name for d in recovered.definitions) == ["q", "r"]
    assert [(s.seq, s.delivery_count) for s in recovered.messages["q"]] == [(1, 1)]


def test_a_refused_record_is_never_paged_back_in(journals: Journals) -> None:
    """The index learns a record only once it is durable: a paging read cannot return a
    message whose sync failed."""
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.flush()
    _with_a_failing_sync(journals, journal, lambda: journal.add(add("q", 2)))
    assert [s.seq for s in journal.page_in("q", 0, 10)] == [1]


def test_acks_failing_with_no_new_message_beside_them_are_kept_and_written_again(
    journals: Journals,
) -> None:
    """Consumers acking while producers are held off: their acks must get through."""
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.add(add("q", 2))
    journal.flush()
    assert _with_a_failing_sync(journals, journal, lambda: journal.acks("q", [1, 2])) == []
    journal.flush()
    journal = journals.reopen(journal)
    assert journal.recover().messages.get("q", []) == []


def test_when_no_new_segment_can_be_made_acks_still_go_into_the_current_one(
    journals: Journals,
) -> None:
    journal = journals.open(segment_size=8192)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    for seq in range(1, 11):
        journal.add(add("q", seq, b"m" * 400))
    journal.flush()
    segments = journal.segments()

    def full(operation: str) -> None:  # a new segment cannot be made: the disk is full
        if operation == "sync_directory":
            raise OSError(errno.ENOSPC, "No space left on device")

    journals.disk.hook = full
    journal.add(add("q", 11, b"x" * 6000))  # does not fit what is left of the segment
    failed = Callbacks()
    journal.sync(failed)
    assert isinstance(failed.wait()[0], DiskFull)
    journal.acks("q", list(range(1, 11)))
    journal.flush()  # written into the current segment, though none can be made
    assert journal.segments() == segments
    journals.disk.hook = None
    journal = journals.reopen(journal, segment_size=8192)
    assert journal.recover().messages.get("q", []) == []


def test_a_commit_of_acks_only_failing_alone_is_kept_like_acks(journals: Journals) -> None:
    """A transacted consumer's commit brings no message: it goes where acks go."""
    journal = journals.open(preallocate=False)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    for seq in (1, 2):
        journal.add(add("q", seq))
    journal.flush()
    refused = _with_a_failing_sync(
        journals, journal, lambda: journal.commit([AckOp("q", 1), AckOp("q", 2)])
    )
    assert refused == []
    journal.flush()
    journal = journals.reopen(journal)
    assert journal.recover().messages.get("q", []) == []
