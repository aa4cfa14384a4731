"""Free space: a journal that cannot hold a segment does not open; under disk_free_limit it
says so, acks and reclaiming still work, and it clears once space is back: a tenth over
the limit, not at it (hysteresis)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from chute.core.model.store import AckOp, QueueDefinition, QueueKind
from chute.store.errors import DiskFull
from chute.store.journal import Journal
from chute.store.record import Scan
from chute.store.segment import SEGMENT_HEADER_SIZE, read_segment
from chute.store.space import size_text

from .conftest import Journals
from .helpers import DEADLINE, add

MiB = 1 << 20


def test_a_journal_does_not_open_on_a_disk_that_cannot_hold_one_segment(
    journals: Journals,
) -> None:
    journals.disk.free = 3 * MiB
    with pytest.raises(DiskFull) as refused:
        journals.open(segment_size=8 * MiB)
    text = str(refused.value)
    assert str(journals.directory) in text
    assert "3.0 MiB free" in text
    assert "segment_size = 8.0 MiB" in text
    assert "free space on that disk, or lower server.segment_size" in text
    journals.disk.free = 9 * MiB  # room for the segment: it opens, and the lock was released
    journals.open(segment_size=8 * MiB).close()


def test_space_low_says_why_under_the_limit_and_clears_once_space_is_back(
    journals: Journals, caplog: pytest.LogCaptureFixture
) -> None:
    journals.disk.free = 100 * MiB
    journal = journals.open(disk_free_limit=64 * MiB)
    assert journal.space_low() is None
    journals.disk.free = 60 * MiB
    with caplog.at_level(logging.INFO, logger="chute.store.journal"):
        journal.reclaim()  # a reclaim pass looks at the free space (so does the writer's clock)
        low = journal.space_low()
        assert low is not None
        assert low.startswith("the broker's disk has 60.0 MiB free, 59.")
        assert "once the journal's spare segments are made" in low  # one, or one more
        assert low.endswith(
            "under its disk_free_limit (64.0 MiB): producers wait until consumers free space"
        )
        journal.reclaim()
        again = journal.space_low()  # the same (the spare's size aside: made, or being made)
        assert again is not None
        assert again.startswith("the broker's disk has 60.0 MiB free, 59.")
        journals.disk.free = 65 * MiB  # the limit, and the segment the next roll-over makes
        journal.reclaim()
        back = journal.space_low()  # over the limit, but not by a tenth of it: still low
        assert back is not None
        assert back.startswith("the broker's disk has 65.0 MiB free, 64.")
        assert back.endswith(
            "not yet 70.4 MiB again since it went under its disk_free_limit (64.0 MiB): "
            "producers wait until consumers free space"
        )
        assert not [r for r in caplog.records if r.levelno == logging.INFO]  # no "free again"
        journals.disk.free = 72 * MiB  # a tenth over the limit, the spare segment aside
        journal.reclaim()
        assert journal.space_low() is None
        journals.disk.free = 66 * MiB  # under that again, but over the limit: not low
        journal.reclaim()
        assert journal.space_low() is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per condition, not per look
    assert "under disk_free_limit" in warnings[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        f"journal {journals.directory}: 72.0 MiB free again, a tenth over disk_free_limit "
        "(64.0 MiB): producers may send"
    ]


@pytest.mark.parametrize("preallocate", [True, False])
def test_the_segment_the_next_roll_over_makes_is_counted_as_taken(
    journals: Journals, preallocate: bool
) -> None:
    """The reserve the limit keeps is not the journal's to eat: with 70 MiB free, the
    next roll-over's 8 MiB spare (and the one made as it opens) would leave 62 MiB or
    less, under a 64 MiB limit."""
    journals.disk.free = 70 * MiB
    journal = journals.open(segment_size=8 * MiB, disk_free_limit=64 * MiB, preallocate=preallocate)
    if not preallocate:  # segments grow as they are written: nothing is taken ahead
        assert journal.space_low() is None
        return
    low = journal.space_low()
    assert low is not None
    assert "70.0 MiB free, " in low
    assert "once the journal's spare segments are made" in low


def test_a_refusal_quotes_the_free_space_of_now_while_the_writer_is_held_up(
    journals: Journals,
) -> None:
    """A writer stuck in a slow fdatasync looks at nothing: the answer is looked up anew
    once the writer's look is 100 ms old."""
    journals.disk.free = 200 * MiB
    journal = journals.open(disk_free_limit=64 * MiB)
    assert journal.space_low() is None
    held, release = threading.Event(), threading.Event()

    def hook(operation: str) -> None:
        if operation == "sync":
            held.set()
            release.wait(DEADLINE)

    journals.disk.hook = hook
    try:
        journal.add(add("q", 1))
        journal.sync(lambda error: None)
        assert held.wait(DEADLINE), "the writer never synced"
        journals.disk.free = 0  # something else filled the disk meanwhile
        deadline = time.monotonic() + DEADLINE / 5  # well before the hook lets the writer go
        while journal.space_low() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the answer changes by itself: nothing to wait on but time
        assert "the broker's disk has 0 bytes free" in str(journal.space_low())
    finally:
        journals.disk.hook = None
        release.set()


def test_a_journal_opened_under_the_limit_is_low_at_once(journals: Journals) -> None:
    journals.disk.free = 10 * MiB
    journal = journals.open(disk_free_limit=64 * MiB)
    assert journal.space_low() is not None
    assert "10.0 MiB free" in str(journal.space_low())


def test_without_a_limit_the_journal_is_never_low(journals: Journals) -> None:
    journals.disk.free = 2 * MiB
    journal = journals.open(segment_size=64 << 10)
    journal.reclaim()
    assert journal.space_low() is None


def test_under_the_limit_acks_are_written_and_reclaiming_frees_segments_by_itself(
    journals: Journals,
) -> None:
    """No roll-over needed: while low, the writer runs reclaim passes on its own."""
    journals.disk.free = 100 * MiB
    journal = journals.open(segment_size=8192, disk_free_limit=64 * MiB)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    for seq in range(1, 60):
        journal.add(add("q", seq, b"x" * 500))
    journal.flush()
    assert len(journal.segments()) > 2
    deleted = threading.Event()

    def hook(operation: str) -> None:  # reclaiming syncs the directory after each unlink
        if operation == "sync_directory" and journal.space_low() is not None:
            deleted.set()

    journals.disk.hook = hook
    journals.disk.free = 10 * MiB
    journal.reclaim()  # nothing to delete yet; it sees the disk is low
    assert journal.space_low() is not None
    journal.acks("q", list(range(1, 60)))
    journal.flush()  # the acks are written although the disk is under the limit
    assert deleted.wait(DEADLINE), "no reclaim pass deleted a segment while space was low"
    journal = journals.reopen(journal, segment_size=8192)
    assert journal.recover().messages.get("q", []) == []


def test_size_text() -> None:
    assert size_text(800) == "800 bytes"
    assert size_text(512 << 10) == "512 KiB"
    assert size_text(60 * MiB) == "60.0 MiB"
    assert size_text(3 << 30) == "3.0 GiB"


def test_a_negative_limit_is_refused(journals: Journals) -> None:
    with pytest.raises(ValueError, match="disk_free_limit"):
        Journal(journals.directory, disk_free_limit=-1)


def test_the_ack_path_is_not_held_off(journals: Journals) -> None:
    """space_low is advice for the core's producers; the journal itself refuses nothing."""
    journals.disk.free = 100 * MiB
    journal = journals.open(disk_free_limit=64 * MiB)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    journal.add(add("q", 1))
    journal.flush()
    journals.disk.free = 1 * MiB
    journal.reclaim()
    assert journal.space_low() is not None
    journal.ack(AckOp("q", 1))
    journal.flush()
    journal = journals.reopen(journal)
    assert journal.recover().messages.get("q", []) == []


def test_under_the_limit_new_messages_leave_a_segments_end_to_acks(journals: Journals) -> None:
    """If the disk then fills, consumers' acks still fit where no new message may go."""
    journals.disk.free = 100 * MiB
    journal = journals.open(segment_size=8192, disk_free_limit=64 * MiB)
    journals.disk.free = 10 * MiB
    journal.reclaim()  # it sees the disk low
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    for seq in range(1, 40):
        journal.add(add("q", seq, b"x" * 300))
    journal.flush()
    first = journal.segments()[0]
    data = read_segment(str(journals.directory), first)
    scan = Scan(data, first, SEGMENT_HEADER_SIZE)
    assert len(list(scan)) > 1
    assert len(data) - scan.end >= 8192 // 8  # the reserve: an eighth of a small segment
