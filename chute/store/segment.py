"""Segment files: where records live on disk, how one is made, written and read.

A journal directory holds segment files named by their number
(``0000000007.seg``), read and replayed in number order. A segment opens with
a 16-byte header (``SEGMENT_MAGIC``, then its number as u64), then records
(:mod:`chute.store.record`) back to back. Only the newest segment is ever
written; the others are read-only until reclaimed.

Pre-allocation: appending to a file that grows commits the filesystem's
metadata on every fdatasync, which costs about four times as much as
overwriting blocks that already exist (notes/baselines.md, "fsync"). So a
segment is normally a *spare*: a file of the segment size filled with zeros
and fsynced ahead of need by a background thread (:class:`Spares`), renamed
to its number when the writer rolls over. The zeros after the last record
are the segment's clean end (a scan stops there without complaint).

Thread-safety: a :class:`SegmentFile` belongs to the journal's writer thread.
:class:`Spares` is driven by that thread too; its own worker thread only
creates and fills files that nobody else uses yet.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from chute.store.disk import Disk

SEGMENT_MAGIC: Final = b"chuteJ01"
SEGMENT_HEADER: Final = struct.Struct(">8sQ")
SEGMENT_HEADER_SIZE: Final = SEGMENT_HEADER.size  # 16
SUFFIX: Final = ".seg"
SPARE_SUFFIX: Final = ".spare"
_ZEROS: Final = bytes(1 << 20)


def segment_path(directory: str, segment: int) -> str:
    return os.path.join(directory, f"{segment:010d}{SUFFIX}")


def segment_number(name: str) -> int | None:
    """The number of the segment a file called ``name`` is, or None if no segment has that
    name (``0000000007.seg`` is segment 7; ``7.seg`` and ``notes.seg`` are none)."""
    stem = name.removesuffix(SUFFIX)
    if stem == name or not (stem.isascii() and stem.isdigit()):
        return None
    number = int(stem)
    return number if f"{number:010d}" == stem else None


def list_segments(directory: str) -> list[int]:
    """The numbers of the segment files in ``directory``, in order."""
    numbers = (segment_number(name) for name in os.listdir(directory))
    return sorted(number for number in numbers if number is not None)


def header(segment: int) -> bytes:
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, segment)


def header_problem(data: bytes, segment: int) -> str | None:
    """Why ``data`` does not open with the header of ``segment``, or None if it does."""
    if len(data) < SEGMENT_HEADER_SIZE:
        return "shorter than a segment header"
    magic, number = SEGMENT_HEADER.unpack_from(data)
    if magic != SEGMENT_MAGIC:
        return "no segment header"
    if number != segment:
        return f"header says segment {number}"
    return None


def read_segment(directory: str, segment: int) -> bytes:
    """The whole segment file, in one sequential read.

    Raises:
        OSError: it cannot be read.
    """
    with open(segment_path(directory, segment), "rb", buffering=0) as f:
        return f.read()


def remove_spares(directory: str) -> None:
    """Delete spares a previous run left behind (they hold nothing)."""
    for name in os.listdir(directory):
        if name.endswith(SPARE_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


class SegmentFile:
    """The segment being appended to: its descriptor, write position and capacity."""

    __slots__ = ("capacity", "fd", "number", "position")

    def __init__(self, number: int, fd: int, capacity: int) -> None:
        self.number = number
        self.fd = fd
        self.capacity = capacity
        self.position = SEGMENT_HEADER_SIZE

    @property
    def room(self) -> int:
        return self.capacity - self.position

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class Spares:
    """Zero-filled, fsynced segment files of ``size`` bytes, made one ahead on a worker thread."""

    def __init__(self, directory: str, size: int, disk: Disk) -> None:
        self.directory = directory
        self.size = size
        self.disk = disk
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chute-spare")
        self._future: Future[str] | None = None
        self._names = itertools.count()

    def ahead(self) -> int:
        """Bytes of disk the spares will still take without a record written: the one
        being made, if it is not made yet, and the one the next roll-over starts (any
        thread)."""
        future = self._future
        return self.size * (2 if future is not None and not future.done() else 1)

    def prepare(self) -> None:
        """Start making the next spare if none is ready or being made."""
        if self._future is None:
            self._future = self._submit()

    def _submit(self) -> Future[str]:
        path = os.path.join(self.directory, f"{next(self._names)}{SPARE_SUFFIX}")
        return self._executor.submit(self._make, path)

    def take(self) -> str:
        """The path of a ready spare (waiting for it if need be); starts the next one.

        Raises:
            OSError: the spare could not be made (the next call tries again).
        """
        future = self._future
        if future is None:
            future = self._submit()
        self._future = None
        try:
            path = future.result()
        except OSError:  # made while the disk was failing: try afresh, it may be back
            path = self._submit().result()
        self.prepare()
        return path

    def _make(self, path: str) -> str:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            offset = 0
            while offset < self.size:
                chunk = _ZEROS[: min(len(_ZEROS), self.size - offset)]
                self.disk.write(fd, chunk, offset)
                offset += len(chunk)
            self.disk.sync(fd, data_only=False)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        return path

    def close(self) -> None:
        """Stop the worker; a spare made but never used is deleted."""
        future, self._future = self._future, None
        if future is not None and not future.cancel():
            with contextlib.suppress(Exception):
                os.unlink(future.result())
        self._executor.shutdown(wait=True)


def open_segment(
    directory: str,
    number: int,
    capacity: int,
    disk: Disk,
    spares: Spares | None,
) -> SegmentFile:
    """Make segment ``number`` (from a spare if there is one big enough) and write its header.

    The new name is made durable (directory sync) before the segment is used.
    A file already at that name is a leftover of a failed attempt and holds
    no record; it is replaced.

    Raises:
        OSError: the spare, the rename, the directory sync or the header write failed.
    """
    path = segment_path(directory, number)
    if spares is not None and capacity <= spares.size:
        os.replace(spares.take(), path)
        capacity = spares.size
        flags = os.O_WRONLY | os.O_CLOEXEC
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        disk.sync_directory(directory)
        disk.write(fd, header(number), 0)
    except BaseException:
        os.close(fd)
        raise
    return SegmentFile(number, fd, capacity)
