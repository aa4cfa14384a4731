"""Which segments can be deleted, and what compaction must copy forward first.

Pure: no files. The journal's writer keeps a :class:`LiveIndex` of what is
live where, asks :func:`plan` which segments may go, builds the records that
carry their last live content forward (:func:`compaction_records`), writes
and syncs those, and only then deletes.

Positive records bring something to life: an add (one per queue it went to),
a queue definition, a prepared transaction. Negative records end something:
an ack, an undefine, a commit or rollback of a prepared transaction, a newer
definition or prepare of the same name, a compacted copy of an add. A commit in
place (COMMIT_IN_PLACE) ends the prepare and brings its adds to life where the
PREPARE record lies. Each
negative *depends* on the segment holding the positive it cancelled.

The rule (Artemis' ``Reclaimer``): a segment Fn may be deleted if and only if

1. every positive record in Fn is cancelled (nothing in it is live), and
2. every positive that a negative record in Fn cancels lives in a segment
   that is also deleted in the same pass, or is already gone.

Rule 2 is what keeps an ack from disappearing before the add it cancels: if
the ack's segment went and the add's stayed, a restart would replay the add
alone and resurrect an acked message. Negatives only ever point backwards
(an ack is written after its add; a compacted copy after the original), so
deleting a pass's segments in ascending order keeps the rule at every
instant, even if the process dies between two unlinks.

Compaction: a segment pinned by a few live positives (at most
``compact_ratio`` of those ever written in it) is treated as deletable if
its live content is first copied into the current segment; the copies
cancel the originals. Rule 2 is then checked as for any other deletion, so
a segment is compacted only if it will actually go.

What deleted segments knew that no positive carries, the sequence
high-water mark of each destination, the delivery counts of live
messages and where retention left each stream's first offset (its newest
FIRST record), is written first in a :class:`~chute.store.records.CheckpointRecord`.

Thread-safety: none. The writer thread owns the index (recovery builds it
before the writer starts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import cast

from chute.core.model.store import AckOp, AddOp, QueueDefinition, TxOp
from chute.store.heads import add_keys, op_add_keys
from chute.store.payload import Names, decode_add
from chute.store.record import Kind, Scan
from chute.store.records import (
    AckRecord,
    AcksRecord,
    AddRecord,
    CheckpointRecord,
    CommitInPlaceRecord,
    CommitPreparedRecord,
    CommitRecord,
    DefineRecord,
    DeliveredRecord,
    FirstRecord,
    MarksRecord,
    PadRecord,
    PrepareRecord,
    Record,
    RollbackPreparedRecord,
    SentRecord,
    UndefineRecord,
    decode,
)
from chute.store.segment import SEGMENT_HEADER_SIZE
from chute.store.seqmap import SeqMap

# A record's location: its segment number in the high bits, its offset in the low 32.
SEGMENT_SHIFT = 32


def runs(numbers: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """``numbers`` as ascending runs of consecutive numbers, (first, last) each."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return tuple(out)


class LiveIndex:
    """What is live, and in which segment: the journal's bookkeeping for reclaiming.

    ``locations[queue][seq]`` is where the live add of that message is;
    ``live[segment]`` counts the live positives in a segment and
    ``written[segment]`` those ever written there; ``deps[segment]`` holds
    the segments whose positives the negatives in ``segment`` cancelled;
    ``firsts[stream]`` is what the newest FIRST record of a stream said.
    """

    def __init__(self) -> None:
        self.locations: dict[str, SeqMap] = {}
        self.counts: dict[str, dict[int, int]] = {}
        self.definitions: dict[str, tuple[QueueDefinition, int]] = {}
        self.prepared: dict[str, tuple[tuple[TxOp, ...], int]] = {}
        self.next_seq: dict[str, int] = {}
        self.firsts: dict[str, int] = {}
        self.live: dict[int, int] = {}
        self.written: dict[int, int] = {}
        self.deps: dict[int, set[int]] = {}

    # -- applying records ------------------------------------------------------------

    def apply(self, record: Record, location: int) -> None:
        """Account for ``record``, written at ``location``."""
        if type(record) is AddRecord:  # the hot path first
            self.add(record.op, record.delivery_count, location)
            return
        match record:
            case AcksRecord(queue, seqs):
                self.acks(queue, seqs, location)
            case AckRecord(op):
                self.ack(op, location)
            case MarksRecord(queue, seqs, counts):
                for seq, count in zip(seqs, counts, strict=True):
                    self.delivered(queue, seq, count)
            case DeliveredRecord(queue, seq, count):
                self.delivered(queue, seq, count)
            case DefineRecord(definition):
                self.define(definition, location)
            case UndefineRecord(name):
                self.undefine(name, location)
            case CommitRecord(ops):
                self.commit(ops, location)
            case PrepareRecord(xid, ops):
                self.prepare(xid, ops, location)
            case CommitInPlaceRecord(xid):
                self.commit_in_place(xid, location)
            case CommitPreparedRecord(xid, ops):
                self.end_prepared(xid, location)
                self.commit(ops, location)
            case RollbackPreparedRecord(xid):
                self.end_prepared(xid, location)
            case CheckpointRecord(next_seq, counts, _, firsts):
                self.checkpoint(next_seq, counts)
                self.firsts.update(firsts)
            case FirstRecord(stream, first):
                self.firsts[stream] = first
            case PadRecord() | SentRecord():
                pass
            case AddRecord(op, count):  # pragma: no cover - handled above
                self.add(op, count, location)

    def _born(self, location: int) -> None:
        segment = location >> SEGMENT_SHIFT
        self.live[segment] = self.live.get(segment, 0) + 1
        self.written[segment] = self.written.get(segment, 0) + 1

    def _kill(self, old: int, location: int) -> None:
        dead = old >> SEGMENT_SHIFT
        self.live[dead] -= 1
        segment = location >> SEGMENT_SHIFT
        if dead != segment:
            deps = self.deps.get(segment)
            if deps is None:
                deps = self.deps[segment] = set()
            deps.add(dead)

    def add(self, op: AddOp, count: int, location: int) -> None:
        self._add(op, count, location)
        segment = location >> SEGMENT_SHIFT
        n = len(op.queues)
        self.live[segment] = self.live.get(segment, 0) + n
        self.written[segment] = self.written.get(segment, 0) + n

    def _add(self, op: AddOp, count: int, location: int) -> None:
        """:meth:`add` but for the segment's counters (the caller adds one per queue)."""
        seq = op.seq
        locations = self.locations
        for queue in op.queues:
            held = locations.get(queue)
            if held is None:
                held = locations[queue] = SeqMap()
            if held.append_next(seq, location):  # a new message: nothing to replace
                if not count:
                    continue  # and no count to keep or drop
            else:
                old = held.get(seq)
                if old is not None:
                    self._kill(old, location)
                held[seq] = location
            counts = self.counts.get(queue)
            if count:
                if counts is None:
                    counts = self.counts[queue] = {}
                counts[seq] = count
            elif counts:
                counts.pop(seq, None)
        if self.next_seq.get(op.destination, 0) <= seq:
            self.next_seq[op.destination] = seq + 1

    def ack(self, op: AckOp, location: int) -> None:
        held = self.locations.get(op.queue)
        if held is None:
            return
        old = held.pop(op.seq, None)
        if old is not None:
            self._kill(old, location)
            counts = self.counts.get(op.queue)
            if counts:
                counts.pop(op.seq, None)

    def acks(self, queue: str, seqs: Iterable[int], location: int) -> None:
        """:meth:`ack` for each of ``seqs`` of ``queue`` (one ACKS record)."""
        held = self.locations.get(queue)
        if held is None:
            return
        counts = self.counts.get(queue)
        segment = location >> SEGMENT_SHIFT
        live = self.live
        cancelled: set[int] = set()
        for seq in seqs:
            old = held.pop(seq, None)
            if old is None:
                continue
            dead = old >> SEGMENT_SHIFT
            live[dead] -= 1
            cancelled.add(dead)
            if counts:
                counts.pop(seq, None)
        cancelled.discard(segment)
        if cancelled:
            deps = self.deps.get(segment)
            if deps is None:
                self.deps[segment] = cancelled
            else:
                deps |= cancelled

    def delivered(self, queue: str, seq: int, count: int) -> None:
        held = self.locations.get(queue)
        if held is None or seq not in held:
            return
        counts = self.counts.get(queue)
        if counts is None:
            counts = self.counts[queue] = {}
        if counts.get(seq, 0) < count:
            counts[seq] = count

    def define(self, definition: QueueDefinition, location: int) -> None:
        old = self.definitions.get(definition.name)
        if old is not None:
            self._kill(old[1], location)
        self.definitions[definition.name] = (definition, location)
        self._born(location)

    def undefine(self, name: str, location: int) -> None:
        old = self.definitions.pop(name, None)
        if old is not None:
            self._kill(old[1], location)
        for held in self.locations.pop(name, SeqMap()).values():
            self._kill(held, location)
        self.counts.pop(name, None)
        self.firsts.pop(name, None)

    def commit(self, ops: Sequence[TxOp], location: int) -> None:
        # the segment's counters first, once: an ack further on may cancel an add of
        # this very record
        added = sum(len(op.queues) for op in ops if isinstance(op, AddOp))
        if added:
            segment = location >> SEGMENT_SHIFT
            self.live[segment] = self.live.get(segment, 0) + added
            self.written[segment] = self.written.get(segment, 0) + added
        i, n = 0, len(ops)
        while i < n:
            op = ops[i]
            if isinstance(op, AddOp):
                i = self._add_run(ops, i, location)
            else:
                self.ack(op, location)
                i += 1

    def _add_run(self, ops: Sequence[TxOp], i: int, location: int) -> int:
        """:meth:`_add` the adds from ``ops[i]`` on that one queue's map takes as a run (a
        batch: one destination and queue, consecutive numbers) at once; the index after
        those indexed (at least ``ops[i]``)."""
        first = cast("AddOp", ops[i])
        queues = first.queues
        j = i + 1
        if len(queues) == 1:
            seq, destination, n = first.seq, first.destination, len(ops)
            while j < n:
                op = ops[j]
                if (
                    type(op) is not AddOp
                    or op.seq != seq + (j - i)
                    or op.queues != queues
                    or op.destination != destination
                ):
                    break
                j += 1
        if j - i < 3:
            self._add(first, 0, location)
            return i + 1
        self._add(first, 0, location)  # makes the queue's map if it has none
        held = self.locations[queues[0]]
        if held.append_run(first.seq + 1, j - i - 1, location):
            last = first.seq + (j - i - 1)
            if self.next_seq.get(first.destination, 0) <= last:
                self.next_seq[first.destination] = last + 1
        else:
            for k in range(i + 1, j):
                self._add(cast("AddOp", ops[k]), 0, location)
        return j

    def prepare(self, xid: str, ops: tuple[TxOp, ...], location: int) -> None:
        self.end_prepared(xid, location)
        self.prepared[xid] = (ops, location)
        self._born(location)

    def commit_in_place(self, xid: str, location: int) -> None:
        """Commit prepared ``xid`` by the record at ``location``: its adds live where its
        PREPARE lies, which no longer counts as a prepare. The commit depends on the
        PREPARE's segment (as an ack on its add's), so it is kept for as long as that is:
        a restart never finds the PREPARE without it."""
        found = self.prepared.pop(xid, None)
        if found is None:
            return
        ops, prepared_at = found
        self._kill(prepared_at, location)
        self.commit(ops, prepared_at)

    def end_prepared(self, xid: str, location: int) -> None:
        old = self.prepared.pop(xid, None)
        if old is not None:
            self._kill(old[1], location)

    def checkpoint(
        self, next_seq: Iterable[tuple[str, int]], counts: Iterable[tuple[str, int, int]]
    ) -> None:
        for dest, seq in next_seq:
            if self.next_seq.get(dest, 0) < seq:
                self.next_seq[dest] = seq
        for queue, seq, count in counts:
            self.delivered(queue, seq, count)

    # -- reclaiming ------------------------------------------------------------------

    def checkpoint_record(self, kept: Iterable[int] | None = None) -> CheckpointRecord:
        """What deleted segments may have known that no live positive carries, and the
        segments a pass keeps (``kept``, as runs: see :mod:`chute.store.gaps`); the
        streams' first offsets with ``kept`` only (the layout holds them after it)."""
        return CheckpointRecord(
            tuple(self.next_seq.items()),
            tuple(
                (queue, seq, count)
                for queue, held in self.counts.items()
                for seq, count in held.items()
            ),
            None if kept is None else runs(kept),
            tuple(self.firsts.items()) if kept is not None else (),
        )

    def forget(self, segment: int) -> None:
        """``segment`` was deleted."""
        self.live.pop(segment, None)
        self.written.pop(segment, None)
        self.deps.pop(segment, None)
        for deps in self.deps.values():
            deps.discard(segment)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    delete: tuple[int, ...]  # ascending: the order to unlink in
    compact: tuple[int, ...]  # the segments in ``delete`` whose live content must move first


def plan(
    segments: Iterable[int],
    current: int,
    live: Mapping[int, int],
    written: Mapping[int, int],
    deps: Mapping[int, Set[int]],
    *,
    compact_ratio: float = 0.1,
    max_moves: int = 4096,
    settle: int = 0,
) -> Plan:
    """The segments that may go now, by the rule in the module docstring.

    ``current`` (the segment being written) and anything after it never go.
    A segment qualifies for compaction when its live positives are at most
    ``compact_ratio`` of those written in it and at least ``settle`` segments
    were closed after it; at most ``max_moves`` positives are moved in one
    pass, oldest segments first.

    ``settle`` spares the segments just closed: what is live in them is
    usually what consumers are working through right now, acked moments
    later, so copying it forward is wasted reading and writing (the journal
    uses 1: a segment is compacted one roll-over later, if still pinned).
    """
    present = set(segments)
    going: set[int] = set()
    moves = 0
    for segment in sorted(present):
        if segment >= current:
            break
        alive = live.get(segment, 0)
        if alive <= 0:
            going.add(segment)
        elif (
            segment < current - settle
            and alive <= compact_ratio * written.get(segment, 0)
            and moves + alive <= max_moves
        ):
            going.add(segment)
            moves += alive
    changed = True
    while changed:  # rule 2, to a fixpoint: a segment kept can keep others
        changed = False
        for segment in sorted(going):
            if any(d != segment and d in present and d not in going for d in deps.get(segment, ())):
                going.discard(segment)
                changed = True
    delete = tuple(sorted(going))
    return Plan(delete, tuple(s for s in delete if live.get(s, 0) > 0))


def holds_live_messages(index: LiveIndex, segment: int) -> bool:
    """Whether ``segment`` holds live adds, besides definitions and prepared transactions
    (which the index knows in full: moving only those needs no read of the segment)."""
    known = sum(
        1 for _, location in index.definitions.values() if location >> SEGMENT_SHIFT == segment
    )
    known += sum(
        1 for _, location in index.prepared.values() if location >> SEGMENT_SHIFT == segment
    )
    return index.live.get(segment, 0) > known


def compaction_records(index: LiveIndex, segment: int, data: bytes | None) -> list[Record]:
    """Records that copy the live content of ``segment`` (its bytes are ``data``) forward.

    Applied to the index at their new location, they cancel every live
    positive in ``segment``. A compacted add keeps its store delivery count;
    a message in several queues with different counts gets one add per count.
    ``data`` may be None when :func:`holds_live_messages` says the segment holds
    no live message (a queue definition pinning an old segment is the usual case).
    """
    out: list[Record] = [
        DefineRecord(definition)
        for definition, location in index.definitions.values()
        if location >> SEGMENT_SHIFT == segment
    ]
    if data is None:
        return out + _prepares_in(index, segment)
    names = Names()
    base = segment << SEGMENT_SHIFT
    locations = index.locations
    for offset, kind, start, end in Scan(data, segment, SEGMENT_HEADER_SIZE):
        location = base | offset
        if kind == Kind.ADD:
            seq, queues = add_keys(data, start, names)
            if any(_location(locations, q, seq) == location for q in queues):
                op, _ = decode_add(data, start, end, names)
                out += _moved(index, op, location)
        elif kind in (Kind.COMMIT, Kind.COMMIT_PREPARED, Kind.PREPARE):
            if not any(
                _location(locations, q, seq) == location
                for seq, queues, _, _, _ in op_add_keys(kind, data, start, end, names)
                for q in queues
            ):
                continue  # nothing in it is live: skip decoding its messages
            record = decode(kind, data, start, end, names)
            if isinstance(record, CommitRecord | CommitPreparedRecord | PrepareRecord):
                for tx_op in record.ops:  # a PREPARE's once committed in place
                    if isinstance(tx_op, AddOp):
                        out += _moved(index, tx_op, location)
    return out + _prepares_in(index, segment)


def _prepares_in(index: LiveIndex, segment: int) -> list[Record]:
    return [
        PrepareRecord(xid, ops)
        for xid, (ops, location) in index.prepared.items()
        if location >> SEGMENT_SHIFT == segment
    ]


def _moved(index: LiveIndex, op: AddOp, location: int) -> list[Record]:
    by_count: dict[int, list[str]] = {}
    for queue in op.queues:
        if _location(index.locations, queue, op.seq) == location:
            count = index.counts.get(queue, {}).get(op.seq, 0)
            by_count.setdefault(count, []).append(queue)
    return [
        AddRecord(AddOp(op.destination, tuple(queues), op.seq, op.message), count)
        for count, queues in by_count.items()
    ]


def _location(locations: Mapping[str, SeqMap], queue: str, seq: int) -> int | None:
    held = locations.get(queue)
    return None if held is None else held.get(seq)
