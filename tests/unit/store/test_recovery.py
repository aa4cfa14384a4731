"""Recovery from damaged journals: torn tails cut, corrupt records skipped, never a crash."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from chute.core.model.store import AckOp, QueueDefinition, QueueKind
from chute.store.journal import Journal
from chute.store.record import HEADER_SIZE, Kind, Scan, frame
from chute.store.recovery import recover
from chute.store.segment import SEGMENT_HEADER_SIZE, header, segment_path

from .conftest import Journals
from .helpers import add

N = 12  # records in the journal: a definition and eleven adds


def build(directory: Path, *, preallocate: bool) -> tuple[Path, list[tuple[int, int]]]:
    """A closed journal of N records in one segment; returns its file and record spans."""
    with Journal(directory, segment_size=64 * 1024, preallocate=preallocate) as journal:
        journal.define(QueueDefinition("q", QueueKind.QUEUE))
        for seq in range(1, N):
            journal.add(add("q", seq, f"message {seq} ".encode() * 3))
    [number] = [int(p.stem) for p in directory.glob("*.seg")]
    path = directory / f"{number:010d}.seg"
    data = path.read_bytes()
    spans = [(offset, end) for offset, _, _, end in Scan(data, number, SEGMENT_HEADER_SIZE)]
    assert len(spans) == N
    return path, spans


def seqs(directory: Path) -> list[int]:
    recovered, _ = recover(str(directory))
    return [s.seq for s in recovered.messages.get("q", [])]


@pytest.mark.parametrize("preallocate", [False, True])
def test_a_torn_last_record_is_cut_at_every_byte(tmp_path: Path, preallocate: bool) -> None:
    path, spans = build(tmp_path / "original", preallocate=preallocate)
    original = path.read_bytes()
    start, end = spans[-1]
    work = tmp_path / "work"
    work.mkdir()
    torn = work / path.name
    for cut in range(start, end):
        torn.write_bytes(original[:cut])
        recovered, report = recover(str(work))
        assert [s.seq for s in recovered.messages["q"]] == list(range(1, N - 1)), cut
        assert report.bytes_cut == len(original[start:cut].rstrip(b"\x00"))
        assert report.records == N - 1
        assert report.records_skipped == 0
        assert torn.stat().st_size == start  # cut back to the last good record
        assert recover(str(work))[1].clean  # and the next recovery finds nothing wrong


def test_a_torn_record_in_a_zero_filled_segment_is_cut(tmp_path: Path) -> None:
    """In a pre-allocated segment a torn write leaves zeros, not a short file."""
    path, spans = build(tmp_path, preallocate=True)
    start, end = spans[-1]
    data = bytearray(path.read_bytes())
    for cut in range(start + 1, end, 7):
        damaged = data[:cut] + bytes(len(data) - cut)
        path.write_bytes(damaged)
        assert seqs(tmp_path) == list(range(1, N - 1)), cut


def test_a_journal_reopened_after_a_torn_tail_carries_on(tmp_path: Path) -> None:
    path, spans = build(tmp_path, preallocate=False)
    start, end = spans[-1]
    with open(path, "r+b") as f:
        f.truncate((start + end) // 2)
    with Journal(tmp_path) as journal:
        assert journal.report.bytes_cut == (start + end) // 2 - start
        assert [s.seq for s in journal.recover().messages["q"]] == list(range(1, N - 1))
        journal.add(add("q", 100))
    with Journal(tmp_path) as journal:
        assert journal.report.clean
        assert [s.seq for s in journal.recover().messages["q"]][-2:] == [N - 2, 100]


@pytest.mark.parametrize("record", [1, 5, N - 2])
def test_a_flipped_byte_in_a_middle_record_skips_that_record_only(
    tmp_path: Path, record: int
) -> None:
    """Every byte of the record, header and payload: that add is lost, nothing else."""
    path, spans = build(tmp_path / "original", preallocate=False)
    original = path.read_bytes()
    start, end = spans[record]
    work = tmp_path / "work"
    work.mkdir()
    damaged_path = work / path.name
    expected = [seq for seq in range(1, N) if seq != record]  # record k holds seq k
    for position in range(start, end):
        damaged = bytearray(original)
        damaged[position] ^= 0x55
        damaged_path.write_bytes(damaged)
        recovered, report = recover(str(work))
        assert [s.seq for s in recovered.messages["q"]] == expected, position
        assert report.records_skipped == 1
        assert report.bytes_cut == 0
        assert report.records == N - 1
        assert not report.clean


def test_a_record_that_checks_but_does_not_decode_is_skipped(tmp_path: Path) -> None:
    path, _ = build(tmp_path, preallocate=False)
    number = int(path.stem)
    data = path.read_bytes()
    bogus = frame(number, len(data), Kind.ADD, b"not an add")
    unknown = frame(number, len(data) + len(bogus), 99, b"from a newer version")
    tail = frame(number, len(data) + len(bogus) + len(unknown), Kind.ACK, b"")
    path.write_bytes(data + bogus + unknown + tail)  # the ACK is short too
    recovered, report = recover(str(tmp_path))
    assert [s.seq for s in recovered.messages["q"]] == list(range(1, N))
    assert report.records_skipped == 3
    assert len(report.problems) == 3


def test_an_ack_lost_to_corruption_brings_its_message_back(tmp_path: Path) -> None:
    """At least once: losing an ack redelivers, it never loses a message."""
    with Journal(tmp_path, preallocate=False) as journal:
        journal.add(add("q", 1))
        journal.ack(AckOp("q", 1))
        journal.add(add("q", 2))
    [path] = tmp_path.glob("*.seg")
    data = bytearray(path.read_bytes())
    [ack] = [
        offset
        for offset, kind, _, _ in Scan(bytes(data), int(path.stem), SEGMENT_HEADER_SIZE)
        if kind == Kind.ACK
    ]
    data[ack + HEADER_SIZE] ^= 1
    path.write_bytes(data)
    assert seqs(tmp_path) == [1, 2]


def test_odd_segment_files_are_reported_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build(tmp_path, preallocate=False)
    (tmp_path / "0000000100.seg").write_bytes(b"")  # empty
    (tmp_path / "0000000101.seg").write_bytes(bytes(4096))  # made, never written
    (tmp_path / "0000000102.seg").write_bytes(b"garbage" * 100)  # not a segment
    (tmp_path / "0000000103.seg").write_bytes(header(999) + b"x" * 50)  # someone else's
    (tmp_path / "notes.txt").write_text("not a segment")
    with caplog.at_level(logging.WARNING, logger="chute.store.recovery"):
        recovered, report = recover(str(tmp_path))
    assert [s.seq for s in recovered.messages["q"]] == list(range(1, N))
    assert report.segments == 3  # the real one, and the two that hold nothing
    assert report.problems == [
        "0000000102.seg has no segment header (700 bytes): not a segment, set aside as "
        "0000000102.seg.stray (nothing read from it)",
        "0000000103.seg has the header of segment 999, and no record of its own: not a "
        "segment, set aside as 0000000103.seg.stray (nothing read from it)",
        "segments 100, 101, numbered past segment 1 (the newest that holds records), "
        "held nothing: removed",
    ]
    assert all(p in caplog.text for p in report.problems)
    # set aside untouched (not cut), and the blank ones gone: the next start finds nothing
    assert (tmp_path / "0000000102.seg.stray").read_bytes() == b"garbage" * 100
    assert (tmp_path / "0000000103.seg.stray").read_bytes() == header(999) + b"x" * 50
    assert sorted(p.name for p in tmp_path.glob("*.seg")) == ["0000000001.seg"]
    assert recover(str(tmp_path))[1].clean


def test_an_unreadable_segment_is_skipped(tmp_path: Path) -> None:
    build(tmp_path, preallocate=False)
    os.mkdir(segment_path(str(tmp_path), 500))  # a directory where a segment should be
    recovered, report = recover(str(tmp_path))
    assert len(recovered.messages["q"]) == N - 1
    assert report.records_skipped == 1


def test_the_report_reads_well(tmp_path: Path) -> None:
    path, spans = build(tmp_path, preallocate=False)
    with open(path, "r+b") as f:
        f.truncate(spans[-1][0] + 5)
    _, report = recover(str(tmp_path))
    text = str(report)
    assert f"replayed {N - 1} records from 1 segments" in text
    assert "cut a torn tail of 5 bytes" in text


def test_recovery_rebuilds_what_reclaiming_needs(journals: Journals) -> None:
    """A reopened journal knows where the old adds are: acking them frees their segments."""
    journal = journals.open(segment_size=8192, compact_ratio=0)
    for seq in range(1, 61):
        journal.add(add("q", seq, b"z" * 300))
    journal = journals.reopen(journal, segment_size=8192, compact_ratio=0)
    old = journal.segments()
    assert len(old) > 2
    for seq in range(1, 61):
        journal.ack(AckOp("q", seq))
    journal.reclaim()
    assert not set(old) & set(journal.segments())
    journal = journals.reopen(journal)
    assert journal.recover().messages == {}
    assert journal.recover().next_seq == {"q": 61}


def test_a_copied_journal_recovers_the_same(tmp_path: Path) -> None:
    build(tmp_path / "a", preallocate=True)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert seqs(tmp_path / "a") == seqs(tmp_path / "b") == list(range(1, N))


def _gathered_journal(directory: Path) -> tuple[Path, list[tuple[int, int, int]]]:
    """Ten adds, then one MARKS record (6..10 delivered once) and one ACKS record (1..5)."""
    with Journal(directory, segment_size=64 * 1024, preallocate=False) as journal:
        for seq in range(1, 11):
            journal.add(add("q", seq))
        journal.flush()
        for seq in range(6, 11):
            journal.delivered("q", seq, 1)
        journal.acks("q", [1, 2, 3, 4, 5])
    [path] = directory.glob("*.seg")
    data = path.read_bytes()
    records = [(o, kind, e) for o, kind, _, e in Scan(data, int(path.stem), SEGMENT_HEADER_SIZE)]
    assert [kind for _, kind, _ in records[-2:]] == [Kind.MARKS, Kind.ACKS]
    return path, records


def counts(directory: Path) -> list[tuple[int, int]]:
    recovered, _ = recover(str(directory))
    return [(s.seq, s.delivery_count) for s in recovered.messages.get("q", [])]


def test_a_torn_acks_record_brings_its_messages_back_and_loses_nothing(tmp_path: Path) -> None:
    path, records = _gathered_journal(tmp_path / "original")
    original = path.read_bytes()
    start, _, end = records[-1]
    work = tmp_path / "work"
    work.mkdir()
    for cut in range(start, end):
        (work / path.name).write_bytes(original[:cut])
        assert counts(work) == [(s, 0) for s in range(1, 6)] + [(s, 1) for s in range(6, 11)], cut


def test_a_corrupt_marks_record_loses_only_the_marks(tmp_path: Path) -> None:
    path, records = _gathered_journal(tmp_path)
    data = bytearray(path.read_bytes())
    start, _, _ = records[-2]
    data[start + HEADER_SIZE + 3] ^= 0xFF
    path.write_bytes(data)
    assert counts(tmp_path) == [(s, 0) for s in range(6, 11)]


def test_a_segment_whose_header_alone_is_damaged_is_still_read(tmp_path: Path) -> None:
    """Its first record checks at its number and place: a segment, not a stray."""
    path, _ = build(tmp_path, preallocate=False)
    data = bytearray(path.read_bytes())
    data[:8] = b"\x00" * 8  # the header's marker gone
    path.write_bytes(bytes(data))
    recovered, report = recover(str(tmp_path))
    assert [s.seq for s in recovered.messages["q"]] == list(range(1, N))
    assert report.problems == [
        f"segment {int(path.stem)}: no segment header; reading its records anyway"
    ]
    assert path.exists()


def test_a_huge_stray_of_zeros_is_looked_at_in_chunks_and_removed(tmp_path: Path) -> None:
    build(tmp_path, preallocate=False)
    stray = tmp_path / "9999999999.seg"
    with open(stray, "wb") as f:
        f.truncate(64 << 20)  # a sparse file: 64 MiB of zeros
    _, report = recover(str(tmp_path))
    assert report.bytes_read < 1 << 20  # never read as a segment
    assert report.segments_lost == 0
    assert not stray.exists()
