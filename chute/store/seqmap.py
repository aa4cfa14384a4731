"""A compact map from sequence numbers to journal locations, for one queue.

The journal's :class:`~chute.store.reclaim.LiveIndex` must know where the
live add of every message is, and a paged backlog can hold millions of them.
A ``dict[int, int]`` costs about 100 bytes per message there (two int
objects and a hash slot); this map costs 8 bytes per sequence number in its
range, because a queue's live sequence numbers are nearly contiguous: they
are assigned in order and mostly leave in order.

Layout: ``_slots[i]`` holds the location of sequence ``_base + i`` or 0 for
none (a location is never 0: every record sits past its segment's header).
Slots before ``_head`` are known empty; the array is trimmed from the front
once that dead prefix is large. Sequence numbers that would leave a large
gap, or fall below ``_base``, go to the small ``_extra`` dict instead (a
subscription with a selector, a prepared transaction committed late).

Not thread-safe: the journal guards it with its index lock.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator
from typing import Final

_GAP: Final = 4096  # a jump past the end larger than this (and than the map) goes to _extra
_TRIM: Final = 4096  # trim the dead prefix once it is this long and half the array


class SeqMap:
    """``seq -> location`` with the parts of the dict interface the index uses."""

    __slots__ = ("_base", "_count", "_extra", "_head", "_slots")

    def __init__(self) -> None:
        self._slots = array("Q")
        self._base = 0
        self._head = 0
        self._count = 0  # live entries in _slots
        self._extra: dict[int, int] = {}

    def __len__(self) -> int:
        return self._count + len(self._extra)

    def __bool__(self) -> bool:
        return bool(self._count or self._extra)

    def __contains__(self, seq: int) -> bool:
        return self.get(seq) is not None

    def get(self, seq: int, default: int | None = None) -> int | None:
        i = seq - self._base
        if 0 <= i < len(self._slots):
            location = self._slots[i]
            if location:
                return location
        return self._extra.get(seq, default)

    def append_next(self, seq: int, location: int) -> bool:
        """Store ``location`` for ``seq`` if ``seq`` comes right after the last slot and
        nothing else is kept (the common add of a new message); False, nothing done,
        otherwise (use ``map[seq] = location``)."""
        slots = self._slots
        if self._count and not self._extra and seq - self._base == len(slots) and location > 0:
            slots.append(location)
            self._count += 1
            return True
        return False

    def append_run(self, seq: int, count: int, location: int) -> bool:
        """:meth:`append_next` of ``seq`` .. ``seq + count - 1`` at once, all at ``location``
        (a batch's messages share their record); False, nothing done, where
        :meth:`append_next` of ``seq`` would be."""
        slots = self._slots
        if self._count and not self._extra and seq - self._base == len(slots) and location > 0:
            slots.extend(array("Q", (location,)) * count)
            self._count += count
            return True
        return False

    def __setitem__(self, seq: int, location: int) -> None:
        if location <= 0:
            raise ValueError(f"location {location} cannot be stored (must be positive)")
        slots = self._slots
        if not slots or (self._count == 0 and not 0 <= seq - self._base < len(slots)):
            self._extra.pop(seq, None)
            self._slots = array("Q", (location,))
            self._base, self._head, self._count = seq, 0, 1
            return
        i = seq - self._base
        n = len(slots)
        if self._extra and 0 <= i <= n + max(_GAP, n):
            self._extra.pop(seq, None)  # keep each seq in one place
        if 0 <= i < n:
            if not slots[i]:
                self._count += 1
                self._head = min(self._head, i)
            slots[i] = location
        elif n <= i <= n + max(_GAP, n):
            if i > n:
                slots.extend(array("Q", bytes(8 * (i - n))))
            slots.append(location)
            self._count += 1
        else:
            self._extra[seq] = location

    def pop(self, seq: int, default: int | None = None) -> int | None:
        slots = self._slots
        i = seq - self._base
        if 0 <= i < len(slots) and slots[i]:
            location = slots[i]
            slots[i] = 0
            self._count -= 1
            if i == self._head:
                self._advance()
            return location
        return self._extra.pop(seq, default)

    def _advance(self) -> None:
        slots = self._slots
        head, n = self._head, len(slots)
        if not self._count:
            self._slots = array("Q")
            self._base += n
            self._head = 0
            return
        while head < n and not slots[head]:
            head += 1
        if head >= _TRIM and head * 2 >= n:
            del slots[:head]
            self._base += head
            head = 0
        self._head = head

    def total(self) -> int:
        """The sum of every value (at C speed: the slots of empty seqs hold 0)."""
        return sum(self._slots) + sum(self._extra.values())

    def values(self) -> Iterator[int]:
        for location in self._slots:
            if location:
                yield location
        yield from self._extra.values()

    def items(self) -> Iterator[tuple[int, int]]:
        """Every (seq, location), in no particular order."""
        base = self._base
        for i, location in enumerate(self._slots):
            if location:
                yield base + i, location
        yield from self._extra.items()

    def after(self, seq: int) -> Iterator[tuple[int, int]]:
        """(seq, location) for every sequence number above ``seq``, ascending."""
        extra = sorted(s for s in self._extra if s > seq)
        k = 0
        slots, base = self._slots, self._base
        for i in range(max(self._head, seq + 1 - base), len(slots)):
            location = slots[i]
            if location:
                s = base + i
                while k < len(extra) and extra[k] < s:
                    yield extra[k], self._extra[extra[k]]
                    k += 1
                yield s, location
        for s in extra[k:]:
            yield s, self._extra[s]

    def window(self, seq: int, limit: int) -> tuple[list[int], list[int]]:
        """The first ``limit`` of :meth:`after`, as their seqs and their locations (a
        stream read's window: at C speed over the slots while no seq is in ``_extra``)."""
        extra = self._extra
        if extra and max(extra) > seq:
            pairs = list(itertools.islice(self.after(seq), limit))
            return [s for s, _ in pairs], [location for _, location in pairs]
        slots, base = self._slots, self._base
        i = max(self._head, seq + 1 - base)
        seqs: list[int] = []
        locations: list[int] = []
        while limit > 0 and i < len(slots):
            chunk = slots[i : i + limit]
            if chunk.count(0):
                kept = [(base + j, location) for j, location in enumerate(chunk, i) if location]
                seqs += [s for s, _ in kept]
                locations += [location for _, location in kept]
            else:
                seqs += range(base + i, base + i + len(chunk))
                locations += chunk.tolist()
            limit = limit - len(chunk) + chunk.count(0)
            i += len(chunk)
        return seqs, locations

    def __repr__(self) -> str:
        return f"SeqMap({len(self)} live, base={self._base}, extra={len(self._extra)})"
