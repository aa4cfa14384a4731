"""Walking a journal directory's segments for a recovery: :func:`walk_segments`.

Strays are set aside first (:mod:`chute.store.strays`); then each segment is read
whole, one read ahead on another thread, and handed to the recovery's replay, which
returns where a torn tail starts. A torn tail is cut off (the file truncated to its
last good record, and synced) when the walk may write. Once every segment was read,
what was lost is judged and reported (:mod:`chute.store.gaps`): segments missing or
blank among others, and tears no crash made. :func:`account_damage` reports a
segment scan's damage for either replay (:mod:`chute.store.recovery`).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from chute.store.disk import Disk
from chute.store.gaps import (
    Tear,
    blank_tail,
    describe,
    describe_tear,
    find_holes,
    is_loss,
    remove_segments,
)
from chute.store.progress import Phase, RecoveryProgress
from chute.store.reclaim import SEGMENT_SHIFT
from chute.store.record import HEADER, HEADER_SIZE, MAGIC, Scan
from chute.store.report import RecoveryReport
from chute.store.segment import read_segment, segment_path
from chute.store.strays import sort_out


def walk_segments(
    directory: str,
    disk: Disk,
    report: RecoveryReport,
    replay_segment: Callable[[bytes, int], int],
    *,
    cut: bool,
    progress: RecoveryProgress | None = None,
) -> None:
    """Every segment in order through ``replay_segment(data, number)`` (which returns where
    a torn tail starts), cutting torn tails if ``cut``; the time goes in the report, the
    figures so far in ``progress`` after each segment."""
    started = time.perf_counter()
    # Replay makes millions of objects and frees none: the cyclic collector
    # would rescan them over and over (recovery took 1.7x as long with it on).
    collecting = gc.isenabled()
    gc.disable()
    try:
        found = sort_out(directory, set_aside=cut)  # strays first: nothing read whole
        for note in found.notes:
            report.note(note)
        present = found.present
        report.blank += found.blank
        report.segments += len(found.blank)
        if progress is not None:
            progress.segments = len(found.segments)
            progress.bytes_total = _sizes(directory, found.segments)
            progress.phase = Phase.REPLAYING
        for segment, data in _read_ahead(directory, found.segments):
            if progress is not None:
                progress.segments_read += 1
            if isinstance(data, OSError):
                report.records_skipped += 1
                report.note(f"segment {segment} cannot be read, skipped: {data}")
                continue
            report.segments += 1
            report.bytes_read += len(data)
            records, problems, tears = report.records, len(report.problems), len(report.tears)
            end = replay_segment(data, segment)
            if (records, problems, tears) == (
                report.records,
                len(report.problems),
                len(report.tears),
            ) and segment not in report.blank:
                report.empty.append(segment)  # a header, then nothing
            if end < len(data) and cut:
                _cut(directory, segment, end, disk, report)
            if progress is not None:
                progress.bytes_read = report.bytes_read
                progress.records = report.records
    finally:
        if collecting:
            gc.enable()
    _check_segments(directory, present, report, cut=cut)
    report.seconds = time.perf_counter() - started


def _sizes(directory: str, segments: list[int]) -> int:
    """The bytes of ``segments`` on disk (one that cannot be looked at counts 0)."""
    total = 0
    for segment in segments:
        try:
            total += os.path.getsize(segment_path(directory, segment))
        except OSError:
            continue
    return total


def _check_segments(
    directory: str, present: list[int], report: RecoveryReport, *, cut: bool
) -> None:
    """Report what was lost (:mod:`chute.store.gaps`): segments missing or blank among
    others, and tears no crash made; with ``cut``, remove the newest segments that hold
    nothing. ``report.lost_before`` ends at where the latest loss starts."""
    tail = blank_tail(present, report.blank, report.empty)
    kept = present[: len(present) - len(tail)]
    if tail and kept and tail[0] != kept[-1] + 1 and cut:
        numbers = ", ".join(map(str, tail))
        report.note(
            f"segment{'s' if len(tail) > 1 else ''} {numbers}, numbered past segment "
            f"{kept[-1]} (the newest that holds records), held nothing: removed"
        )
    losses: list[tuple[int, str]] = []
    blank = [number for number in report.blank if number not in tail]
    for hole in find_holes(kept, blank, report.checkpoint):
        report.segments_lost += hole.last - hole.first + 1
        losses.append((hole.first << SEGMENT_SHIFT, describe(directory, kept, hole)))
    newest = kept[-1] if kept else 0
    for tear in report.tears:
        if is_loss(tear, newest):
            report.segments_cut += 1
            losses.append((tear.location, describe_tear(directory, kept, tear, newest)))
        else:
            report.note(
                f"segment {tear.segment} offset {tear.offset}: {tear.reason}, torn tail of "
                f"{tear.size} bytes cut (the last write before a crash)"
            )
    for location, text in sorted(losses):
        report.lost_before = max(report.lost_before, location)
        report.note(text)
    if cut:
        remove_segments(directory, tail)


def _read_ahead(directory: str, segments: list[int]) -> Iterator[tuple[int, bytes | OSError]]:
    """Each segment's bytes (or why it cannot be read), the next one read meanwhile.

    Reading releases the GIL, so a second thread reads segment n+1 (page
    faults and copying included) while this one replays segment n.
    """
    if not segments:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chute-recovery") as reader:
        upcoming = reader.submit(_read, directory, segments[0])
        for i, segment in enumerate(segments):
            current = upcoming
            if i + 1 < len(segments):
                upcoming = reader.submit(_read, directory, segments[i + 1])
            yield segment, current.result()


def _read(directory: str, segment: int) -> bytes | OSError:
    try:
        return read_segment(directory, segment)
    except OSError as exc:
        return exc


def account_damage(scan: Scan, segment: int, data: bytes, report: RecoveryReport) -> int:
    """Report the scan's damage (a torn tail is judged once every segment was read:
    :func:`_check_segments`); returns where a torn tail starts (or ``len(data)``)."""
    torn = len(data)
    for damage in scan.damage:
        if damage.tail:
            torn = damage.offset
            size = len(data[damage.offset :].rstrip(b"\x00"))
            report.bytes_cut += size
            rest = len(data) - damage.offset
            record = 0  # the size its header declares, if it has one
            if rest >= HEADER_SIZE:
                marker, _, length, _ = HEADER.unpack_from(data, damage.offset)
                if marker == MAGIC:
                    record = HEADER_SIZE + length
            # a record is written only where it fits: one the file ends inside was cut short
            truncated = rest < HEADER_SIZE or record > rest
            report.tears.append(
                Tear(segment, damage.offset, size, damage.reason, truncated, record)
            )
        else:
            report.records_skipped += 1
            report.bytes_skipped += damage.end - damage.offset
            report.note(
                f"segment {segment} offset {damage.offset}: {damage.reason}, "
                f"{damage.end - damage.offset} corrupt bytes skipped"
            )
    return torn


def _cut(directory: str, segment: int, end: int, disk: Disk, report: RecoveryReport) -> None:
    try:
        fd = os.open(segment_path(directory, segment), os.O_WRONLY | os.O_CLOEXEC)
        try:
            disk.truncate(fd, end)
            disk.sync(fd, data_only=False)
        finally:
            os.close(fd)
    except OSError as exc:
        report.note(f"segment {segment}: cannot cut its torn tail: {exc}")
