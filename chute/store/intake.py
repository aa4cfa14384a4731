"""What callers hand the journal's writer thread: records, acks, marks, syncs, requests.

An :class:`Intake` is a few lists under one lock: appending costs no system
call and never wakes the writer thread (:mod:`chute.store.writer` polls it).
Records wait in order. Acks and delivery marks are gathered per queue and
become one ACKS or MARKS record each (:func:`gathered_items`), written where
they can do no harm: before an add that may be of the same message, before
any record of another kind, else after everything taken with them
(``docs/durability.md``, "Records that cost less than one per message").

Thread-safety: shared by any number of caller threads and the writer; every
field is read and written under ``lock`` (which ``cond`` wraps).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Final

from chute.core.model.store import AckOp, SyncCallback
from chute.store.errors import JournalClosed
from chute.store.record import Kind
from chute.store.records import (
    AckRecord,
    AcksRecord,
    AddRecord,
    DeliveredRecord,
    MarksRecord,
    Record,
    encode,
)

WAKE_BYTES: Final = 1 << 20  # buffered bytes that wake the writer at once

Item = tuple[Kind, bytes, Record]
Acks = dict[str, list[int]]  # queue -> seqs
Marks = dict[str, tuple[list[int], list[int]]]  # queue -> (seqs, counts)


@dataclasses.dataclass(frozen=True, slots=True)
class ReclaimResult:
    deleted: tuple[int, ...] = ()  # segment numbers
    moved: int = 0  # records compaction copied forward


Request = Callable[[ReclaimResult | BaseException], None]


class Intake:
    """What callers hand the writer: records, acks and delivery marks, sync callbacks,
    reclaim requests.

    Records wait in ``pending`` in the order they came. Acks and delivery marks
    are gathered per queue instead (``acks``, ``marks``), one record per queue
    (:func:`gathered_items`): a consumer's batch of acks costs one frame, one
    CRC and one index update rather than one each. They are written before an
    add to their queue that may be of the same message and before any record of
    another kind (see :meth:`add`, :meth:`append`), else after everything taken
    with them: writing an ack
    later than it came only delays what it cancels, and a mark written after
    its add is what recovery expects.

    Shared by the callers and the writer; every field is read and written
    under ``cond`` (methods here take it; the writer takes it itself).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.lock = threading.Lock()  # what the hot appends take (cheaper than ``cond``'s)
        self.cond = threading.Condition(self.lock)
        self.pending: list[Item] = []
        self.acks: Acks = {}
        self.marks: Marks = {}
        self._tops: dict[str, int] = {}  # queue -> the highest seq in its acks and marks
        self.pending_bytes = 0
        self.callbacks: list[SyncCallback] = []
        self.requests: list[Request] = []
        self.closing = False

    @property
    def has_records(self) -> bool:
        """Anything to write (``cond`` held)."""
        return bool(self.pending or self.acks or self.marks)

    def append(self, kind: Kind, payload: bytes, record: Record) -> None:
        """Hand over one record (not an add: see :meth:`add`). Raises JournalClosed once
        closing.

        Every ack and mark gathered so far goes before it: a commit may ack a
        message and add it again, whose count must not inherit an older mark.
        """
        with self.lock:
            self._check_open()
            if self.acks or self.marks:
                self._gathered_first(None)
            self.pending.append((kind, payload, record))
            self._arrived(len(payload))

    def add(self, payload: bytes, record: AddRecord) -> None:
        """Hand over an ADD record. Raises JournalClosed once closing.

        Acks and marks gathered for one of its queues go before it if they may be
        about its very message (a seq not above the highest gathered there): an
        ack written after an add of the same message again would cancel it. A new
        message's seq is above them all, so the common add never waits for this.
        """
        with self.lock:
            self._check_open()
            if self._tops:
                seq = record.op.seq
                tops = self._tops
                if any(seq <= tops.get(queue, -1) for queue in record.op.queues):
                    self._gathered_first(record.op.queues)
            self.pending.append((Kind.ADD, payload, record))
            self._arrived(len(payload))

    def ack(self, queue: str, seq: int) -> None:
        """Hand over an ack of message ``seq`` of ``queue``. Raises JournalClosed once closing."""
        with self.lock:
            self._check_open()
            seqs = self.acks.get(queue)
            if seqs is None:
                self.acks[queue] = [seq]
            else:
                seqs.append(seq)
            self._gathered(queue, seq, 8)

    def acks_many(self, queue: str, seqs: Sequence[int]) -> None:
        """:meth:`ack` of each of ``seqs``, under one lock."""
        if not seqs:
            return
        with self.lock:
            self._check_open()
            gathered = self.acks.get(queue)
            if gathered is None:
                self.acks[queue] = list(seqs)
            else:
                gathered.extend(seqs)
            self._gathered(queue, max(seqs), 8 * len(seqs))

    def marks_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        """:meth:`mark` of each of ``seqs`` (``counts[i]`` each), under one lock."""
        if not seqs:
            return
        if len(counts) != len(seqs):
            raise ValueError(f"{len(seqs)} delivery marks but {len(counts)} counts")
        with self.lock:
            self._check_open()
            marks = self.marks.get(queue)
            if marks is None:
                self.marks[queue] = (list(seqs), list(counts))
            else:
                marks[0].extend(seqs)
                marks[1].extend(counts)
            self._gathered(queue, max(seqs), 12 * len(seqs))

    def mark(self, queue: str, seq: int, count: int) -> None:
        """Hand over a delivery mark. Raises JournalClosed once closing."""
        with self.lock:
            self._check_open()
            marks = self.marks.get(queue)
            if marks is None:
                self.marks[queue] = ([seq], [count])
            else:
                marks[0].append(seq)
                marks[1].append(count)
            self._gathered(queue, seq, 12)

    def _gathered_first(self, queues: tuple[str, ...] | None) -> None:
        if queues is None:
            acks, self.acks = self.acks, {}
            marks, self.marks = self.marks, {}
            self._tops.clear()
        else:
            acks = {q: seqs for q in queues if (seqs := self.acks.pop(q, None)) is not None}
            marks = {q: got for q in queues if (got := self.marks.pop(q, None)) is not None}
            for queue in queues:
                self._tops.pop(queue, None)
        self.pending += gathered_items(acks, marks)

    def _check_open(self) -> None:
        """(Lock held.) Raises JournalClosed once closing."""
        if self.closing:
            raise JournalClosed(f"journal {self.directory} is closed")

    def _gathered(self, queue: str, top: int, size: int) -> None:
        """(Lock held.) Account for acks or marks of ``queue`` up to seq ``top``."""
        tops = self._tops
        if top > tops.get(queue, -1):
            tops[queue] = top
        self._arrived(size)

    def _arrived(self, size: int) -> None:
        self.pending_bytes += size
        if self.pending_bytes >= WAKE_BYTES:
            self.cond.notify()

    def take(
        self,
    ) -> tuple[list[Item], dict[str, list[int]], dict[str, tuple[list[int], list[int]]]]:
        """Everything to write, emptied out (``cond`` held): records, then acks and marks."""
        batch, self.pending = self.pending, []
        acks, self.acks = self.acks, {}
        marks, self.marks = self.marks, {}
        self._tops.clear()
        self.pending_bytes = 0
        return batch, acks, marks

    def sync(self, callback: SyncCallback) -> bool:
        """Hand over a sync callback and wake the writer; False once closing."""
        with self.cond:
            if self.closing:
                return False
            self.callbacks.append(callback)
            self.cond.notify()
            return True

    def request(self, request: Request) -> bool:
        """Ask for a reclaim pass; False once closing."""
        with self.cond:
            if self.closing:
                return False
            self.requests.append(request)
            self.cond.notify()
            return True

    def close(self) -> bool:
        """Tell the writer to finish; True if it had been told already."""
        with self.cond:
            already = self.closing
            self.closing = True
            self.cond.notify()
            return already


_GATHERED_MAX: Final = 8192  # acks or marks in one ACKS or MARKS record


def gathered_items(acks: Acks, marks: Marks) -> list[Item]:
    """The records for gathered delivery marks and acks: per queue, DELIVERED or MARKS,
    then ACK or ACKS (at most ``_GATHERED_MAX`` in one); a message's mark came before
    its ack."""
    items: list[Item] = []
    record: Record
    for queue, (seqs, counts) in marks.items():
        for i in range(0, len(seqs), _GATHERED_MAX):
            chunk = seqs[i : i + _GATHERED_MAX]
            if len(chunk) == 1:
                record = DeliveredRecord(queue, chunk[0], counts[i])
            else:
                record = MarksRecord(queue, tuple(chunk), tuple(counts[i : i + _GATHERED_MAX]))
            items.append(_encoded(record))
    for queue, seqs in acks.items():
        for i in range(0, len(seqs), _GATHERED_MAX):
            chunk = seqs[i : i + _GATHERED_MAX]
            if len(chunk) == 1:
                record = AckRecord(AckOp(queue, chunk[0]))
            else:
                record = AcksRecord(queue, tuple(chunk))
            items.append(_encoded(record))
    return items


def _encoded(record: Record) -> Item:
    kind, payload = encode(record)  # a queue name that held an add always encodes
    return kind, payload, record
