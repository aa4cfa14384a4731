"""Lost segments: a missing or blank one among the others is a warning saying what it took;
segments reclaimed on purpose, and a blank newest one, are not."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from chute.core.model.store import QueueDefinition, QueueKind, StoredMessage
from chute.store.gaps import Hole, find_holes
from chute.store.journal import Journal
from chute.store.recovery import recover
from chute.store.segment import list_segments, segment_path

from .conftest import Journals
from .helpers import add


@pytest.mark.parametrize(
    ("present", "blank", "checkpoint", "holes"),
    [
        ([1, 2, 3], [], None, []),
        ([1, 3], [], None, [Hole(2, 2, ())]),
        ([3, 4], [], None, [Hole(1, 2, ())]),  # nothing reclaimed: segments start at 1
        ([1, 2, 3], [3], None, []),  # the newest blank: made, then a crash
        ([1, 2, 3], [2], None, [Hole(2, 2, (2,))]),
        ([2, 7, 8, 9], [], (8, ((2, 2), (7, 8))), []),  # 3-6 reclaimed by the last pass
        ([2, 8, 9], [], (8, ((2, 2), (7, 8))), [Hole(7, 7, ())]),
        ([2, 7, 9], [], (8, ((2, 2), (7, 8))), [Hole(8, 8, ())]),  # after the pass
        ([2, 7, 8, 10], [], (8, ((2, 2), (7, 8))), [Hole(9, 9, ())]),
        ([5, 6, 8], [], (6, None), [Hole(7, 7, ())]),  # an older journal's checkpoint
        ([1, 2, 3, 4, 5], [2, 3], None, [Hole(2, 3, (2, 3))]),
        # runs, never each number: a name far ahead costs what any other does
        ([1, 2, 9_999_999_999], [], None, [Hole(3, 9_999_999_998, ())]),
        ([7, 1 << 60], [], (7, ((7, 7),)), [Hole(8, (1 << 60) - 1, ())]),
        ([1, 3, 5], [3], None, [Hole(2, 4, (3,))]),
    ],
)
def test_which_segments_are_lost(
    present: list[int],
    blank: list[int],
    checkpoint: tuple[int, tuple[tuple[int, int], ...] | None] | None,
    holes: list[Hole],
) -> None:
    assert find_holes(present, blank, checkpoint) == holes


def fill(journal: Journal, count: int, start: int = 1) -> None:
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    for seq in range(start, start + count):
        journal.add(add("q", seq, b"m" * 300))
    journal.flush()


def test_segments_reclaimed_on_purpose_are_not_reported(journals: Journals) -> None:
    journal = journals.open(segment_size=8192, compact_ratio=0)
    fill(journal, 30)  # segments pinned by the first messages...
    fill(journal, 60, start=31)
    journal.acks("q", list(range(31, 91)))  # ... while the later ones are consumed
    journal.flush()
    journal.reclaim()
    kept = journal.segments()
    assert len(kept) < kept[-1] - kept[0] + 1, "the test needs a hole in the numbering"
    journal = journals.reopen(journal, segment_size=8192, compact_ratio=0)
    recovered = journal.recover()
    assert recovered.clean, recovered.report
    assert [s.seq for s in recovered.messages["q"]] == list(range(1, 31))


def test_a_missing_middle_segment_is_a_warning_saying_what_it_took(
    journals: Journals, caplog: pytest.LogCaptureFixture
) -> None:
    journal = journals.open(segment_size=8192)
    fill(journal, 80)
    journal.close()
    directory = str(journals.directory)
    segments = list_segments(directory)
    middle = segments[len(segments) // 2]
    before = {s.seq for s in recover(directory)[0].messages["q"]}
    os.unlink(segment_path(directory, middle))
    with caplog.at_level(logging.WARNING, logger="chute.store.recovery"):
        recovered, report = recover(directory)
    after = {s.seq for s in recovered.messages["q"]}
    gone = sorted(before - after)
    assert gone == list(range(gone[0], gone[-1] + 1))  # one run of messages
    [problem] = report.problems
    assert f"segment {middle} is missing: what it held is lost" in problem
    assert f"q seq {gone[0]}-{gone[-1]} ({len(gone)} numbers: up to {len(gone)} messages lost)" in (
        problem
    )
    assert problem in caplog.text
    assert not report.clean
    assert "1 segments lost" in str(report)


def test_an_emptied_middle_segment_is_reported_and_its_acked_messages_are_counted(
    journals: Journals,
) -> None:
    settings = {"segment_size": 8192, "auto_reclaim": False}
    journal = journals.open(**settings)
    fill(journal, 80)
    journal.close()
    directory = str(journals.directory)
    segments = list_segments(directory)
    middle = segments[len(segments) // 2]
    before = {s.seq for s in recover(directory)[0].messages["q"]}
    lost = sorted(before - {s.seq for s in _without(directory, middle)})
    journal = journals.open(**settings)
    journal.acks("q", lost[:3])  # three of them were consumed: acks in a later segment
    journal.close()
    Path(segment_path(directory, middle)).write_bytes(b"")  # truncated to zero
    recovered, report = recover(directory)
    [problem] = report.problems
    assert f"segment {middle} is empty: what it held is lost" in problem
    assert (
        f"q seq {lost[0]}-{lost[-1]} ({len(lost)} numbers, 3 of them acked later: "
        f"up to {len(lost) - 3} messages lost)"
    ) in problem
    assert {s.seq for s in recovered.messages["q"]} == before - set(lost)


def _without(directory: str, segment: int) -> list[StoredMessage]:
    """What a recovery finds with ``segment`` set aside (moved out, then back)."""
    path = segment_path(directory, segment)
    os.rename(path, path + ".aside")
    try:
        return recover(directory, cut=False)[0].messages["q"]
    finally:
        os.rename(path + ".aside", path)


def test_a_blank_newest_segment_is_removed_at_open_not_reported_later(
    journals: Journals,
) -> None:
    journal = journals.open(segment_size=8192)
    fill(journal, 10)
    journal.close()
    directory = str(journals.directory)
    newest = list_segments(directory)[-1] + 1
    Path(segment_path(directory, newest)).write_bytes(bytes(8192))  # made, then a crash
    journal = journals.open(segment_size=8192)
    assert journal.recover().clean
    fill(journal, 40, start=11)  # later segments follow it
    journal.close()
    recovered, report = recover(directory)
    assert report.clean, report
    assert [s.seq for s in recovered.messages["q"]] == list(range(1, 51))
