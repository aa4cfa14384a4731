"""A queue's lanes: the FIFO deques its waiting entries wait in, one per priority.

A :class:`~chute.core.model.queue.QueueChannel` appends to a lane and pops from the
highest one that is not empty itself, and drops its oldest entry itself under
a drop-oldest overflow: those are on the per-message path, and stay inline
there. This module holds the rest of the work on the lanes, none of it on a
plain queue's per-message path: putting entries back in their place by sequence number, taking some
out (by number, the expired ones, all of them, all below a position, the oldest of
a kind: management, the expiry sweep, a cursor's ack, a sink's memory) and finding
a range by sequence number (a cursor's read). A lane is in sequence order unless a
placement broke it (``QueueChannel.out_of_order``), so what looks for numbers
scans, O(depth).

The functions change nothing but the lanes: the queue keeps its count of
waiting entries (``ready``) and everything else. Pure.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from chute.core.model.consumer import Entry

PRIORITIES: Final = 10


def new_lanes() -> list[deque[Entry]]:
    """One empty lane per priority, lowest first."""
    return [deque() for _ in range(PRIORITIES)]


def merge_back(lanes: Sequence[deque[Entry]], entries: Iterable[Entry]) -> int:
    """Put ``entries`` back in their lanes, each in its place by sequence number; returns
    how many."""
    by_lane: dict[int, list[Entry]] = {}
    for entry in entries:
        by_lane.setdefault(entry.message.priority, []).append(entry)
    count = 0
    for priority, returned in by_lane.items():
        returned.sort(key=_seq)
        merge_into(lanes[priority], returned)
        count += len(returned)
    return count


def merge_into(lane: deque[Entry], returned: list[Entry]) -> None:
    """Put ``returned`` (in sequence order, not empty) in ``lane`` in their place."""
    if not lane or returned[-1].seq < lane[0].seq:
        lane.extendleft(reversed(returned))
    else:  # rare: interleave with what is waiting (keeps FIFO by sequence)
        merged = list(heapq.merge(lane, returned, key=_seq))
        lane.clear()
        lane.extend(merged)


def take_numbered(lanes: Iterable[deque[Entry]], wanted: set[int]) -> list[Entry]:
    """Remove the entries numbered in ``wanted`` from their lanes; returns them."""
    taken: list[Entry] = []
    for lane in lanes:
        if lane and any(e.seq in wanted for e in lane):
            taken += [e for e in lane if e.seq in wanted]
            keep = [e for e in lane if e.seq not in wanted]
            lane.clear()
            lane.extend(keep)
    return taken


def take_due(lanes: Iterable[deque[Entry]], now: int) -> list[Entry]:
    """Remove the entries whose expiration has passed at ``now``; returns them."""
    due: list[Entry] = []
    for lane in lanes:
        if any(0 < e.message.expiration <= now for e in lane):
            keep = [e for e in lane if not 0 < e.message.expiration <= now]
            due.extend(e for e in lane if 0 < e.message.expiration <= now)
            lane.clear()
            lane.extend(keep)
    return due


def take_all(lanes: Iterable[deque[Entry]]) -> list[Entry]:
    """Remove every entry; returns them, lane by lane (lowest priority first)."""
    out: list[Entry] = []
    for lane in lanes:
        out += lane
        lane.clear()
    return out


def take_oldest(lanes: Sequence[deque[Entry]], wanted: Callable[[Entry], bool]) -> Entry | None:
    """Remove the oldest entry ``wanted`` accepts (the lowest number among the first such
    entry of each lane), or None. Scans each lane from its front up to its first such
    entry: O(1) when the lanes start with them (a sink shedding its non-persistent
    messages, ``QueueChannel.place``)."""
    best: tuple[int, int] | None = None  # (lane, index)
    for number, lane in enumerate(lanes):
        for index, entry in enumerate(lane):
            if wanted(entry):
                if best is None or entry.seq < lanes[best[0]][best[1]].seq:
                    best = (number, index)
                break
    if best is None:
        return None
    lane = lanes[best[0]]
    entry = lane[best[1]]
    del lane[best[1]]
    return entry


def take_below(
    lanes: Iterable[deque[Entry]], end: int, wanted: Callable[[Entry], bool] | None = None
) -> list[Entry]:
    """Remove the entries numbered below ``end`` (that ``wanted`` accepts); returns them in
    sequence order."""
    taken: list[Entry] = []
    for lane in lanes:
        if not any(e.seq < end for e in lane):
            continue
        keep: list[Entry] = []
        for entry in lane:
            if entry.seq < end and (wanted is None or wanted(entry)):
                taken.append(entry)
            else:
                keep.append(entry)
        lane.clear()
        lane.extend(keep)
    taken.sort(key=_seq)
    return taken


def between(lanes: Iterable[deque[Entry]], start: int, end: int) -> list[Entry]:
    """The entries numbered ``start <= seq < end``, in sequence order; nothing changes."""
    found = [e for lane in lanes for e in lane if start <= e.seq < end]
    found.sort(key=_seq)
    return found


def _seq(entry: Entry) -> int:
    return entry.seq
