"""Recovery: replay a journal directory's segments into what the core gets back.

Every segment is read whole (one large sequential read), scanned for frames
(:class:`~chute.store.record.Scan`) and each record replayed, in segment
then offset order. Two replays share that walk:

* :func:`recover_lazily`, what the journal opens with: records go into the
  writer's :class:`~chute.store.reclaim.LiveIndex` only, an ADD by its keys
  without decoding its message; then each queue's first window is read back
  (:mod:`chute.store.pager`) and the rest reported as paged, so a restart
  costs the index, not the backlog;
* :func:`recover`, the reference: every record replayed into a
  :class:`~chute.store.memory.MemoryStore`, so what it returns is by
  construction what a MemoryStore given the same calls would hold. The tests
  hold the journal to it.

What can go wrong is reported, never raised (Kafka's ``LogSegment.recover``,
nats' ``LostStreamData``):

* a file under a segment's name that is not one (no header of its own and
  no record that checks, or a name no segment has) is set aside before
  anything is read (:mod:`chute.store.strays`);
* a torn tail (bytes that are not a record, nothing valid after them) is cut
  off: the file is truncated to the end of its last good record. In the
  newest segment with the file at its full length, that is a write a crash
  cut short. Anywhere else, or where the file ends inside a record (cut
  short: segments are made at full size), it is a loss, reported with the
  sequence numbers it took as a lost segment is (:mod:`chute.store.gaps`),
  and the messages recorded before it come back ``redelivered`` (an ack or a
  delivery of them may have been in what was lost; the journal records
  those delivery counts as it opens, so the next start knows them too);
* a corrupt region in the middle (bad marker, length or CRC with good
  records after it) is skipped, as is a record whose CRC is good but whose
  payload cannot be decoded; each is logged and counted;
* a segment that cannot be read at all is logged and counted as skipped.

The :class:`~chute.store.report.RecoveryReport` says how many records were
replayed, how many bytes were cut, how many records and bytes were skipped,
what was lost; the caller logs it.

Thread-safety: a recovery runs on the thread that calls it, on a directory
nobody writes to meanwhile (the journal recovers before its writer starts,
and flushes and pauses reclaiming before a re-read).
"""

from __future__ import annotations

import collections
import time
from typing import Final

from chute.core.model.store import AckOp, AddOp, Recovered, TxOp
from chute.message import Message
from chute.store.disk import Disk
from chute.store.errors import CorruptRecord
from chute.store.gaps import (
    flag_redelivered,
)
from chute.store.heads import AddHead, add_head, op_heads
from chute.store.memory import SENT_KEPT, MemoryStore
from chute.store.pager import TxLayouts, read_paged
from chute.store.payload import Names, decode_ack, decode_add
from chute.store.progress import Phase, RecoveryProgress
from chute.store.reclaim import SEGMENT_SHIFT, LiveIndex
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
from chute.store.report import RecoveryReport
from chute.store.segment import SEGMENT_HEADER_SIZE, header_problem
from chute.store.seqmap import SeqMap
from chute.store.walk import account_damage, walk_segments

# The message of an add replayed lazily: the index keeps only keys and locations.
UNREAD: Final = Message.create(b"", persistent=True)

_ADD, _ACK = int(Kind.ADD), int(Kind.ACK)
_COMMITS: Final = frozenset({int(Kind.COMMIT), int(Kind.COMMIT_PREPARED)})


def recover(
    directory: str,
    *,
    disk: Disk | None = None,
    index: LiveIndex | None = None,
    cut: bool = True,
) -> tuple[Recovered, RecoveryReport]:
    """Replay every segment of ``directory``; returns what is durable and the report.

    ``index``, if given, is filled with the liveness of every record replayed.
    Losses are reported as :func:`recover_lazily` reports them, but the messages
    recorded before one are not flagged redelivered here (that needs the locations
    :func:`recover_lazily`'s index keeps).
    ``cut`` truncates torn tails (through ``disk``); a re-read of a journal in
    use passes False and leaves the files alone.

    Raises:
        OSError: only if the directory itself cannot be listed.
    """
    report = RecoveryReport(directory)
    store = MemoryStore()
    names = Names()
    walk_segments(
        directory,
        disk or Disk(),
        report,
        lambda data, segment: _replay_segment(data, segment, store, index, names, report),
        cut=cut,
    )
    return store.recover(), report


def recover_lazily(
    directory: str,
    *,
    index: LiveIndex,
    disk: Disk | None = None,
    window_bytes: int = 1 << 20,
    cut: bool = True,
    progress: RecoveryProgress | None = None,
) -> tuple[Recovered, RecoveryReport]:
    """Replay ``directory`` into ``index`` without decoding the messages of ADD records, then
    read back only the first ``window_bytes`` of each queue; the rest is reported as paged.

    What the journal opens with: a backlog of millions costs its index (8 bytes a
    message) and one window per queue, not every message decoded at once. The
    queues read the rest back as consumers drain them (``Store.page_in``).
    ``Recovered.paged[queue]`` is (count, bytes) of what was left unread: the bytes as
    ``Message.size`` counts them, whatever record type brought the message (an add, a
    transaction's commit, a prepared transaction's), so a queue's byte bound holds
    across a restart.
    ``cut`` truncates torn tails; a re-read of a journal in use passes False.
    ``progress``, if given, is kept up to date once per segment (for another thread
    to read, :mod:`chute.store.progress`).

    Raises:
        OSError: only if the directory itself cannot be listed.
    """
    report = RecoveryReport(directory)
    started = time.perf_counter()
    names = Names()
    sizes: dict[str, SeqMap] = {}  # queue -> seq -> Message.size of each add replayed
    sent: collections.deque[tuple[str, str]] = collections.deque(maxlen=SENT_KEPT)

    def replay(data: bytes, segment: int) -> int:
        end = _index_segment(data, segment, index, names, sizes, report, sent)
        if progress is not None:  # once a segment: a sum over the queues, not the messages
            progress.messages = sum(map(len, index.locations.values()))
        return end

    walk_segments(directory, disk or Disk(), report, replay, cut=cut, progress=progress)
    if report.lost_before:
        report.redelivered, flagged = flag_redelivered(index, report.lost_before)
        if flagged:
            report.note(
                f"{flagged} messages recorded before what was lost come back flagged "
                "redelivered: an ack or a delivery of them may have been lost with it"
            )
    if progress is not None:
        progress.phase = Phase.READING
    recovered = Recovered(
        definitions=[definition for definition, _ in index.definitions.values()],
        prepared={xid: list(ops) for xid, (ops, _) in index.prepared.items()},
        next_seq=dict(index.next_seq),
        sent=list(sent),
        firsts=dict(index.firsts),
    )
    layouts = TxLayouts()
    for queue, held in index.locations.items():
        if not held:
            continue
        total = _live_bytes(held, sizes.get(queue))
        average = max(1, total // len(held))
        wanted = min(len(held), max(16, window_bytes // average))
        window = read_paged(directory, index, queue, 0, wanted, layouts)
        recovered.messages[queue] = window
        rest = len(held) - len(window)
        if rest > 0:
            read = sum(stored.message.size for stored in window)
            recovered.paged[queue] = (rest, max(0, total - read))
    report.seconds = time.perf_counter() - started
    return recovered, report


def _index_segment(  # noqa: PLR0917 - private
    data: bytes,
    segment: int,
    index: LiveIndex,
    names: Names,
    sizes: dict[str, SeqMap],
    report: RecoveryReport,
    sent: collections.deque[tuple[str, str]],
) -> int:
    """Replay one segment into ``index`` only, noting each add's size in ``sizes`` and each
    SENT record in ``sent``; returns where a torn tail starts."""
    problem = header_problem(data, segment)
    if problem is not None:
        if data.count(0) == len(data):
            report.blank.append(segment)
            return len(data)
        report.note(f"segment {segment}: {problem}; reading its records anyway")
    base = segment << SEGMENT_SHIFT
    scan = Scan(data, segment, SEGMENT_HEADER_SIZE)
    replayed = 0
    for offset, kind, start, end in scan:
        try:
            if kind == _ADD:
                head = add_head(data, start, end, names)
                replayed += 1
                if not head.persistent:  # a paged transient: gone with the process
                    continue
                index.add(
                    AddOp(head.destination, head.queues, head.seq, UNREAD),
                    head.stored_count,
                    base | offset,
                )
                for queue in head.queues:  # the common case inline: the next seq of a queue
                    known = sizes.get(queue)
                    if known is None or not known.append_next(head.seq, head.size):
                        _note_size(sizes, queue, head.seq, head.size)
                continue
            if kind == _ACK:
                ack = decode_ack(data, start, names)
                index.ack(ack, base | offset)
                known = sizes.get(ack.queue)
                if known:
                    known.pop(ack.seq)
            elif kind in _COMMITS:
                _index_commit(kind, data, start, end, names, index, base | offset, sizes)
            else:
                record = _without_transients(decode(kind, data, start, end, names))
                if type(record) is CommitInPlaceRecord:  # its PREPARE's adds, sized now
                    staged = index.prepared.get(record.xid)
                    index.apply(record, base | offset)
                    if staged is not None:
                        _sized(CommitRecord(staged[0]), sizes)
                    replayed += 1
                    continue
                index.apply(record, base | offset)
                if type(record) is CheckpointRecord:
                    report.checkpoint = (segment, record.kept)
                elif type(record) is SentRecord:
                    sent.append((record.producer, record.message_id))
                else:
                    _sized(record, sizes)
        except CorruptRecord as exc:
            report.skipped(segment, offset, end, exc)
            continue
        replayed += 1
    report.records += replayed
    return account_damage(scan, segment, data, report)


def _index_commit(  # noqa: PLR0917 - private
    kind: int,
    data: bytes,
    start: int,
    end: int,
    names: Names,
    index: LiveIndex,
    location: int,
    sizes: dict[str, SeqMap],
) -> None:
    """Replay a COMMIT or COMMIT_PREPARED record into ``index`` and ``sizes`` without
    decoding its messages (the index keeps only where each is)."""
    heads = op_heads(kind, data, start, end, names)
    ops: list[TxOp] = []
    for head in heads:
        if type(head) is AckOp:
            ops.append(head)
            known = sizes.get(head.queue)
            if known:
                known.pop(head.seq)
        elif isinstance(head, AddHead) and head.persistent:  # a paged transient: gone
            ops.append(AddOp(head.destination, head.queues, head.seq, UNREAD))
            for queue in head.queues:
                _note_size(sizes, queue, head.seq, head.size)
    if kind == Kind.COMMIT:
        index.commit(ops, location)
    else:
        index.apply(CommitPreparedRecord(names.read(data, start)[0], tuple(ops)), location)


def _sized(record: Record, sizes: dict[str, SeqMap]) -> None:
    """Keep ``sizes`` to the live messages after ``record`` (not an ADD or an ACK)."""
    match record:
        case AcksRecord(queue, seqs):
            known = sizes.get(queue)
            if known:
                for seq in seqs:
                    known.pop(seq)
        case CommitRecord(ops) | CommitPreparedRecord(_, ops):
            for op in ops:
                if isinstance(op, AddOp):
                    for queue in op.queues:
                        _note_size(sizes, queue, op.seq, op.message.size)
                elif (known := sizes.get(op.queue)) is not None:
                    known.pop(op.seq)
        case UndefineRecord(name):
            sizes.pop(name, None)


def _note_size(sizes: dict[str, SeqMap], queue: str, seq: int, size: int) -> None:
    known = sizes.get(queue)
    if known is None:
        known = sizes[queue] = SeqMap()
    if not known.append_next(seq, size):
        known[seq] = size


def _live_bytes(held: SeqMap, known: SeqMap | None) -> int:
    """The bytes of the live messages ``held`` (seq -> location), by the sizes noted; one
    not noted (nothing should be) counts as the average of those that were."""
    if known is not None and len(known) == len(held):  # acks took theirs out: the same
        return known.total()
    total = counted = 0
    if known is not None:
        for seq, _ in held.items():
            size = known.get(seq)
            if size is not None:
                total += size
                counted += 1
    missing = len(held) - counted
    if missing:
        total += missing * (total // counted if counted else 1024)
    return total


def _replay_segment(  # noqa: PLR0917 - private, called once
    data: bytes,
    segment: int,
    store: MemoryStore,
    index: LiveIndex | None,
    names: Names,
    report: RecoveryReport,
) -> int:
    """Replay one segment's records; returns where a torn tail starts (or ``len(data)``)."""
    problem = header_problem(data, segment)
    if problem is not None:
        if data.count(0) == len(data):
            report.blank.append(segment)  # made but never written, or emptied (chute.store.gaps)
            return len(data)
        report.note(f"segment {segment}: {problem}; reading its records anyway")
    base = segment << SEGMENT_SHIFT
    scan = Scan(data, segment, SEGMENT_HEADER_SIZE)
    replayed = 0
    add = store.add
    for offset, kind, start, end in scan:
        try:
            if kind == _ADD:
                op, count = decode_add(data, start, end, names)
                if not op.message.persistent:  # a paged transient: gone with the process
                    replayed += 1
                    continue
                add(op)
                if count:
                    for queue in op.queues:
                        store.delivered(queue, op.seq, count)
                if index is not None:
                    index.add(op, count, base | offset)
            elif kind == _ACK:
                ack: AckOp = decode_ack(data, start, names)
                store.ack(ack)
                if index is not None:
                    index.ack(ack, base | offset)
            else:
                record = _without_transients(decode(kind, data, start, end, names))
                if type(record) is CheckpointRecord:
                    report.checkpoint = (segment, record.kept)
                replay(store, record)
                if index is not None:
                    index.apply(record, base | offset)
        except CorruptRecord as exc:
            report.skipped(segment, offset, end, exc)
            continue
        replayed += 1
    report.records += replayed
    return account_damage(scan, segment, data, report)


def _without_transients(record: Record) -> Record:
    """``record`` without the non-persistent adds a paging queue recorded in it.

    A paged non-persistent message is in the journal only to be read back by
    the process that wrote it; after a restart it is gone, like every
    non-persistent message, and its record keeps nothing alive.
    """
    match record:
        case CommitRecord(ops):
            return CommitRecord(_persistent_ops(ops))
        case PrepareRecord(xid, ops):
            return PrepareRecord(xid, _persistent_ops(ops))
        case CommitPreparedRecord(xid, ops):
            return CommitPreparedRecord(xid, _persistent_ops(ops))
    return record


def _persistent_ops(ops: tuple[TxOp, ...]) -> tuple[TxOp, ...]:
    return tuple(op for op in ops if not isinstance(op, AddOp) or op.message.persistent)


def replay(store: MemoryStore, record: Record) -> None:
    """Apply one record to ``store`` as the calls that wrote it did."""
    match record:
        case AddRecord(op, count):
            store.add(op)
            if count:
                for queue in op.queues:
                    store.delivered(queue, op.seq, count)
        case AckRecord(op):
            store.ack(op)
        case AcksRecord(queue, seqs):
            for seq in seqs:
                store.ack(AckOp(queue, seq))
        case DeliveredRecord(queue, seq, count):
            store.delivered(queue, seq, count)
        case MarksRecord(queue, seqs, counts):
            for seq, count in zip(seqs, counts, strict=True):
                store.delivered(queue, seq, count)
        case DefineRecord(definition):
            store.define(definition)
        case UndefineRecord(name):
            store.undefine(name)
        case CommitRecord(ops):
            store.commit(ops)
        case PrepareRecord(xid, ops):
            store.prepare(xid, ops)
        case CommitPreparedRecord(xid, ops):
            store.prepare(xid, ops)  # the record carries the operations it commits
            store.commit_prepared(xid)
        case CommitInPlaceRecord(xid):
            store.commit_prepared(xid)  # its PREPARE's, replayed before it
        case RollbackPreparedRecord(xid):
            store.rollback_prepared(xid)
        case CheckpointRecord(next_seq, counts, _, firsts):
            for dest, seq in next_seq:
                store.next_seq[dest] = max(store.next_seq.get(dest, 0), seq)
            for queue, seq, count in counts:
                store.delivered(queue, seq, count)
            for stream, first in firsts:
                store.stream_first(stream, first)
        case FirstRecord(stream, first):
            store.stream_first(stream, first)
        case PadRecord():
            pass
        case SentRecord(producer, message_id):
            store.sent(producer, message_id)
