"""The one seam between the journal and the disk's durability.

Every byte the journal writes into a segment, every ``fsync``/``fdatasync``,
every directory sync, every truncation and every look at the free space goes
through a :class:`Disk`. The default does exactly what the operating system
does. A test or a benchmark passes its own instance (usually a
:class:`FaultyDisk`) to count syncs, fail them with ``ENOSPC`` or ``EIO``, cut
a write short, pretend the disk is nearly full, or block inside one to look at
what the journal does meanwhile (bbolt's failpoints, without monkeypatching).

Reads and ``unlink`` do not go through the seam: they cannot lose data that
was acknowledged.

Thread-safety: :class:`Disk` holds no state and may be shared. A
:class:`FaultyDisk` may be called from several threads at once (the journal's
writer and its segment preparer); its counters are updated under a lock, and
its fault settings are plain attributes a test flips from its own thread.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import Counter
from collections.abc import Callable


class Disk:
    """What the operating system does. Subclass to count or fail operations."""

    def write(self, fd: int, data: bytes, offset: int) -> None:
        """Write all of ``data`` at ``offset`` (``pwrite``, looping on short writes).

        Raises:
            OSError: as the operating system reports it (ENOSPC, EIO, ...).
        """
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            if written <= 0:  # pragma: no cover - pwrite reports errors by raising
                raise OSError(errno.EIO, "pwrite wrote nothing")
            view = view[written:]
            offset += written

    def sync(self, fd: int, *, data_only: bool = True) -> None:
        """``fdatasync`` (``data_only``) or ``fsync`` the file.

        Raises:
            OSError: the sync failed; what was written since the last good sync
                may be lost and must be written again.
        """
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)

    def sync_directory(self, path: str) -> None:
        """``fsync`` a directory, so that a rename, create or unlink in it is durable.

        Raises:
            OSError: the directory cannot be opened or synced.
        """
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, fd: int, length: int) -> None:
        """Cut the file to ``length`` bytes (recovery cuts a torn tail with it).

        Raises:
            OSError: as the operating system reports it.
        """
        os.ftruncate(fd, length)

    def free_bytes(self, path: str) -> int:
        """The bytes an unprivileged process may still write on ``path``'s filesystem
        (``statvfs``: ``f_bavail * f_frsize``; root may have a few reserved blocks more).

        Raises:
            OSError: as the operating system reports it.
        """
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize


class FaultyDisk(Disk):
    """A :class:`Disk` that counts what it does and fails or blocks on demand.

    ``counts`` has one entry per operation name: ``write``, ``sync`` (a
    ``data_only`` sync: the journal's group commits and nothing else),
    ``fsync`` (a full sync: new spares, cut tails), ``sync_directory``,
    ``truncate``. ``data_syncs`` is ``counts["sync"]``.

    Set ``write_error`` or ``sync_error`` to an errno (``errno.ENOSPC``) to make
    every write or sync fail with it until it is set back to ``None``; with
    ``torn_writes`` set too, a failing write first writes that many bytes of its
    data (a write the disk filled up in the middle of). ``free`` (bytes), if
    set, is what :meth:`free_bytes` reports instead of the real free space.
    ``hook``, if set, is called with the operation name before each operation
    (after the counters are updated) and may block or raise.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.bytes_written = 0
        self.write_error: int | None = None
        self.sync_error: int | None = None
        self.torn_writes = 0
        self.free: int | None = None
        self.hook: Callable[[str], None] | None = None

    def _enter(self, operation: str, failure: int | None) -> None:
        with self._lock:
            self.counts[operation] += 1
        hook = self.hook
        if hook is not None:
            hook(operation)
        if failure is not None:
            raise OSError(failure, os.strerror(failure))

    def write(self, fd: int, data: bytes, offset: int) -> None:
        failure = self.write_error
        if failure is not None and self.torn_writes:
            super().write(fd, data[: self.torn_writes], offset)
        self._enter("write", failure)
        super().write(fd, data, offset)
        with self._lock:
            self.bytes_written += len(data)

    @property
    def data_syncs(self) -> int:
        return self.counts["sync"]

    def sync(self, fd: int, *, data_only: bool = True) -> None:
        self._enter("sync" if data_only else "fsync", self.sync_error)
        super().sync(fd, data_only=data_only)

    def sync_directory(self, path: str) -> None:
        self._enter("sync_directory", self.sync_error)
        super().sync_directory(path)

    def truncate(self, fd: int, length: int) -> None:
        self._enter("truncate", self.write_error)
        super().truncate(fd, length)

    def free_bytes(self, path: str) -> int:
        self._enter("free_bytes", None)
        return super().free_bytes(path) if self.free is None else self.free
