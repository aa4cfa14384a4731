"""A journal's segment files as a replica sees them: what it holds, what it lacks.

:func:`holdings` says what a journal directory holds: per segment file, the length
of its good records (where a scan of it ends, :class:`~chute.store.record.Scan`) and
the CRC-32 of those bytes. :func:`catch_up` is what the live sends a backup that
holds that: the segments it must delete, and for each of the live's, the bytes past
the common part (or the whole, where they differ). :class:`ReplicaFiles` applies
what the live sends to the backup's directory and makes it durable.

Plain functions and files, no sockets: :mod:`chute.ha.live` and
:mod:`chute.ha.backup` call them off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Final

from chute.ha.wire import Delete, Frame, Truncate, Write, position
from chute.store.disk import Disk
from chute.store.record import Scan
from chute.store.segment import (
    SEGMENT_HEADER_SIZE,
    header_problem,
    list_segments,
    read_segment,
    segment_path,
)

CHUNK: Final = 1 << 20  # bytes per WRITE frame while catching up

Holding = tuple[int, int, int]  # segment, length of its good records, their crc32


def used_length(data: bytes, segment: int) -> int:
    """Where the good records of a segment file's ``data`` end (0: not a segment)."""
    if header_problem(data, segment) is not None:
        return 0
    scan = Scan(data, segment, SEGMENT_HEADER_SIZE)
    for _ in scan:
        pass
    return scan.end


def holdings(directory: str) -> list[Holding]:
    """What the journal in ``directory`` holds (nothing if it does not exist)."""
    if not os.path.isdir(directory):
        return []
    held: list[Holding] = []
    for segment in list_segments(directory):
        try:
            data = read_segment(directory, segment)
        except FileNotFoundError:
            continue
        length = used_length(data, segment)
        held.append((segment, length, zlib.crc32(data[:length])))
    return held


def catch_up(
    epoch: int,
    held: list[Holding],
    segments: list[int],
    current: tuple[int, int],
    read: Callable[[int], bytes | None],
) -> Iterator[Frame]:
    """The frames that make a backup holding ``held`` hold what the live's ``segments``
    did when it was at ``current`` (segment, offset written). ``read(segment)`` is the
    live's file (None: reclaimed since; its deletion follows in the live's stream)."""
    wanted = set(segments)
    theirs = {segment: (length, crc) for segment, length, crc in held}
    for segment in sorted(theirs):
        if segment not in wanted:
            yield Delete(epoch, segment)
    for segment in segments:
        data = read(segment)
        if data is None:
            continue
        end = current[1] if segment == current[0] else used_length(data, segment)
        mine = memoryview(data)[:end]
        start = 0
        if segment in theirs:
            length, crc = theirs[segment]
            if length <= end and zlib.crc32(mine[:length]) == crc:
                start = length
        yield Truncate(epoch, segment, start)
        for offset in range(start, end, CHUNK):
            yield Write(epoch, segment, offset, bytes(mine[offset : min(end, offset + CHUNK)]))


class ReplicaFiles:
    """A backup's journal directory, written as the live says (one thread at a time)."""

    def __init__(self, directory: str, disk: Disk | None = None) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._disk = disk or Disk()
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._names_changed = False
        self.position = 0  # the furthest byte written, as a stream position

    def _fd(self, segment: int) -> int:
        fd = self._fds.get(segment)
        if fd is None:
            path = segment_path(self.directory, segment)
            if not os.path.exists(path):
                self._names_changed = True
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._fds[segment] = fd
        return fd

    def apply(self, frame: Frame) -> None:
        """Do what ``frame`` says to the files (not yet durable: :meth:`flush`).

        Raises:
            OSError: the disk failed.
        """
        match frame:
            case Write(_, segment, offset, data):
                self._disk.write(self._fd(segment), data, offset)
                self._dirty.add(segment)
                self.position = max(self.position, position(segment, offset + len(data)))
            case Truncate(_, segment, length):
                self._disk.truncate(self._fd(segment), length)
                self._dirty.add(segment)
            case Delete(_, segment):
                fd = self._fds.pop(segment, None)
                if fd is not None:
                    os.close(fd)
                self._dirty.discard(segment)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(segment_path(self.directory, segment))
                    self._names_changed = True

    def flush(self) -> int:
        """Make everything applied durable; returns the position it reached.

        Raises:
            OSError: the disk failed.
        """
        for segment in sorted(self._dirty):
            self._disk.sync(self._fds[segment])
        self._dirty.clear()
        if self._names_changed:
            self._disk.sync_directory(self.directory)
            self._names_changed = False
        newest = max(self._fds, default=None)
        for segment in [s for s in self._fds if s != newest]:  # older ones are done with
            os.close(self._fds.pop(segment))
        return self.position

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
