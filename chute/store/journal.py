"""The on-disk journal: the :class:`~chute.core.model.store.Store` that survives ``kill -9``.

Theory of operation
-------------------
The caller (the broker's event loop) never touches the disk. ``add``,
``ack`` and the other record methods encode the record's payload
(:mod:`chute.store.records`; an add's is :mod:`chute.store.payload`'s) and
hand it to the writer's intake, a list under a short lock: no system call, a
couple of microseconds.
``sync(callback)`` hands over the callback and wakes the writer.

One writer thread (:mod:`chute.store.writer`) does all the I/O: it takes
everything handed over, writes it with one ``pwrite``, makes it durable with
one ``fdatasync`` for all of it (group commit), then calls every callback it
took, from the writer thread. A callback fires only after the sync that
covers every record appended before it.

``sync`` modes (:class:`SyncMode`):

* ``always`` (default): a callback fires after the fdatasync that covers it.
* ``batch``: at most one fdatasync per ``batch_ms``; callbacks wait for it.
  Fewer syncs under light load, each producer waits up to ``batch_ms`` more.
* ``never``: callbacks fire once the records are written to the operating
  system, with no fdatasync. A crash of the broker process loses nothing; a
  power loss or kernel crash loses what the OS had not yet written. Unsafe
  for data you cannot afford to lose.

Records appended without a sync are written within a few ms (``flush_ms``,
default 2), so the buffer stays small.

Disk faults: when a write, a sync or a new segment fails, every callback
waiting gets a :class:`~chute.store.errors.DiskFull` or
:class:`~chute.store.errors.DiskFailure`. The messages, transactions and
acks those callbacks cover are refused, not stored: ``on_unstored`` hears
of them first, so that the broker takes the messages out of their queues
(:mod:`chute.store.unsynced`). The other records stay buffered and the
writer retries with back-off, so the journal recovers by itself once the
disk works again. A callback never gets ``None`` for a record that was not
made durable. Only a crash in the middle of a failure may leave a refused
record on disk (it was written, its sync failed, and the machine stopped
before the writer overwrote it): the journal is at-least-once, never
at-most-once.

Free space (:mod:`chute.store.space`): a journal does not open on a disk
that cannot hold one more segment, and while its disk has less free than
``disk_free_limit`` it says so (:meth:`Journal.space_low`) so that the core
refuses new messages while consumers ack into the space left.

Segments and reclaiming: records go to the newest segment
(:mod:`chute.store.segment`); old segments are deleted once nothing in them
is live, and sparse ones are compacted first (:mod:`chute.store.segments`,
by the rule of :mod:`chute.store.reclaim`).

On open, recovery (:mod:`chute.store.recovery`) replays every segment; its
report is ``journal.report``, for the caller to log. Writing resumes in a new
segment; old segments are never appended to again.

Thread-safety: the record methods and ``sync`` may be called from any
thread (records from one thread keep their order; the core calls from its
loop only). Callbacks run on the writer thread and must not block it for
long. ``recover``, ``flush``, ``reclaim`` and ``close`` block until the
writer has done what they ask. A directory is locked (``flock``) against a
second journal, in this process or another.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Sequence
from typing import Final

from chute.core.model.store import (
    AckOp,
    AddOp,
    QueueDefinition,
    Recovered,
    StoredBlock,
    StoredMessage,
    SyncCallback,
    TxOp,
)
from chute.errors import StoreError
from chute.store.disk import Disk
from chute.store.errors import JournalClosed
from chute.store.intake import Intake, ReclaimResult
from chute.store.pager import BlockLayouts, TxLayouts, read_blocks, read_paged
from chute.store.payload import ENCODE_ERRORS, encode_add
from chute.store.progress import RecoveryProgress
from chute.store.reclaim import LiveIndex
from chute.store.records import (
    AddRecord,
    CommitInPlaceRecord,
    CommitRecord,
    DefineRecord,
    FirstRecord,
    PrepareRecord,
    Record,
    RollbackPreparedRecord,
    SentRecord,
    UndefineRecord,
    encode,
)
from chute.store.recovery import recover_lazily
from chute.store.segment import list_segments, remove_spares
from chute.store.segments import Segments, reclaim_at_open
from chute.store.space import FreeSpace, check_room_to_open
from chute.store.syncstats import SyncSnapshot
from chute.store.tap import Tap
from chute.store.writer import SyncMode, Writer

__all__ = ["DEFAULT_SEGMENT_SIZE", "Journal", "ReclaimResult", "SyncMode"]

DEFAULT_SEGMENT_SIZE: Final = 32 << 20


class Journal:
    """Append-only segment files behind the Store interface. See the module docstring.

    Settings: ``segment_size`` (bytes), ``sync`` (:class:`SyncMode`),
    ``batch_ms`` (the ``batch`` mode's sync interval), ``flush_ms`` (how long
    records wait to be written with no sync asked for), ``preallocate``
    (pre-zeroed spare segments), ``compact_ratio`` and ``max_compact_moves``
    (see :func:`chute.store.reclaim.plan`), ``auto_reclaim`` (a pass after
    each roll-over; tests turn it off to drive :meth:`reclaim` themselves),
    ``disk_free_limit`` (bytes; under it :meth:`space_low` says so; 0: off),
    ``disk`` (the I/O seam, :mod:`chute.store.disk`), ``progress`` (kept up to
    date while the open replays the segments, for another thread to watch:
    :mod:`chute.store.progress`).

    Raises (constructor):
        StoreError: another journal holds the directory; DiskFull: the disk
            cannot hold one more segment (the message says what to do).
        OSError: the directory cannot be created or listed.
        ValueError: a setting is out of range.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        sync: SyncMode | str = SyncMode.ALWAYS,
        batch_ms: float = 10.0,
        flush_ms: float = 2.0,
        preallocate: bool = True,
        compact_ratio: float = 0.1,
        max_compact_moves: int = 4096,
        auto_reclaim: bool = True,
        disk_free_limit: int = 0,
        disk: Disk | None = None,
        progress: RecoveryProgress | None = None,
    ) -> None:
        mode = _check_settings(segment_size, sync, batch_ms, flush_ms)
        if disk_free_limit < 0:
            raise ValueError("disk_free_limit must be 0 (off) or positive")
        self.directory = os.fspath(directory)
        disk = disk or Disk()
        os.makedirs(self.directory, exist_ok=True)
        self._lock_fd = _lock_directory(self.directory)
        try:
            remove_spares(self.directory)
            index = LiveIndex()
            recovered, self.report = recover_lazily(
                self.directory, disk=disk, index=index, progress=progress
            )
            segments = list_segments(self.directory)
            if auto_reclaim:  # what holds nothing live must not count against the room
                segments = reclaim_at_open(self.directory, index, segments, disk)
            free = check_room_to_open(self.directory, disk, segment_size, preallocate=preallocate)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._disk = disk
        self._recovered: Recovered | None = recovered
        self._changed = False  # anything but a definition appended since the open
        self._prepared: set[str] = set(index.prepared)  # the xids waiting for an end
        self._intake = Intake(self.directory)
        self._layouts = TxLayouts()  # guarded by the writer's index lock, like the index
        self._block_layouts = BlockLayouts()  # the same
        self._segments = Segments(
            self.directory,
            index,
            segments,
            disk=disk,
            segment_size=segment_size,
            preallocate=preallocate,
            compact_ratio=compact_ratio,
            max_moves=max_compact_moves,
        )
        self._writer = Writer(
            self.directory,
            self._intake,
            index,
            self._segments,
            disk=disk,
            mode=mode,
            segment_size=segment_size,
            batch=batch_ms / 1000,
            flush=flush_ms / 1000,
            auto_reclaim=auto_reclaim,
            space=FreeSpace(
                self.directory,
                disk,
                disk_free_limit,
                free,
                ahead=self._segments.ahead,
            ),
        )
        self._writer.thread.start()
        for queue, seqs in self.report.redelivered.items():  # so that the next start knows
            self._intake.marks_many(queue, seqs, [1] * len(seqs))

    @property
    def mode(self) -> SyncMode:
        return self._writer.mode

    # -- the Store interface (caller side) ------------------------------------------

    def define(self, definition: QueueDefinition) -> None:
        self._append_record(DefineRecord(definition))
        recovered = self._recovered
        if recovered is not None:  # still what recover() returns: keep it in step
            recovered.definitions = [
                d for d in recovered.definitions if d.name != definition.name
            ] + [definition]

    def undefine(self, name: str) -> None:
        self._append_record(UndefineRecord(name))

    def add(self, op: AddOp) -> None:
        """Buffer an add.

        Raises:
            StoreError: the message cannot be journaled (a field or name too long).
            JournalClosed: the journal is closed.
        """
        try:
            payload = encode_add(op)
        except ENCODE_ERRORS as exc:
            raise StoreError(f"message {op.message.id!r} cannot be journaled: {exc}") from exc
        self._changed = True
        self._intake.add(payload, AddRecord(op))

    def ack(self, op: AckOp) -> None:
        """Buffer an ack; the writer gathers a queue's acks into one record."""
        self._changed = True
        self._intake.ack(op.queue, op.seq)

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        """Buffer the acks of a cumulative ack (one call, one gathered record)."""
        self._changed = True
        self._intake.acks_many(queue, seqs)

    def delivered(self, queue: str, seq: int, delivery_count: int) -> None:
        """Buffer a delivery mark; the writer gathers a queue's marks into one record."""
        self._changed = True
        self._intake.mark(queue, seq, delivery_count)

    def delivered_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        self._changed = True
        self._intake.marks_many(queue, seqs, counts)

    def sent(self, producer: str, message_id: str) -> None:
        self._append_record(SentRecord(producer, message_id))

    def stream_first(self, stream: str, first: int) -> None:
        """A FIRST record: gathered acks before it, those handed over after it behind it."""
        self._append_record(FirstRecord(stream, first))

    def commit(self, ops: Sequence[TxOp]) -> None:
        """One record for all of ``ops``: after a crash, all of them or none."""
        if len(ops) == 1:
            op = ops[0]
            if isinstance(op, AddOp):
                self.add(op)
            else:
                self.ack(op)
        elif ops:
            self._append_record(CommitRecord(tuple(ops)))

    def prepare(self, xid: str, ops: Sequence[TxOp]) -> None:
        self._append_record(PrepareRecord(xid, tuple(ops)))
        self._prepared.add(xid)

    def commit_prepared(self, xid: str) -> None:
        """A COMMIT_IN_PLACE record, the xid alone: the messages stay in the PREPARE
        record, written once (:mod:`chute.store.records`)."""
        if xid in self._prepared:
            self._prepared.discard(xid)
            self._append_record(CommitInPlaceRecord(xid))

    def rollback_prepared(self, xid: str) -> None:
        if xid in self._prepared:
            self._prepared.discard(xid)
            self._append_record(RollbackPreparedRecord(xid))

    def sync(self, callback: SyncCallback) -> None:
        if not self._intake.sync(callback):
            callback(JournalClosed(f"journal {self.directory} is closed"))

    @property
    def on_unstored(self) -> Callable[[list[TxOp]], None] | None:
        """Told what a failed write or sync refused (see :mod:`chute.store.unsynced`): the
        adds, commits' operations and acks whose senders get an error, so that the broker
        takes those messages out of their queues. Called on the writer's thread (or the
        caller's of :meth:`sync_inline`), before any sync callback gets that error."""
        return self._writer.on_refused

    @on_unstored.setter
    def on_unstored(self, hook: Callable[[list[TxOp]], None] | None) -> None:
        self._writer.on_refused = hook

    def space_low(self) -> str | None:
        """None while the disk has ``disk_free_limit`` free; else why producers must wait.

        Reads what the writer thread last saw (it looks after every MiB written
        and every 100 ms): no system call, fit for every send; if that look is
        older than 100 ms (the writer is held up), it looks itself.
        """
        return self._writer.space.current()

    def backlog(self) -> int:
        """Bytes appended that the writer thread has not written yet."""
        return self._intake.pending_bytes

    def syncs_off_loop(self, seconds: float) -> None:
        self._writer.no_inline_for(seconds)

    def reading_waits(self) -> bool:
        """Whether the writer holds its index now (a reclaim pass holds it throughout:
        a paging read would wait for the whole pass)."""
        lock = self._writer.index_lock
        if not lock.acquire(blocking=False):
            return True
        lock.release()
        return False

    def recover(self) -> Recovered:
        """What is durable: what the open replayed, until something but a queue definition
        is appended (a broker defines its system queues before it recovers).

        After that (or on a second call) it flushes everything buffered and
        reads the segments again.

        Raises:
            StoreError: the flush failed (the disk) or timed out.
        """
        recovered, self._recovered = self._recovered, None
        if recovered is not None and not self._changed:
            recovered.report = str(self.report)
            recovered.clean = self.report.clean
            return recovered
        del recovered
        self.flush()
        with self._segments.lock:
            recovered, _ = recover_lazily(
                self.directory, index=LiveIndex(), disk=self._disk, cut=False
            )
        return recovered

    def replicate(self, tap: Tap | None) -> None:
        """Tell ``tap`` every write, segment deletion and sync from now on
        (:mod:`chute.store.tap`); None stops it."""
        self._writer.replicate(tap)

    def at_rest(self, start: Callable[[list[int], int, int], None]) -> None:
        """``start(segments, segment, offset)`` with no write under way: the segment files
        and how far the current one is written. What is written after it returns goes
        to the tap; what is before is in those files (a replica copies it from them)."""
        with self._writer.cycle_lock:
            start(self._segments.numbers(), *self._writer.position())

    def sync_inline(self, callbacks: list[SyncCallback]) -> bool:
        """Make everything appended durable and call ``callbacks`` on this thread, now, if
        the writer is idle (``always`` mode); False if not (then use :meth:`sync`).

        For a caller that gathered its sync requests (the broker's loop, once per
        iteration): a lone producer then waits for one fsync and no thread hand-off.
        """
        return self._writer.run_inline(callbacks)

    def page_in(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        """Read paged messages back (see :mod:`chute.store.pager`).

        Records still buffered are written first when the index has fewer
        than ``limit`` (a paging queue asks for exactly as many as it paged).

        Raises:
            StoreError: the records could not be written or read (a disk fault).
        """
        found = self._read_paged(queue, after, limit)
        if len(found) < limit:
            self.flush()
            found = self._read_paged(queue, after, limit)
        return found

    def _read_paged(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        writer = self._writer
        try:
            with writer.index_lock, self._segments.lock:
                return read_paged(self.directory, writer.index, queue, after, limit, self._layouts)
        except OSError as exc:
            raise StoreError(
                f"journal {self.directory}: cannot read paged messages: {exc}"
            ) from exc

    def page_blocks(self, queue: str, after: int, limit: int) -> list[StoredBlock]:
        """:meth:`page_in`'s messages as their stored content blocks (see
        :func:`chute.store.pager.read_blocks`).

        Raises:
            StoreError: the records could not be written or read (a disk fault).
        """
        found = self._read_blocks(queue, after, limit)
        if len(found) < limit:
            self.flush()
            found = self._read_blocks(queue, after, limit)
        return found

    def _read_blocks(self, queue: str, after: int, limit: int) -> list[StoredBlock]:
        writer = self._writer
        try:
            with writer.index_lock, self._segments.lock:
                return read_blocks(
                    self.directory, writer.index, queue, after, limit, self._block_layouts
                )
        except OSError as exc:
            raise StoreError(
                f"journal {self.directory}: cannot read paged messages: {exc}"
            ) from exc

    def sealed(self, destination: str) -> int:
        """Below this number every message of ``destination`` lies in a segment before the
        one being written (recovered segments included). Any thread, never blocking."""
        return self._writer.sealed.get(destination, 0)

    def close(self) -> None:
        """Write and sync everything buffered, stop the writer, release the directory.

        Idempotent. If the disk keeps failing, buffered records are given up
        after a few attempts (their callbacks get the error, it is logged).
        """
        already = self._intake.close()
        self._writer.thread.join()
        if already:
            return
        self._writer.release()
        os.close(self._lock_fd)

    # -- beyond the Store interface --------------------------------------------------

    def flush(self, timeout: float = 60.0) -> None:
        """Block until everything appended so far is durable (as the sync mode defines it).

        Raises:
            StoreError: it could not be made durable, or not within ``timeout``.
        """
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def finished(error: BaseException | None) -> None:
            outcome.append(error)
            done.set()

        self.sync(finished)
        if not done.wait(timeout):
            raise StoreError(f"journal {self.directory}: flush timed out after {timeout} s")
        if outcome[0] is not None:
            raise outcome[0]

    def reclaim(self, timeout: float = 60.0) -> ReclaimResult:
        """Run a reclaim pass now (the writer also runs one after each roll-over).

        Raises:
            StoreError: the pass failed or did not finish within ``timeout``.
        """
        done = threading.Event()
        outcome: list[ReclaimResult | BaseException] = []

        def finished(result: ReclaimResult | BaseException) -> None:
            outcome.append(result)
            done.set()

        if not self._intake.request(finished):
            raise JournalClosed(f"journal {self.directory} is closed")
        if not done.wait(timeout):
            raise StoreError(f"journal {self.directory}: reclaim timed out after {timeout} s")
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    @property
    def records_moved(self) -> int:
        """Live records compaction copied forward since the journal opened, by every
        reclaim pass (the writer's own after roll-overs, and :meth:`reclaim`)."""
        return self._segments.records_moved

    def segments(self) -> list[int]:
        """The numbers of the segment files, oldest first (a snapshot)."""
        return self._segments.numbers()

    def sync_stats(self) -> SyncSnapshot:
        """The fsyncs since the open: latency and records each (any thread;
        :mod:`chute.store.syncstats`)."""
        return self._writer.sync_stats.snapshot()

    @property
    def bytes_written(self) -> int:
        """Bytes written into segments since the open (records, compaction, padding)."""
        return self._writer.bytes_written

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Journal({self.directory!r}, sync={self.mode.value}, "
            f"segments={len(self._segments.numbers())})"
        )

    # -- caller-side helpers ---------------------------------------------------------

    def _append_record(self, record: Record) -> bytes:
        """Append ``record``; its payload."""
        if type(record) is not DefineRecord:
            self._changed = True
        try:
            kind, payload = encode(record)
        except ENCODE_ERRORS as exc:
            raise StoreError(f"record cannot be journaled: {exc}") from exc
        self._intake.append(kind, payload, record)
        return payload


def _check_settings(
    segment_size: int, sync: SyncMode | str, batch_ms: float, flush_ms: float
) -> SyncMode:
    if segment_size < 4096:
        raise ValueError("segment_size must be at least 4096 bytes")
    if batch_ms <= 0 or flush_ms <= 0:
        raise ValueError("batch_ms and flush_ms must be positive")
    try:
        return SyncMode(sync)
    except ValueError:
        modes = ", ".join(m.value for m in SyncMode)
        raise ValueError(f"sync must be one of {modes}, not {sync!r}") from None


def _lock_directory(directory: str) -> int:
    fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StoreError(
            f"journal {directory} is in use by another broker (cannot lock it: {exc.strerror})"
        ) from exc
    return fd
