"""Segments missing from a journal, or blank among the others: which, and what they took.

Reclaiming deletes segments too, so a hole in the numbering is not by itself
a loss. Each reclaim pass writes a checkpoint listing the segments it keeps
(``CheckpointRecord.kept``); with the last checkpoint, a recovery knows which
segments must be there: those it lists, and every one numbered after them
(no pass deleted anything since). Without one, nothing was ever reclaimed
and the segments run from 1. A segment missing from that set was lost (a file
deleted by hand, a backup restored without it); so was a segment that is
empty or zero-filled among others (a file truncated by a disk or a tool).
Only the newest segment may be blank without a loss: the journal makes it at
a roll-over and a crash can stop it before its first write; such a file is
removed when the journal opens (it held nothing).

What a lost segment held cannot be read, only inferred from the segments
around it (:func:`describe`, a second read, made only when something is
lost): for each destination, the sequence numbers no record holds between
the last one written before the hole and the first after it. Those messages
were written in the hole, or were non-persistent (never recorded); the ones a
later record acks were consumed anyway. The acks and delivery marks the
segment held are lost too, so messages consumed then may be delivered again.

Pure but for reading and removing segment files; runs on the recovering thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from chute.core.store import AddOp
from chute.store.errors import CorruptRecord
from chute.store.payload import Names, add_head, decode_ack
from chute.store.record import Kind, Scan
from chute.store.records import (
    AcksRecord,
    CheckpointRecord,
    CommitPreparedRecord,
    CommitRecord,
    PrepareRecord,
    decode,
)
from chute.store.segment import SEGMENT_HEADER_SIZE, read_segment, segment_path

Checkpoint = tuple[int, tuple[tuple[int, int], ...] | None]
"""The segment the last checkpoint was read in, and the runs of segments it kept."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hole:
    """Consecutive segments lost: missing, or blank among others."""

    first: int
    last: int
    blank: tuple[int, ...]  # those of them that exist but are empty or zero-filled

    def __str__(self) -> str:
        numbers = f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"
        many = self.first != self.last
        if not self.blank:
            return f"segment{'s' if many else ''} {numbers} {'are' if many else 'is'} missing"
        if len(self.blank) == self.last - self.first + 1:
            return f"segment{'s' if many else ''} {numbers} {'are' if many else 'is'} empty"
        blank = ", ".join(map(str, self.blank))
        return f"segments {numbers} are missing or empty ({blank} empty)"


def find_holes(present: list[int], blank: list[int], checkpoint: Checkpoint | None) -> list[Hole]:
    """The lost segments among ``present`` (in order; ``blank`` those read empty)."""
    if not present:
        return []
    last = present[-1]
    if checkpoint is None:
        expected = set(range(1, last + 1))
    else:
        segment, kept = checkpoint
        if kept is None:  # an older journal's checkpoint: only what followed it is known
            expected = set(range(segment, last + 1))
        else:
            expected = {n for first, end in kept for n in range(first, end + 1)}
            expected |= set(range(max(expected, default=segment) + 1, last + 1))
    blanks = set(blank) - {last}  # the newest may be blank: made, then a crash
    lost = sorted((expected - set(present)) | blanks)
    holes: list[Hole] = []
    for number in lost:
        if holes and holes[-1].last == number - 1:
            hole = holes[-1]
            holes[-1] = Hole(
                hole.first, number, hole.blank + ((number,) if number in blanks else ())
            )
        else:
            holes.append(Hole(number, number, (number,) if number in blanks else ()))
    return holes


def remove_blank_tail(directory: str, present: list[int], blank: list[int]) -> bool:
    """Remove the newest segment if it is blank (made, then a crash before its first write),
    so it is not found blank among others later; True if it was."""
    if not present or present[-1] not in blank:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(segment_path(directory, present[-1]))
    return True


@dataclasses.dataclass(slots=True)
class _Numbers:
    """Per destination, as a second read finds them around one hole."""

    before: dict[str, int] = dataclasses.field(default_factory=dict)  # highest seq before
    after: dict[str, int] = dataclasses.field(default_factory=dict)  # lowest new seq after
    queues: dict[str, str] = dataclasses.field(default_factory=dict)  # queue -> destination
    acked: dict[str, set[int]] = dataclasses.field(default_factory=dict)  # by destination
    next_seq: dict[str, int] = dataclasses.field(default_factory=dict)  # from checkpoints


def describe(directory: str, present: list[int], hole: Hole) -> str:
    """What ``hole`` took, as far as the segments around it tell (reads them again)."""
    numbers = _Numbers()
    names = Names()
    for segment in present:
        if hole.first <= segment <= hole.last:
            continue
        try:
            data = read_segment(directory, segment)
        except OSError:
            continue
        _read(data, segment, segment > hole.last, numbers, names)
    ranges = []
    for destination in sorted(set(numbers.before) | set(numbers.after)):
        low = numbers.before.get(destination, 0)
        high = numbers.after.get(destination) or numbers.next_seq.get(destination, 0)
        if high - low <= 1:
            continue
        acked = sum(1 for seq in numbers.acked.get(destination, ()) if low < seq < high)
        count = high - low - 1
        ranges.append(
            f"{destination} seq {low + 1}-{high - 1} ({count} numbers"
            + (f", {acked} of them acked later" if acked else "")
            + f": up to {count - acked} messages lost)"
        )
    what = (
        "; no record around it shows a sequence number it could have held"
        if not ranges
        else "; sequence numbers no record holds since: "
        + ", ".join(ranges)
        + " (fewer if some were non-persistent, which are never recorded)"
    )
    it, its = ("they", "their") if hole.first != hole.last else ("it", "its")
    return (
        f"{hole}: what {it} held is lost{what}; {its} acks and delivery marks are lost "
        "too, so messages consumed then may be delivered again"
    )


def _read(data: bytes, segment: int, later: bool, numbers: _Numbers, names: Names) -> None:
    """Note what one segment's records say about sequence numbers (``later``: after the
    hole)."""
    for _, kind, start, end in Scan(data, segment, SEGMENT_HEADER_SIZE):
        try:
            if kind == Kind.ADD:
                head = add_head(data, start, end, names)
                _numbered(numbers, head.destination, head.seq, head.queues, later)
            elif kind == Kind.ACK and later:
                ack = decode_ack(data, start, names)
                _acked(numbers, ack.queue, (ack.seq,))
            elif kind in (Kind.ACKS, Kind.COMMIT, Kind.COMMIT_PREPARED, Kind.PREPARE) or (
                kind == Kind.CHECKPOINT and later
            ):
                _record(decode(kind, data, start, end, names), later, numbers)
        except CorruptRecord:
            continue  # recovery reported it already


def _record(record: object, later: bool, numbers: _Numbers) -> None:
    if isinstance(record, AcksRecord):
        if later:
            _acked(numbers, record.queue, record.seqs)
    elif isinstance(record, CommitRecord | CommitPreparedRecord | PrepareRecord):
        for op in record.ops:
            if isinstance(op, AddOp):
                _numbered(numbers, op.destination, op.seq, op.queues, later)
            elif later:
                _acked(numbers, op.queue, (op.seq,))
    elif isinstance(record, CheckpointRecord):
        for destination, seq in record.next_seq:
            numbers.next_seq[destination] = max(numbers.next_seq.get(destination, 0), seq)


def _numbered(
    numbers: _Numbers, destination: str, seq: int, queues: tuple[str, ...], later: bool
) -> None:
    for queue in queues:
        numbers.queues[queue] = destination
    if not later:
        if seq > numbers.before.get(destination, 0):
            numbers.before[destination] = seq
    elif seq > numbers.before.get(destination, 0):
        found = numbers.after.get(destination)
        if found is None or seq < found:
            numbers.after[destination] = seq


def _acked(numbers: _Numbers, queue: str, seqs: tuple[int, ...]) -> None:
    destination = numbers.queues.get(queue, queue)
    numbers.acked.setdefault(destination, set()).update(seqs)
