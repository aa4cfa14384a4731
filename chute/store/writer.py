"""The journal's writer thread: when to write and sync, group commit, disk faults, reclaim.

Callers hand records and sync callbacks to an
:class:`~chute.store.intake.Intake` (appending costs no system call). One
:class:`Writer` thread does all the journal's I/O. Each cycle it takes
everything in the intake, has its :class:`~chute.store.appender.Appender`
frame the records at their final place in the current segment and write
them with one ``pwrite``, makes them durable with one ``fdatasync`` for all
of them (group commit), and only then calls every callback it took, on its
own thread. A callback therefore fires only after the sync that covers every
record appended before it.

When it wakes: at once for a sync callback (in ``always`` and ``never``
modes), a reclaim request, a close, or more than 1 MiB buffered; otherwise
it lingers ``flush_ms`` after records arrive so that more join the same
write. Appends never wake it: while it is active it polls every
``flush_ms``; after ``_IDLE_AFTER`` seconds with nothing to do it polls
every ``_IDLE_POLL`` seconds. Records nobody waits for are therefore written
within 50 ms, and an append costs no thread wake-up (on the broker's loop, a
lone producer's add and inline sync never involve this thread at all, unless the
disk is slow: see :meth:`Writer.run_inline`).
``batch`` mode syncs at most once per ``batch_ms``; ``always`` mode also
syncs written records nobody waits for after 4 MiB or 0.5 s, so what must be
kept for a rewrite stays bounded.

Disk faults: when a write, a sync or a new segment fails, every callback
taken so far gets a :class:`~chute.store.errors.DiskFull` or
:class:`~chute.store.errors.DiskFailure`, after the records it covers that
its sender must then not find stored were refused (:mod:`chute.store.unsynced`).
The rest is written again before the next sync; retries back off
(:mod:`chute.store.failures`), and the writer carries on by itself.

A full segment is synced and closed, and a pre-zeroed spare becomes the next
one (the appender's work). After each roll-over the writer runs a reclaim pass: copy the live
records of sparse old segments forward, write a checkpoint, sync, then delete
oldest first. It runs one too once it wrote nothing for :data:`IDLE_RECLAIM`
seconds after writing (acks of a drained queue free its segments then, not at
a roll-over that may never come), and one as the journal closes. Both are
:mod:`chute.store.segments`' work, with the writer's own write and sync.

Free space: the writer looks at it (:mod:`chute.store.space`) as it goes.
Under ``disk_free_limit`` it runs reclaim passes without roll-overs, and new
messages leave the end of a segment to acks and delivery marks
(:mod:`chute.store.appender`).

Thread-safety: the intake is shared (see :mod:`chute.store.intake`), and so
are the segments' numbers and lock (:mod:`chute.store.segments`). Everything
else here belongs to whoever runs the cycle (the writer thread, or
:meth:`Writer.run_inline`'s caller, under ``cycle_lock``), except
``Writer.sync_stats`` (each fsync's latency and records,
:mod:`chute.store.syncstats`, which a metrics scrape reads) and
``Writer.bytes_written``.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from chute.core.model.store import AddOp, SyncCallback, TxOp
from chute.store.appender import Appender
from chute.store.disk import Disk
from chute.store.errors import JournalClosed, store_error
from chute.store.failures import Failures
from chute.store.intake import (
    WAKE_BYTES,
    Acks,
    Intake,
    Item,
    Marks,
    ReclaimResult,
    Request,
    gathered_items,
)
from chute.store.reclaim import LiveIndex
from chute.store.segments import Segments
from chute.store.space import FreeSpace
from chute.store.syncstats import SyncStats
from chute.store.tap import Tap
from chute.store.unsynced import refuse, refused_ops

log = logging.getLogger("chute.store.journal")

_UNSYNCED_BYTES: Final = 4 << 20  # ``always``: sync written records after this much ...
_UNSYNCED_AGE: Final = 0.5  # ... or this many seconds, even with no callback waiting
_IDLE_AFTER: Final = 0.2  # seconds without work before the writer polls only ...
_IDLE_POLL: Final = 0.05  # ... this often
_CLOSE_PAUSE: Final = 0.05  # closing on a failing disk: between the last attempts
_CLOSE_ATTEMPTS: Final = 3
IDLE_RECLAIM: Final = 1.0
"""Seconds without a write after something was written: then a reclaim pass runs (what
consumers acked since frees its segments without waiting for a roll-over)."""
INLINE_SLOW: Final = 0.1
"""An ``fdatasync`` run inline (on the caller's thread, the broker's loop) that took this
many seconds or more: the disk is slow now, so for :data:`INLINE_PAUSE` seconds every
sync goes to the writer thread, and the loop serves the other clients."""
INLINE_PAUSE: Final = 5.0


class SyncMode(enum.Enum):
    """When a sync callback fires (see :mod:`chute.store.journal`)."""

    ALWAYS = "always"
    BATCH = "batch"
    NEVER = "never"


class Writer:
    """The thread that has its :class:`Appender` write and sync, then calls back and reclaims."""

    def __init__(
        self,
        directory: str,
        intake: Intake,
        index: LiveIndex,
        segments: Segments,
        *,
        disk: Disk,
        mode: SyncMode,
        segment_size: int,
        batch: float,
        flush: float,
        auto_reclaim: bool,
        space: FreeSpace,
    ) -> None:
        self.directory = directory
        self.mode = mode
        # held while the index changes; taken before the segments' lock when both are needed
        self.index_lock = threading.RLock()
        # held by whoever runs a write/sync cycle: the writer thread, or run_inline's caller
        self.cycle_lock = threading.Lock()
        self._intake = intake
        self._index = index
        self._segments = segments
        self._batch = batch
        self._flush = flush
        self._auto_reclaim = auto_reclaim
        self.space = space
        self._appender = Appender(
            index,
            self.index_lock,
            segments,
            disk=disk,
            space=space,
            segment_size=segment_size,
            index_at_write=mode is SyncMode.NEVER,
            on_roll=self._rolled,
        )
        self._carry: list[Item] = []  # taken, not yet written
        self._taken = 0  # items ever carried: the ordinal of the next one
        self._covered = 0  # items numbered below this are covered by a waiting callback
        self._covering = False  # the last take brought callbacks
        self.on_refused: Callable[[list[TxOp]], None] | None = None
        """Told (on the thread that ran the cycle, before the callbacks get their error)
        what the records a failure refused held (:mod:`chute.store.unsynced`)."""
        self._waiting: list[SyncCallback] = []  # taken, to call after the next sync
        self.tap: Tap | None = None  # a replica: it calls the callbacks (chute.store.tap)
        self._inline_from = 0.0  # run_inline does nothing before this (monotonic)
        self._linger_until: float | None = None
        self._active_at = 0.0
        self._failures = Failures(directory)
        self._reclaim_due = False
        self._seen_written = 0  # bytes_written when last looked at (idle reclaiming) ...
        self._seen_at = time.monotonic()  # ... and when it last changed
        self._reclaimed_written = 0  # bytes_written after the last reclaim pass
        self.sealed: dict[str, int] = dict(index.next_seq)
        """Each destination's next sequence number when the current segment was begun:
        what is numbered below lies in segments that take no more writes (any thread may
        read it; replaced whole at each roll-over)."""
        self.thread = threading.Thread(target=self._run, name="chute-journal", daemon=True)

    def replicate(self, tap: Tap | None) -> None:
        """Tell ``tap`` every write, deletion and sync from now on (None: stop)."""
        with self.cycle_lock:
            self.tap = self._appender.tap = self._segments.tap = tap

    def position(self) -> tuple[int, int]:
        """(Under ``cycle_lock``.) The current segment and how far it is written."""
        current = self._appender.current
        return (0, 0) if current is None else (current.number, current.position)

    def release(self) -> None:
        """After the thread ended: close the current segment, stop making spares."""
        self._segments.close()
        self._appender.close()

    @property
    def bytes_written(self) -> int:
        """Bytes written into segments since the open (any thread may read it)."""
        return self._appender.bytes_written

    @property
    def sync_stats(self) -> SyncStats:
        """Each fsync's latency and records (any thread may read it)."""
        return self._appender.sync_stats

    # -- the loop --------------------------------------------------------------------

    def _run(self) -> None:
        intake = self._intake
        attempts = 0
        while True:
            with intake.cond:
                self._wait_for_work()
            with self.cycle_lock:  # a caller may have run the cycle meanwhile (run_inline)
                self._watch_space()
                with intake.cond:
                    taken = self._take()
                    requests, intake.requests = intake.requests, []
                    closing = intake.closing
                if self._carry_taken(*taken) or self._waiting:
                    self._active_at = time.monotonic()
                try:
                    self._cycle(final=closing)
                except Exception as exc:  # noqa: BLE001 - the writer must outlive any failure
                    self._failed(exc)
                    for request in requests:
                        request(store_error(exc, "write"))
                    if closing:
                        attempts += 1
                        if attempts < _CLOSE_ATTEMPTS:
                            time.sleep(_CLOSE_PAUSE * attempts)
                            continue
                        self._abandon(exc)
                        return
                    continue
                self._failures.succeeded()
                if closing:
                    if self._auto_reclaim:  # a stopped broker leaves no dead segments behind
                        self._reclaim_safely([])
                    for request in requests:
                        request(JournalClosed(f"journal {self.directory} is closed"))
                    return
                idle = self._idle_reclaim_at()
                if requests or self._reclaim_due or (idle and time.monotonic() >= idle):
                    self._reclaim_safely(requests)

    def _idle_reclaim_at(self) -> float | None:
        """When a pass is due for want of writes (monotonic), or None: :data:`IDLE_RECLAIM`
        seconds after the last write, if anything was written since the last pass."""
        if not self._auto_reclaim:
            return None
        written = self.bytes_written
        if written != self._seen_written:
            self._seen_written = written
            self._seen_at = time.monotonic()
        if written == self._reclaimed_written:
            return None
        return self._seen_at + IDLE_RECLAIM

    def _watch_space(self) -> None:
        """Look at the free space if due; while it is low, ask for reclaim passes."""
        if self.space.reclaim_wanted(self.bytes_written):
            self._reclaim_due = True

    def no_inline_for(self, seconds: float) -> None:
        """Run no sync inline (:meth:`run_inline`) for the next ``seconds``."""
        self._inline_from = max(self._inline_from, time.monotonic() + seconds)

    def run_inline(self, callbacks: list[SyncCallback]) -> bool:
        """Write, sync and call back on the caller's thread, if the writer is idle.

        ``always`` mode only, and only when no cycle is running, no failure is
        being retried and nothing else is asked of the writer: then a lone
        producer waiting for its fsync saves the two thread hand-offs. Not for
        :data:`INLINE_PAUSE` seconds after a sync here took :data:`INLINE_SLOW`
        (a slow disk must not hold the caller's other work). Returns False (nothing
        done) otherwise; the caller then hands ``callbacks`` to :meth:`Intake.sync`
        as usual.
        """
        if (
            self.mode is not SyncMode.ALWAYS
            or (self._inline_from and time.monotonic() < self._inline_from)
            or not self.cycle_lock.acquire(blocking=False)
        ):
            return False
        try:
            intake = self._intake
            with intake.cond:
                if (
                    intake.closing
                    or intake.requests
                    or self._failures.retry_at is not None
                    or self._appender.rewrite
                    or self._reclaim_due
                ):
                    return False
                taken = self._take()
            self._carry_taken(*taken)
            self._waiting += callbacks
            self._covered = self._taken
            appender = self._appender
            appender.sync_took = 0.0
            try:
                self._cycle(final=False)
            except Exception as exc:  # noqa: BLE001 - the writer thread takes over the retries
                self._failed(exc)
            if appender.sync_took >= INLINE_SLOW:
                self._inline_from = time.monotonic() + INLINE_PAUSE
                log.debug(
                    "journal %s: an fdatasync took %.0f ms on the broker's loop; "
                    "syncing on the writer thread for the next %g s",
                    self.directory,
                    appender.sync_took * 1000,
                    INLINE_PAUSE,
                )
            if self._reclaim_due or self._failures.retry_at is not None:
                with intake.cond:
                    intake.cond.notify()
            return True
        finally:
            self.cycle_lock.release()

    def _take(self) -> tuple[list[Item], Acks, Marks]:
        """(The intake's ``cond`` held.) Everything the intake holds; its sync callbacks
        now wait for this cycle's sync."""
        intake = self._intake
        self._linger_until = None
        self._covering = bool(intake.callbacks)
        self._waiting += intake.callbacks
        intake.callbacks = []
        return intake.take()

    def _carry_taken(self, items: list[Item], acks: Acks, marks: Marks) -> list[Item]:
        """Queue what :meth:`_take` took for writing, the gathered acks and marks
        encoded last (off the intake's lock); returns the items."""
        if acks or marks:
            items += gathered_items(acks, marks)
        self._carry += items
        self._taken += len(items)
        if self._covering:
            self._covered = self._taken
            self._covering = False
        return items

    def _wait_for_work(self) -> None:
        """Wait (holding the intake's ``cond``) until there is something to do now."""
        intake = self._intake
        while not intake.closing and not intake.requests:
            now = time.monotonic()
            retry_at = self._failures.retry_at
            if retry_at is not None:
                if now >= retry_at:
                    return
                intake.cond.wait(retry_at - now)
                continue
            if intake.callbacks and self.mode is not SyncMode.BATCH:
                return
            if intake.pending_bytes >= WAKE_BYTES:
                return
            deadline = self._sync_deadline()
            if intake.has_records:
                if self._linger_until is None:
                    self._linger_until = now + self._flush
                if deadline is None or self._linger_until < deadline:
                    deadline = self._linger_until
            elif deadline is None:
                idle = now - self._active_at >= _IDLE_AFTER
                deadline = now + (_IDLE_POLL if idle else self._flush)  # appends do not wake us
            reclaim_at = self._idle_reclaim_at()
            if reclaim_at is not None and reclaim_at < deadline:
                deadline = reclaim_at
            if now >= deadline:
                return
            intake.cond.wait(deadline - now)

    def _sync_deadline(self) -> float | None:
        """When written records must be synced with nobody asking, or None."""
        appender = self._appender
        if self.mode is SyncMode.BATCH:
            if self._intake.callbacks or self._waiting or appender.unsynced:
                return appender.last_sync + self._batch
        elif self.mode is SyncMode.ALWAYS and appender.unsynced:
            return appender.last_sync + _UNSYNCED_AGE
        return None

    def _cycle(self, *, final: bool) -> None:
        """Write what was taken; sync and call back as the mode says.

        Raises:
            OSError: a write, sync or roll-over failed.
        """
        appender = self._appender
        if appender.rewrite:
            appender.rewrite_unsynced()
        if self._carry:  # the carry's first item is numbered for refusals
            appender.write(self._carry, self._taken - len(self._carry))
        if self.mode is SyncMode.NEVER:
            if final:
                appender.sync_segment()
            self._fire()
            return
        now = time.monotonic()
        unsynced = appender.unsynced
        if self.mode is SyncMode.ALWAYS:
            due = (
                final
                or bool(self._waiting)
                or unsynced.size >= _UNSYNCED_BYTES
                or (bool(unsynced) and now - appender.last_sync >= _UNSYNCED_AGE)
            )
        else:
            due = final or now - appender.last_sync >= self._batch
        if due:
            if unsynced:
                appender.sync()
            self._fire()

    def _rolled(self) -> None:
        """The appender made a new segment current (having synced the one before, so the
        index knows all it holds): a reclaim pass is due (if automatic), and what was
        numbered so far is sealed."""
        self._reclaim_due = self._auto_reclaim
        with self.index_lock:
            self.sealed = dict(self._index.next_seq)

    # -- calling back ----------------------------------------------------------------

    def _fire(self, error: Exception | None = None) -> None:
        """Call every waiting callback: with None, or a fresh error for each if ``error``."""
        waiting, self._waiting = self._waiting, []
        tap = self.tap
        if tap is not None and error is None and waiting:
            current = self._appender.current
            if current is None:
                tap.synced(waiting, 0, 0)
            else:
                tap.synced(waiting, current.number, current.position)
            return
        for callback in waiting:
            try:
                callback(None if error is None else store_error(error, "write"))
            except Exception:
                log.exception("journal %s: a sync callback failed", self.directory)

    def _failed(self, exc: Exception) -> None:
        self._appender.rewrite = True
        if self._waiting:
            self._refuse()
        self._fire(exc)
        self._failures.failed(exc, len(self._carry))

    def _refuse(self) -> None:
        """The callbacks waiting are about to get an error: refuse the records they cover
        that must then not be stored (:mod:`chute.store.unsynced`) and tell ``on_refused``."""
        current = self._appender.current
        refused = refuse(
            self._appender.unsynced,
            self._carry,
            None if current is None else current.number,
            self._covered,
            self._taken - len(self._carry),
        )
        if not refused:
            return
        ops = refused_ops(refused)
        adds = sum(1 for op in ops if isinstance(op, AddOp))
        self._failures.refused(adds, len(ops) - adds)
        if self.on_refused is not None:
            try:
                self.on_refused(ops)
            except Exception:
                log.exception("journal %s: reporting refused records failed", self.directory)

    def _abandon(self, exc: Exception) -> None:
        """Closing and the disk still fails: give up on what is buffered."""
        intake = self._intake
        with intake.cond:
            self._waiting += intake.callbacks
            intake.callbacks = []
            items, acks, marks = intake.take()
            lost = len(self._carry) + len(items) + sum(map(len, acks.values()))
            lost += sum(len(seqs) for seqs, _ in marks.values())
        self._carry.clear()
        log.error("journal %s closed with %d records not written: %s", self.directory, lost, exc)
        self._fire(exc)

    # -- reclaiming ------------------------------------------------------------------

    def _reclaim_safely(self, requests: list[Request]) -> None:
        """A reclaim pass whose failure is logged, not passed to producers."""
        outcome: ReclaimResult | BaseException
        try:
            outcome = self._reclaim(force=bool(requests))
        except Exception as exc:  # noqa: BLE001 - reclaiming again later is the remedy
            log.warning("journal %s: reclaiming failed: %s", self.directory, exc)
            outcome = store_error(exc, "reclaim")
        self._reclaimed_written = self._seen_written = self.bytes_written
        self.space.check()  # what the pass freed (or its failure: the disk)
        for request in requests:
            request(outcome)

    @property
    def index(self) -> LiveIndex:
        """The live index; read it only under ``index_lock``."""
        return self._index

    def _reclaim(self, *, force: bool) -> ReclaimResult:
        """A reclaim pass (:meth:`Segments.reclaim`) once everything written is synced.

        Holds ``index_lock`` throughout, so a paging read never meets a location
        that is moving or a segment that is going.

        Raises:
            OSError: reading, writing, syncing or deleting failed (nothing more is deleted).
        """
        appender = self._appender
        with self.index_lock:
            self._reclaim_due = False
            if appender.unsynced:  # the index learns written records at their sync: plan with all
                appender.sync()
            current = appender.current
            if current is None:
                if not force:
                    return ReclaimResult()
                current = appender.roll(0)
            return self._segments.reclaim(current.number, force=force, write=appender.write_durably)
