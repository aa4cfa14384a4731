"""A queue's waiting entries found and taken by their sequence numbers.

:class:`Numbered` is the part of :class:`~chute.core.model.queue.QueueChannel` that
works by sequence number rather than in delivery order: withdrawing entries for
management and for recovering a prepared transaction's acks, a cursor's range
and the acks of a cursor's read, evicting the oldest (``drop-oldest``) and purging
a window at a time. None of it is on the per-message path: each
looks through the lanes (:mod:`chute.core.model.lanes`), O(depth), and through
what the queue's :class:`~chute.core.model.paging.Pager` keeps in the store.
The queue keeps its own count of waiting entries (``ready``) in step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

from chute.core.model import lanes
from chute.core.model.consumer import Entry
from chute.core.model.paging import Pager


class Numbered:
    """The queue's work by sequence number; :class:`QueueChannel` provides the fields."""

    _lanes: list[deque[Entry]]
    ready: int
    pager: Pager

    def _page_in(self) -> None:
        """Read the pager's next window back into the lanes (the queue's own)."""
        raise NotImplementedError

    def settle(self, entry: Entry, *, acked: bool = True, recorded: bool = False) -> None:
        """The entry leaves the queue (the queue's own)."""
        raise NotImplementedError

    def withdraw(self, seq: int) -> Entry | None:
        """Take the waiting entry ``seq`` out of its lane (it stays held), or None.

        For recovery of a prepared transaction's acks: O(depth), never on the
        per-message path.
        """
        taken = self.withdraw_many((seq,))
        return taken[0] if taken else None

    def withdraw_many(self, seqs: Collection[int]) -> list[Entry]:
        """Take the waiting entries numbered ``seqs`` out of their lanes, or out of the
        pager (:meth:`~chute.core.model.paging.Pager.withdraw_many`), in sequence order;
        ones in flight or gone are not there. They stay held until the caller settles them
        or puts them back (:meth:`~chute.core.model.queue.QueueChannel.put_back`).
        O(depth): for management, never on the per-message path."""
        wanted = set(seqs)
        taken = lanes.take_numbered(self._lanes, wanted)
        self.ready -= len(taken)
        rest = sorted(wanted.difference(e.seq for e in taken))
        if rest and self.pager.count:
            paged = self.pager.withdraw_many(rest)
            for entry in paged:
                if not entry.message.persistent:  # recorded to page it: its ack must be
                    self.pager.transient.add(entry.seq)
            taken += paged
        taken.sort(key=_seq)
        return taken

    def waiting_between(self, start: int, end: int, limit: int = 0) -> list[Entry]:
        """Waiting entries with ``start <= seq < end`` in sequence order, at most ``limit``
        (0: all); paged ones are read back from the store, nothing changes. O(depth):
        a lane is not always in sequence order (a prepared send is placed at commit)."""
        found = lanes.between(self._lanes, start, end)
        if limit > 0:
            del found[limit:]
        pager = self.pager
        if pager.count and end - 1 > pager.top_seq and (limit <= 0 or len(found) < limit):
            room = limit - len(found) if limit > 0 else pager.count
            for entry in pager.peek(max(pager.top_seq, start - 1), room):
                if entry.seq >= end or (limit > 0 and len(found) >= limit):
                    break
                found.append(entry)
        return found

    def take_waiting_below(
        self, end: int, wanted: Callable[[Entry], bool] | None = None
    ) -> list[Entry]:
        """Remove the waiting entries with ``seq < end`` (that ``wanted`` accepts) from their
        lanes, paging in what the store holds below ``end`` first; they stay held until
        the caller settles them."""
        pager = self.pager
        while pager.count and pager.top_seq < end - 1:
            before = pager.top_seq
            self._page_in()
            if pager.top_seq == before:
                break
        taken = lanes.take_below(self._lanes, end, wanted)
        self.ready -= len(taken)
        return taken

    def evict_oldest(self) -> Entry | None:
        """Remove the oldest waiting entry (lowest sequence in any lane), for drop-oldest."""
        if not self.ready and self.pager.count:
            self._page_in()
        oldest: deque[Entry] | None = None
        for lane in self._lanes:
            if lane and (oldest is None or lane[0].seq < oldest[0].seq):
                oldest = lane
        if oldest is None:
            return None
        entry = oldest.popleft()
        self.ready -= 1
        return entry

    def purge(self) -> int:
        """Remove every waiting message, paged ones too, a window at a time (each acked in
        the store, none diverted); in-flight messages stay with their consumers. Returns
        how many went."""
        count = 0
        while True:
            taken = lanes.take_all(self._lanes)
            self.ready = 0
            for entry in taken:
                self.settle(entry, acked=False)
            count += len(taken)
            before = self.pager.count
            if not before:
                return count
            self._page_in()
            if self.pager.count == before:  # nothing could be read back now
                return count


def _seq(entry: Entry) -> int:
    return entry.seq
