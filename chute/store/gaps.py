"""Records lost from a journal (segments missing, blank among the others, or cut short):
which, and what they took.

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

A tear is the same kind of loss (:class:`Tear`, :func:`is_loss`): bytes that
are not a record at the end of a segment other than the newest (only the
newest is written to, so no crash tears another), or a file that ends inside
a record (segments are made at full size: it was cut short). What followed
is described the same way (:func:`describe_tear`); for the newest segment no
later one tells how much that was, only where each destination's numbers
stopped.

Since a lost part may have held acks and delivery marks, every live message
recorded before the latest loss is given a delivery count
(:func:`flag_redelivered`): it comes back ``redelivered``.

The numbers of the segments come from file names: holes are found as runs
(:func:`find_holes`), never number by number, and the newest segments that
hold nothing (:func:`blank_tail`, removed at the open) say nothing about the
numbers before them.

Pure but for reading and removing segment files; runs on the recovering thread.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os

from chute.core.model.store import AddOp
from chute.store.errors import CorruptRecord
from chute.store.heads import add_head
from chute.store.payload import Names, decode_ack
from chute.store.reclaim import SEGMENT_SHIFT, LiveIndex
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
    """The lost segments among ``present`` (in order; ``blank`` those read empty).

    Works on runs of numbers, never on each number between the first and the
    last: the numbers come from file names, and one name far ahead (a stray
    the caller did not set aside) must cost no more than any other.
    """
    if not present:
        return []
    last = present[-1]
    expected: list[tuple[int, int]]
    if checkpoint is None:
        expected = [(1, last)]
    else:
        segment, kept = checkpoint
        if kept is None:  # an older journal's checkpoint: only what followed it is known
            expected = [(segment, last)]
        else:
            top = max((end for _, end in kept), default=segment)
            expected = [*kept, (top + 1, last)]
    have = sorted(set(present))
    pieces: list[tuple[int, int, tuple[int, ...]]] = []
    for first, run_end in expected:
        end = min(run_end, last)
        at = first
        i = bisect.bisect_left(have, first)
        while i < len(have) and have[i] <= end:
            if have[i] > at:
                pieces.append((at, have[i] - 1, ()))
            at = have[i] + 1
            i += 1
        if at <= end:
            pieces.append((at, end, ()))
    pieces += [(n, n, (n,)) for n in set(blank) - {last}]  # the newest may be blank: a crash
    holes: list[Hole] = []
    for first, end, blanks in sorted(pieces):
        if holes and holes[-1].last >= first - 1:
            hole = holes[-1]
            holes[-1] = Hole(hole.first, max(hole.last, end), hole.blank + blanks)
        else:
            holes.append(Hole(first, end, blanks))
    return holes


def blank_tail(present: list[int], blank: list[int], empty: list[int]) -> list[int]:
    """The newest segments of ``present`` that hold no record (``blank``: zero bytes;
    ``empty``: a header and nothing after it): made, then a crash before a write. They
    held nothing, and say nothing about the segments before them: a stray far ahead
    (``9999999999.seg`` of zeros) must not stand for the numbers in between."""
    nothing = set(blank) | set(empty)
    tail: list[int] = []
    for number in reversed(present):
        if number not in nothing:
            break
        tail.append(number)
    return sorted(tail)


def remove_segments(directory: str, numbers: list[int]) -> None:
    """Delete segments that hold nothing (:func:`blank_tail`'s), so that later segments
    do not find them blank among others."""
    for number in numbers:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment_path(directory, number))


@dataclasses.dataclass(frozen=True, slots=True)
class Tear:
    """A segment whose records end in bytes that are not a record (cut there)."""

    segment: int
    offset: int  # where its last good record ends
    size: int  # the bytes cut (up to their last non-zero one)
    reason: str
    truncated: bool  # the file ends inside a record: it was cut short, not torn by a write
    record: int  # that record's whole size as its header says (0: not known)

    @property
    def location(self) -> int:
        return self.segment << SEGMENT_SHIFT | self.offset


def is_loss(tear: Tear, newest: int) -> bool:
    """Whether ``tear`` lost records, not only a write a crash cut short.

    Only the newest segment is written to, so only its last write can be torn
    by a crash; a tear in any other segment, or a newest segment that ends
    inside a record (a file cut short: preallocated segments are made at full
    size), lost what followed."""
    return tear.segment != newest or tear.truncated


def describe_tear(directory: str, present: list[int], tear: Tear, newest: int) -> str:
    """What ``tear`` took, as far as the records around it tell (reads them again)."""
    where = f"segment {tear.segment} offset {tear.offset}: {tear.reason}"
    if tear.truncated:
        record = f" (a record of {tear.record} bytes)" if tear.record else ""
        what = f"the file ends inside a record{record}: it was cut short"
    else:
        what = "it is not the newest segment, so no crash tore it"
    numbers = _around(directory, present, tear.segment, tear.segment + 1)
    if tear.segment != newest:
        lost = _ranges(numbers)
        told = (
            "; no record after it shows a sequence number it could have held"
            if not lost
            else "; sequence numbers no record holds since: "
            + ", ".join(lost)
            + " (fewer if some were non-persistent, which are never recorded)"
        )
    else:
        kept = ", ".join(f"{d} after seq {s}" for d, s in sorted(numbers.before.items()))
        told = "; no later segment tells how much was written after it" + (
            f" (the last records kept: {kept})" if kept else ""
        )
    return (
        f"{where}, {tear.size} bytes cut; {what}: what it held from there on is lost{told}; "
        "its acks and delivery marks are lost too, so messages consumed then may be "
        "delivered again"
    )


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
    ranges = _ranges(_around(directory, present, hole.first - 1, hole.last + 1))
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


def _around(directory: str, present: list[int], through: int, after: int) -> _Numbers:
    """The sequence numbers the records of ``present`` hold up to segment ``through``
    and from segment ``after`` on (reads those segments)."""
    numbers = _Numbers()
    names = Names()
    for segment in present:
        if through < segment < after:
            continue
        try:
            data = read_segment(directory, segment)
        except OSError:
            continue
        _read(data, segment, segment >= after, numbers, names)
    return numbers


def _ranges(numbers: _Numbers) -> list[str]:
    """Per destination, the sequence numbers no record holds between before and after."""
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
    return ranges


def flag_redelivered(index: LiveIndex, before: int) -> tuple[dict[str, list[int]], int]:
    """Give each live message whose add lies before location ``before`` a delivery count
    of at least 1 (it comes back ``redelivered``): an ack or a delivery mark of it may
    have been in what was lost. Returns, per queue, the seqs it changed (for the journal
    to write as delivery marks, so that the next start knows them too), and how many
    messages lie before ``before`` (those changed and those that had a count already)."""
    changed: dict[str, list[int]] = {}
    flagged = 0
    for queue, held in index.locations.items():
        counts = index.counts.get(queue) or {}
        earlier = [seq for seq, location in held.items() if location < before]
        flagged += len(earlier)
        seqs = [seq for seq in earlier if not counts.get(seq)]
        for seq in seqs:
            index.delivered(queue, seq, 1)
        if seqs:
            changed[queue] = seqs
    return changed, flagged


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
