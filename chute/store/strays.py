"""Files in a journal's directory that only look like segments: found before any is read.

A segment file is named by its number (``0000000007.seg``) and opens with its
header (:mod:`chute.store.segment`). Recovery reads the segments in number
order, and their numbers say which segments must be there
(:mod:`chute.store.gaps`). So a file that merely sits under a segment's name
(random bytes, a tool's leftover, a copy of another file) must neither be
replayed nor let its name or contents size any work: a stray
``9999999999.seg`` must not stand for ten billion segments.

:func:`sort_out` looks at each ``*.seg`` file's name and first bytes only (a
segment header and the first record behind it, read in bounded chunks; a
file of zeros is read through in chunks, never whole):

* a name that is not a segment's (``notes.seg``, ``7.seg``): set aside;
* nothing but zero bytes, or none: *blank* (a segment made but never
  written, or emptied): kept for :mod:`chute.store.gaps` to judge, unread;
* its own segment's header: a segment;
* no header, or another segment's, but a first record whose CRC checks at
  this segment's number and place (:mod:`chute.store.record`): a segment
  whose header alone was damaged; it is replayed (and reported);
* anything else: set aside.

Setting a file aside renames it ``NAME.stray`` (``NAME.stray.1`` and so on if
taken) in the same directory: nothing is deleted, an operator can look at
it, and the next start no longer sees it. A warning per file says so. A
re-read of a journal in use (``set_aside=False``) only skips such files.

Thread-safety: runs on the recovering thread, before the writer starts.
"""

from __future__ import annotations

import dataclasses
import io
import os
import zlib
from typing import Final

from chute.store.record import HEADER, HEADER_SIZE, MAGIC, seal
from chute.store.segment import (
    SEGMENT_HEADER,
    SEGMENT_HEADER_SIZE,
    SEGMENT_MAGIC,
    SUFFIX,
    segment_number,
    segment_path,
)

STRAY_SUFFIX: Final = ".stray"
_CHUNK: Final = 1 << 20


@dataclasses.dataclass(slots=True)
class Sorted:
    """What :func:`sort_out` found: segments to replay, blank ones, and what it set aside."""

    segments: list[int] = dataclasses.field(default_factory=list)  # to read, in order
    blank: list[int] = dataclasses.field(default_factory=list)  # zero bytes only, unread
    notes: list[str] = dataclasses.field(default_factory=list)  # one per file set aside

    @property
    def present(self) -> list[int]:
        """Every segment number still in the directory (read or blank), in order."""
        return sorted(self.segments + self.blank)


def sort_out(directory: str, *, set_aside: bool) -> Sorted:
    """The ``*.seg`` files of ``directory``, sorted into segments, blank ones and strays.

    Raises:
        OSError: only if the directory itself cannot be listed.
    """
    found = Sorted()
    numbered: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        if not name.endswith(SUFFIX):
            continue
        number = segment_number(name)
        if number is not None:
            numbered.append((number, name))
        else:
            _set_aside(directory, name, "is not named as a segment", found, set_aside=set_aside)
    for number, name in sorted(numbered):
        try:
            what = _look(segment_path(directory, number), number)
        except OSError:
            what = "read"  # replaying it reports why it cannot be read
        if what == "read":
            found.segments.append(number)
        elif what == "blank":
            found.blank.append(number)
        else:
            _set_aside(directory, name, what, found, set_aside=set_aside)
    return found


def _look(path: str, number: int) -> str:
    """ "read", "blank", or why the file at ``path`` is not segment ``number``.

    Raises:
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb", buffering=0) as f:  # a FileIO
        size = os.fstat(f.fileno()).st_size
        head = f.read(SEGMENT_HEADER_SIZE + HEADER_SIZE)
        if not head.strip(b"\x00") and _zeros_to_end(f):
            return "blank"
        if len(head) >= SEGMENT_HEADER_SIZE:
            magic, said = SEGMENT_HEADER.unpack_from(head)
            if magic == SEGMENT_MAGIC and said == number:
                return "read"
        if _first_record_checks(f, head, number, size):
            return "read"  # a damaged header: the replay reports it
        if len(head) < SEGMENT_HEADER_SIZE:
            return f"is shorter than a segment header ({size} bytes)"
        magic, said = SEGMENT_HEADER.unpack_from(head)
        if magic == SEGMENT_MAGIC:
            return f"has the header of segment {said}, and no record of its own"
        return f"has no segment header ({size} bytes)"


def _zeros_to_end(f: io.FileIO) -> bool:
    """Whether the rest of the open file ``f`` holds zero bytes only (read in chunks)."""
    while chunk := f.read(_CHUNK):
        if chunk.strip(b"\x00"):
            return False
    return True


def _first_record_checks(f: io.FileIO, head: bytes, number: int, size: int) -> bool:
    """Whether a good record of segment ``number`` follows where its header ends."""
    if len(head) < SEGMENT_HEADER_SIZE + HEADER_SIZE:
        return False
    magic, crc, length, kind = HEADER.unpack_from(head, SEGMENT_HEADER_SIZE)
    crc, length, kind = int(crc), int(length), int(kind)
    start = SEGMENT_HEADER_SIZE + HEADER_SIZE
    if magic != MAGIC or start + length > size:
        return False
    running = seal(number, SEGMENT_HEADER_SIZE, length, kind)
    f.seek(start)
    left = length
    while left:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            return False
        running = zlib.crc32(chunk, running)
        left -= len(chunk)
    return running == crc


def _set_aside(directory: str, name: str, why: str, found: Sorted, *, set_aside: bool) -> None:
    """Rename ``name`` out of the segments' way (if ``set_aside``) and note it."""
    if not set_aside:
        return
    source = os.path.join(directory, name)
    target = name + STRAY_SUFFIX
    n = 0
    while os.path.lexists(os.path.join(directory, target)):
        n += 1
        target = f"{name}{STRAY_SUFFIX}.{n}"
    try:
        os.rename(source, os.path.join(directory, target))
    except OSError as exc:
        found.notes.append(f"{name} {why}: not a segment, skipped (cannot set it aside: {exc})")
        return
    found.notes.append(f"{name} {why}: not a segment, set aside as {target} (nothing read from it)")
