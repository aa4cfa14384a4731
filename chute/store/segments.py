"""The journal's segment files, oldest first: which there are, the next one, reclaim passes.

A :class:`Segments` keeps the numbers of a journal's segment files (one file
is :mod:`chute.store.segment`'s) from the oldest to the one being written.
It changes at its two ends only:

* **Roll-over** (:meth:`Segments.open_next`): when the current segment is
  full, the writer (:mod:`chute.store.writer`) syncs and closes it, and a
  pre-zeroed spare becomes the next one.
* **Reclaim pass** (:meth:`Segments.reclaim`), run by the writer after each
  roll-over, once it has been idle for a while after writing, when the journal
  closes, on request, and while the disk is under ``disk_free_limit``:
  plan which old segments may go (:func:`chute.store.reclaim.plan`), copy the
  live records of sparse ones forward, write a checkpoint, sync (the writer
  writes and syncs those), then delete oldest first (the order
  :mod:`chute.store.reclaim` explains).

Thread-safety: belongs to the writer thread (a pass runs under the writer's
``index_lock``), except :meth:`Segments.numbers`, ``records_moved`` and ``lock`` (held
while segments are deleted, and by a re-read of the directory so that no
segment is deleted under it), which any thread may use.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Final

from chute.store.disk import Disk
from chute.store.intake import Item, ReclaimResult
from chute.store.reclaim import LiveIndex, compaction_records, holds_live_messages, plan
from chute.store.record import frame
from chute.store.records import Record, encode
from chute.store.segment import (
    SEGMENT_HEADER_SIZE,
    SegmentFile,
    Spares,
    list_segments,
    open_segment,
    read_segment,
    segment_path,
)
from chute.store.tap import Tap

log = logging.getLogger("chute.store.journal")

_COMPACT_SETTLE: Final = 1  # segments closed after one before it is compacted (reclaim.plan)


class Segments:
    """A journal's segment files: their numbers, the making of the next, reclaim passes."""

    def __init__(
        self,
        directory: str,
        index: LiveIndex,
        numbers: list[int],
        *,
        disk: Disk,
        segment_size: int,
        preallocate: bool,
        compact_ratio: float,
        max_moves: int,
    ) -> None:
        self.directory = directory
        self.lock = threading.Lock()  # held while segments are deleted or re-read
        self.records_moved = 0
        """Live records compaction copied forward since the journal opened (every pass)."""
        self._index = index
        self._numbers = numbers
        self._next = numbers[-1] + 1 if numbers else 1
        self._disk = disk
        self._segment_size = segment_size
        self._compact_ratio = compact_ratio
        self._max_moves = max_moves
        self._spares = Spares(directory, segment_size, disk) if preallocate else None
        self.tap: Tap | None = None  # a replica is told every deletion (chute.store.tap)
        if self._spares is not None:
            self._spares.prepare()

    def ahead(self) -> int:
        """Bytes of disk the journal will take without writing a record: the spare segments
        it makes (0 without them: segments then grow as records are written). Any thread."""
        return 0 if self._spares is None else self._spares.ahead()

    def numbers(self) -> list[int]:
        """The numbers of the segment files, oldest first (a snapshot; any thread)."""
        with self.lock:
            return list(self._numbers)

    def open_next(self, needed: int) -> SegmentFile:
        """Make the next segment, with room for a record of ``needed`` bytes at least.

        Raises:
            OSError: the spare or the new segment failed (the numbers are unchanged).
        """
        number = self._next
        capacity = max(self._segment_size, needed + SEGMENT_HEADER_SIZE)
        segment = open_segment(self.directory, number, capacity, self._disk, self._spares)
        self._next = number + 1
        with self.lock:
            self._numbers.append(number)
        return segment

    def close(self) -> None:
        """Stop making spares (the writer's thread ended)."""
        if self._spares is not None:
            self._spares.close()

    def reclaim(
        self, current: int, *, force: bool, write: Callable[[list[Item]], None]
    ) -> ReclaimResult:
        """A reclaim pass: compact, checkpoint, sync, delete (see :mod:`chute.store.reclaim`).

        ``current`` is the segment being written; ``force`` (a pass asked for)
        compacts the segments just closed too. ``write`` writes the copies and the
        checkpoint and syncs them (the writer's). The caller holds the index lock
        throughout and synced everything written before, so that the index knows it.

        Raises:
            OSError: reading, writing, syncing or deleting failed (nothing more is deleted).
        """
        index = self._index
        decision = plan(
            self._numbers,
            current,
            index.live,
            index.written,
            index.deps,
            compact_ratio=self._compact_ratio,
            max_moves=self._max_moves,
            settle=0 if force else _COMPACT_SETTLE,
        )
        if not decision.delete:
            return ReclaimResult()
        records: list[Record] = []
        for segment in decision.compact:
            data = (
                read_segment(self.directory, segment)
                if holds_live_messages(index, segment)
                else None
            )
            records += compaction_records(index, segment, data)
        moved = len(records)
        going = set(decision.delete)
        records.append(index.checkpoint_record(s for s in self._numbers if s not in going))
        items: list[Item] = []
        for record in records:
            kind, payload = encode(record)
            items.append((kind, payload, record))
        write(items)
        deleted = []
        for segment in decision.delete:  # oldest first: see chute.store.reclaim
            with self.lock:
                os.unlink(segment_path(self.directory, segment))
                self._numbers.remove(segment)
            index.forget(segment)
            deleted.append(segment)
            if self.tap is not None:
                self.tap.deleted(segment)
            self._disk.sync_directory(self.directory)
        log.debug(
            "journal %s: deleted segments %s, moved %d records", self.directory, deleted, moved
        )
        self.records_moved += moved
        return ReclaimResult(tuple(deleted), moved)


def reclaim_at_open(directory: str, index: LiveIndex, numbers: list[int], disk: Disk) -> list[int]:
    """Delete the segments that hold nothing live, before the journal judges its room.

    What a broker stopped without a pass left (a ``kill -9`` after consumers drained
    it) must not keep it from starting on a disk those very segments fill. The
    checkpoint that must precede a deletion (:mod:`chute.store.reclaim`) goes in a
    small segment of its own, written as it grows (no spare: there may be no room for
    one yet); reclaiming deletes it later like any other. Nothing is compacted here.
    Returns the segment numbers left. A failure is logged and deletes nothing more.
    """
    if not numbers:
        return numbers
    number = numbers[-1] + 1
    going = plan(numbers, number, index.live, index.written, index.deps, compact_ratio=0).delete
    if not going:
        return numbers
    kept = [s for s in numbers if s not in set(going)] + [number]
    kind, payload = encode(index.checkpoint_record(kept))
    try:
        segment = open_segment(directory, number, 0, disk, None)
        try:
            record = frame(number, SEGMENT_HEADER_SIZE, kind, payload)
            disk.write(segment.fd, record, SEGMENT_HEADER_SIZE)
            disk.sync(segment.fd, data_only=False)
        finally:
            segment.close()
        for old in going:  # oldest first: see chute.store.reclaim
            os.unlink(segment_path(directory, old))
            index.forget(old)
            disk.sync_directory(directory)
    except OSError as exc:
        log.warning("journal %s: reclaiming at the start failed: %s", directory, exc)
        return list_segments(directory)
    log.info(
        "journal %s: deleted %d segments that held nothing live (%d to %d) before starting",
        directory,
        len(going),
        going[0],
        going[-1],
    )
    return kept
