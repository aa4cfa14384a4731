"""The journal's current segment: records framed at their place, written, synced, rolled over.

The writer (:mod:`chute.store.writer`) decides *when* to write and sync; an
:class:`Appender` does the writing. :meth:`Appender.write` frames the records
at their final place in the current segment (the CRC covers that place, see
:mod:`chute.store.record`) and writes as many as fit with one ``pwrite``.
Written records wait in an :class:`~chute.store.unsynced.Unsynced` until
:meth:`Appender.sync` makes them durable with one ``fdatasync``; only then
does the live index learn them, so reclaiming and paging never act on a record
that may yet be lost (with ``sync = "never"`` there is no such sync, and the
index learns them at once).

A full segment is synced and closed, and a pre-zeroed spare becomes the next
one (:meth:`Appender.roll`, :mod:`chute.store.segments`); the writer is told
(``on_roll``: a reclaim pass is due). Free space (:mod:`chute.store.space`):
under ``disk_free_limit`` new messages leave the last 64 KiB of a segment to
acks and delivery marks, so that should the disk fill up, consumers can still
ack into it until reclaiming frees space for the next segment.

Faults: a failed sync (or a failure the writer met) sets
:attr:`Appender.rewrite`: before the next sync, :meth:`Appender.rewrite_unsynced`
writes again, at the same place, everything written since the last good sync
(the kernel may have dropped those pages). A write cut short leaves bytes past
what the retry writes; the next write zeroes them (``dirty_end``), so a scan
never finds a refused record there (:mod:`chute.store.unsynced`).

Thread-safety: belongs to whoever runs the writer's cycle (holds its
``cycle_lock``); the index changes under ``index_lock``. ``bytes_written`` and
``sync_stats`` may be read from any thread.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Final

from chute.store.disk import Disk
from chute.store.intake import Item
from chute.store.reclaim import SEGMENT_SHIFT, LiveIndex
from chute.store.record import HEADER_SIZE, frame_header
from chute.store.segment import SEGMENT_HEADER_SIZE, SegmentFile, header
from chute.store.segments import Segments
from chute.store.space import FreeSpace
from chute.store.syncstats import SyncStats
from chute.store.tap import Tap
from chute.store.unsynced import NEW, Unsynced, adds_messages, located

_ACK_RESERVE: Final = 64 << 10  # under disk_free_limit: a segment's end kept for acks, marks


class Appender:
    """Writes records into the current segment, syncs them, and rolls over to the next.

    ``index_at_write``: the index learns records as they are written, not at
    their sync (``sync = "never"``, which has no sync to wait for).
    """

    def __init__(
        self,
        index: LiveIndex,
        index_lock: threading.RLock,
        segments: Segments,
        *,
        disk: Disk,
        space: FreeSpace,
        segment_size: int,
        index_at_write: bool,
        on_roll: Callable[[], None],
    ) -> None:
        self._index = index
        self._index_lock = index_lock
        self._segments = segments
        self._disk = disk
        self._space = space
        self._index_at_write = index_at_write
        self._on_roll = on_roll
        self._ack_reserve = min(_ACK_RESERVE, segment_size // 8)
        self.current: SegmentFile | None = None
        self.unsynced = Unsynced()  # written to the current segment, not synced
        self.rewrite = False  # a write or sync failed: write the unsynced again first
        self.bytes_written = 0  # into segments, since the open
        self.sync_stats = SyncStats()  # each fsync's latency and records (any thread reads)
        self.sync_took = 0.0  # seconds the last fdatasync took
        self.last_sync = time.monotonic()
        self._records_unsynced = 0  # records written since the last fsync
        self._dirty_end = 0  # the current segment may hold bytes up to here (a torn write)
        self.tap: Tap | None = None  # a replica is told every write (chute.store.tap)

    def close(self) -> None:
        """Close the current segment (the writer thread has ended)."""
        if self.current is not None:
            self.current.close()
            self.current = None

    def write(self, items: list[Item], first: int | None) -> None:
        """Frame and write ``items`` in as few writes as segments allow; removes those written.

        ``first`` is the ordinal of ``items[0]`` among the records the writer took
        (:mod:`chute.store.unsynced` refuses by it), or None for records the writer
        made itself (a reclaim pass's), which are never refused.

        Raises:
            OSError: a write or a roll-over failed (``items`` keeps what was not written).
        """
        done = 0
        try:
            while done < len(items):
                segment = self.current
                if segment is None:
                    segment = self.roll(HEADER_SIZE + len(items[done][1]))
                number = segment.number
                position = start = segment.position
                room = segment.room
                # under disk_free_limit new messages leave the end of a segment to acks and
                # marks: if the disk fills, no new segment can be made for them
                reserve = self._ack_reserve if self._space.low is not None else 0
                parts: list[bytes] = []
                end = done
                for item in itertools.islice(items, done, None):
                    kind, payload, _ = item
                    size = HEADER_SIZE + len(payload)
                    if size > room or (
                        reserve
                        and size + reserve > room
                        and kind in NEW
                        and position > SEGMENT_HEADER_SIZE
                        and adds_messages(item)
                    ):
                        break
                    parts.append(frame_header(number, position, kind, payload))
                    parts.append(payload)
                    position += size
                    room -= size
                    end += 1
                if end == done:  # the next record does not fit: a new segment
                    self.roll(HEADER_SIZE + len(items[done][1]))
                    continue
                if position < self._dirty_end:  # zero what a torn write left past these
                    parts.append(bytes(self._dirty_end - position))
                data = b"".join(parts)
                self._dirty_end = max(self._dirty_end, start + len(data))
                self._disk.write(segment.fd, data, start)
                if self.tap is not None:
                    self.tap.wrote(number, start, data)
                self._dirty_end = position
                self.bytes_written += len(data)
                self._records_unsynced += end - done
                segment.position = position
                written = located(
                    itertools.islice(items, done, end),
                    number << SEGMENT_SHIFT | start,
                    None if first is None else first + done,
                )
                if self._index_at_write:
                    apply = self._index.apply
                    with self._index_lock:
                        for _, location, (_, _, record) in written:
                            apply(record, location)
                else:
                    self.unsynced.add(start, data, written)
                done = end
        finally:
            del items[:done]

    def roll(self, needed: int) -> SegmentFile:
        """Sync and leave the current segment; make the next one (``needed`` bytes of
        records at least) current, and tell ``on_roll``.

        Raises:
            OSError: the sync, the spare, or the new segment failed.
        """
        old = self.current
        if old is not None and self.unsynced:
            self.sync()
        # if this fails (a full disk), the old segment stays current: what still fits in it
        # (consumers' acks, once the records that did not fit are refused) can be written
        segment = self._segments.open_next(needed)
        if self.tap is not None:
            self.tap.wrote(segment.number, 0, header(segment.number))
        if old is not None:
            old.close()
        self.current = segment
        self._dirty_end = 0
        self._on_roll()
        self._space.check()  # a new segment (and the spare made behind it) took space
        return segment

    def sync(self) -> None:
        """``fdatasync`` the current segment; the index learns what it made durable.

        Raises:
            OSError: the sync failed (:attr:`rewrite` is set).
        """
        if self.current is None:
            return
        started = time.perf_counter()
        try:
            self._disk.sync(self.current.fd)
        except OSError:
            self.rewrite = True
            raise
        self.sync_took = time.perf_counter() - started
        self.sync_stats.record(self.sync_took, self._records_unsynced)
        self._records_unsynced = 0
        if self.unsynced:
            with self._index_lock:
                self.unsynced.applied(self._index)
        self.last_sync = time.monotonic()

    def sync_segment(self) -> None:
        """``fdatasync`` the current segment, nothing more (``sync = "never"``: on close,
        and under a reclaim pass's records).

        Raises:
            OSError: the sync failed.
        """
        if self.current is not None:
            self._disk.sync(self.current.fd)

    def write_durably(self, items: list[Item]) -> None:
        """Write ``items`` and sync them, whatever the mode (a reclaim pass's records).

        Raises:
            OSError: as :meth:`write` and :meth:`sync`.
        """
        self.write(items, None)
        if self._index_at_write:
            self.sync_segment()
        else:
            self.sync()

    def rewrite_unsynced(self) -> None:
        """After a failure: write again what was written since the last good sync.

        Raises:
            OSError: the write failed (:attr:`rewrite` stays set).
        """
        if self.current is not None:
            self.unsynced.rewrite(self._disk, self.current.fd)
        self.rewrite = False
