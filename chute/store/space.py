"""Free space on the journal's disk: the check at open, and ``disk_free_limit`` while running.

A journal that cannot write stores nothing, and a consumer's ack is a record
too: once the disk is full nobody can ack, and only space freed elsewhere
gets the broker going again. So the journal watches its free space (the
``statvfs`` of its directory through the :class:`~chute.store.disk.Disk`
seam: the bytes an unprivileged process may still write).

* **At open** (:func:`check_room_to_open`): writing resumes in a new segment,
  made at its full size (a pre-zeroed spare, :mod:`chute.store.segment`), so
  a disk with less free than one segment could store nothing at all. The
  journal refuses to open, saying how much is free and what to do.
* **While running** (:class:`FreeSpace`): under ``disk_free_limit`` the
  journal reports itself low (``Store.space_low``), counting the spare segment
  its next roll-over makes as taken already (else that spare would eat the
  reserve the limit keeps), and the core stops taking
  new messages from producers while consumers go on acking. The space below
  the limit is the reserve those acks, delivery marks and reclaim passes
  (which delete whole segments) use; a limit of at least one segment leaves
  room to open the next one. 0 turns the limit off. Once low, the journal is
  low until a tenth more than the limit is free (``_RESUME_MARGIN``): with one
  line, the producers let go at it would take the disk under it again within
  the next look, and be held and let go over and over (hysteresis, as the
  broker's memory watermarks have).

Checking costs one ``statvfs`` (a few microseconds), made by the writer
thread after it wrote ``_CHECK_BYTES`` or ``_CHECK_SECONDS`` passed, never
per message. :meth:`FreeSpace.current` (what ``Store.space_low`` answers)
reads a field, and looks again itself only if the last look is older than
``_CHECK_SECONDS`` (a writer held up in a slow sync does not look): the
figure a refused producer is told is never older than that.

Thread-safety: :meth:`FreeSpace.check` and :meth:`FreeSpace.maybe_check` run
on the writer thread (and at open); :meth:`FreeSpace.current` on any thread;
one look runs at a time (a lock; a reader that finds a look under way takes
the answer it has).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from chute.store.disk import Disk
from chute.store.errors import DiskFull

log = logging.getLogger("chute.store.journal")

_CHECK_BYTES: Final = 1 << 20  # written since the last look ...
_CHECK_SECONDS: Final = 0.1  # ... or this long: look again
_OPEN_HEADROOM: Final = 256 << 10  # the lock file, directory entries, a torn tail's cut
_LOW_RECLAIM_SECONDS: Final = 0.5  # under the limit: a reclaim pass at most this often
_RESUME_MARGIN: Final = 10  # once low: low until the limit and 1/this of it more are free


def size_text(size: int) -> str:
    """``size`` bytes for a person: "60.0 MiB", "512 KiB", "800 bytes"."""
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} bytes"


def check_room_to_open(directory: str, disk: Disk, segment_size: int, *, preallocate: bool) -> int:
    """The free bytes under ``directory``, if a new segment fits; returns them.

    Raises:
        DiskFull: the disk cannot hold one segment (the message says what to do).
        OSError: the free space cannot be read.
    """
    free = disk.free_bytes(directory)
    if free < segment_size + _OPEN_HEADROOM:
        made = "made at its full size" if preallocate else "written"
        raise DiskFull(
            f"journal {directory}: the disk has {size_text(free)} free, which cannot hold "
            f"one journal segment (server.segment_size = {size_text(segment_size)}, each "
            f"{made} before anything is stored): free space on that disk, or lower "
            "server.segment_size"
        )
    return free


class FreeSpace:
    """The free space last seen under the journal's directory, against ``limit`` (0: off)."""

    def __init__(
        self,
        directory: str,
        disk: Disk,
        limit: int,
        free: int,
        *,
        ahead: Callable[[], int] = lambda: 0,
    ) -> None:
        if limit < 0:
            raise ValueError(f"disk_free_limit {limit} must be 0 (off) or positive")
        self.directory = directory
        self.disk = disk
        self.limit = limit
        self.ahead = ahead
        """The bytes the journal will take without writing a record (the spare segment its
        next roll-over makes, and one being made): counted as taken already, so that the
        limit is a reserve the journal's own files do not eat into."""
        self.free = free
        self.low: str | None = None
        """A sentence for a producer while free space is under the limit, else None."""
        self._looking = threading.Lock()  # one look at a time: the writer's or a reader's
        self._checked_at = time.monotonic()
        self._checked_written = 0
        self._failed = False  # statvfs failed (logged once)
        self._reclaim_at = 0.0  # under the limit: the next reclaim pass not before ...
        self._reclaim_written = -1  # ... nor unless the writer wrote since this
        self._judge()

    def maybe_check(self, written: int) -> None:
        """Look again if ``written`` (the writer's byte count) grew by ``_CHECK_BYTES`` or
        ``_CHECK_SECONDS`` passed since the last look."""
        if self.limit and (
            written - self._checked_written >= _CHECK_BYTES
            or time.monotonic() - self._checked_at >= _CHECK_SECONDS
        ):
            self._checked_written = written
            self.check()

    def reclaim_wanted(self, written: int) -> bool:
        """Look if due (:meth:`maybe_check`); True if the writer should run a reclaim pass:
        the disk is low and something was written since the last one asked for here (acks
        free segments only once a pass deletes them), at most every half second."""
        self.maybe_check(written)
        if self.low is None:
            return False
        now = time.monotonic()
        if now < self._reclaim_at or written == self._reclaim_written:
            return False
        self._reclaim_at = now + _LOW_RECLAIM_SECONDS
        self._reclaim_written = written
        return True

    def current(self) -> str | None:
        """:attr:`low`, looked at again first if the last look is older than
        ``_CHECK_SECONDS`` (any thread): what a refused producer is told is never older,
        even while the writer thread is held up (a slow sync, retries on a failing disk)."""
        if (
            self.limit
            and time.monotonic() - self._checked_at >= _CHECK_SECONDS
            and self._looking.acquire(blocking=False)
        ):
            try:
                self._look()
            finally:
                self._looking.release()
        return self.low

    def check(self) -> None:
        """Read the free space now (after a roll-over or a reclaim pass, say)."""
        with self._looking:
            self._look()

    def _look(self) -> None:
        self._checked_at = time.monotonic()
        if not self.limit:
            return
        try:
            self.free = self.disk.free_bytes(self.directory)
        except OSError as exc:
            if not self._failed:
                log.warning("journal %s: cannot read the free space: %s", self.directory, exc)
                self._failed = True
            return
        self._failed = False
        self._judge()

    def _judge(self) -> None:
        if not self.limit:
            return
        was = self.low
        ahead = self.ahead()
        left = max(0, self.free - ahead)  # once the spares are made
        resume = self.resume_at
        if left < (self.limit if was is None else resume):
            after = (
                f", {size_text(left)} once the journal's spare segments are made "
                f"({size_text(ahead)})"
                if ahead
                else ""
            )
            where = (
                f"under its disk_free_limit ({size_text(self.limit)})"
                if left < self.limit
                else f"not yet {size_text(resume)} again since it went under its "
                f"disk_free_limit ({size_text(self.limit)})"
            )
            self.low = (
                f"the broker's disk has {size_text(self.free)} free{after}, {where}: "
                "producers wait until consumers free space"
            )
            if was is None:
                log.warning(
                    "journal %s: %s free%s, under disk_free_limit (%s): new messages are "
                    "refused until %s is free again (consumers ack enough for reclaiming "
                    "to free space, or space is freed on that disk)",
                    self.directory,
                    size_text(self.free),
                    after,
                    size_text(self.limit),
                    size_text(resume),
                )
        elif was is not None:
            self.low = None
            log.info(
                "journal %s: %s free again, a tenth over disk_free_limit (%s): producers may send",
                self.directory,
                size_text(self.free),
                size_text(self.limit),
            )

    @property
    def resume_at(self) -> int:
        """Free bytes (less the spares) from which a low journal is no longer low."""
        return self.limit + self.limit // _RESUME_MARGIN
