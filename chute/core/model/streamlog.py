"""A stream's kept messages: their numbering, the newest in memory, and reading them.

:class:`StreamLog` is what every reader of a :class:`~chute.core.model.stream.Stream`
asks of it: which offsets it keeps (``first``, ``head``, ``last``), the messages in
an offset range (:meth:`StreamLog.read`, or as stored blocks
:meth:`StreamLog.read_blocks`), and where a reader starts (:meth:`StreamLog.locate`).
The stream keeps its newest messages in memory (the *tail*, in offset order) and
reads older ones back from the store. Offsets a stream no longer keeps (removed by
retention or compaction, or a prepared send's that was rolled back) are gaps that
every read skips: a read from a removed offset starts at the next kept one.

:class:`~chute.core.model.stream.Stream` adds what changes the log (appending,
retention, compaction, readers). Pure: no sockets, no files.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from typing import Final

from chute.core.model.consumer import Entry
from chute.core.model.offsets import Offset
from chute.core.model.paging import Resources
from chute.core.model.settings import DestinationSettings
from chute.core.model.store import StoredBlock, StoredMessage, message_block

READ_STEP: Final = 256
"""Messages read back from the store per call."""

BLOCK_STEP: Final = 4096
"""Messages read back from the store per call by :meth:`StreamLog.read_blocks` at most (with
a byte bound, about as many as it leaves room for)."""


class StreamLog:
    """A stream's kept messages and the reads over them. See the module docstring."""

    def __init__(self, address: str, settings: DestinationSettings, host: Resources) -> None:
        self.address = address
        self.name = address  # the store knows the stream by its address
        self.settings = settings
        self.host = host
        self.next_seq = 1
        self._first = 1  # the oldest offset kept while count (see first)
        self.count = 0  # messages kept
        self.bytes = 0  # their Message.size
        self.reserved: set[int] = set()  # offsets of prepared sends, placed at their commit
        # the same as a heap of runs [first, end) (disjoint: an offset is held once), each
        # run's first moved on lazily past what was placed or released since
        self._held: list[list[int]] = []
        self._tail: list[Entry] = []  # the newest messages, in offset order
        self._tail_from = 0  # entries of _tail before this index are gone
        self._tail_bytes = 0
        self._newest = 0  # the highest offset appended
        self.gaps: set[int] = set()
        """Offsets removed from amid the log (compaction) that the store may still hold until
        it has recorded their removal: reads skip them (:meth:`page_in`)."""

    # -- numbering ------------------------------------------------------------------

    @property
    def first(self) -> int:
        """The oldest offset kept (on a compacted stream it may be a gap: compaction leaves
        it where retention did, and reads from it start at the next kept; the store
        records it there, so a restart finds it there too); :attr:`head` while none is
        (the next to appear, also after a restart or a delete moved the numbering on)."""
        return self._first if self.count else self.head

    @first.setter
    def first(self, value: int) -> None:
        self._first = value

    @property
    def head(self) -> int:
        """The first offset a reader may not read yet: the next one, or the lowest a
        prepared send holds."""
        held, reserved = self._held, self.reserved
        if not reserved:
            if held:  # every one placed or released: none to drop one by one
                held.clear()
            return self.next_seq
        while held:
            run = held[0]
            seq, end = run
            while seq < end and seq not in reserved:  # placed or released since
                seq += 1
            if seq < end:
                run[0] = seq  # still below every other run: they are disjoint
                return min(self.next_seq, seq)
            heapq.heappop(held)
        return self.next_seq

    @property
    def last(self) -> int:
        """The newest offset kept below :attr:`head` (``head`` if none)."""
        tail = self._tail
        head = self.head
        for index in range(len(tail) - 1, self._tail_from - 1, -1):
            if tail[index].seq < head:
                return tail[index].seq
        after = head - 2  # offsets are contiguous but for rolled-back prepared sends
        while after >= self.first - 1:
            found = self._next_kept(after, head)
            if found is not None:
                return found.seq
            after -= 1
        return head

    # -- reading --------------------------------------------------------------------

    def read(
        self, start: int, end: int, *, max_messages: int = 0, max_bytes: int = 0
    ) -> tuple[int, list[Entry]]:
        """The messages with offsets in ``[start, end)`` (``end`` at most :attr:`head`),
        at most ``max_messages`` and about ``max_bytes`` of them (0: no limit; at least
        one); returns ``(next start, entries)``: next start is ``end`` once the range is
        done. Offsets retention removed are skipped.

        Raises:
            StoreError: the store cannot read them back now.
        """
        return self._read(start, min(end, self.head), max_messages, max_bytes)

    def _read(
        self, start: int, end: int, max_messages: int, max_bytes: int
    ) -> tuple[int, list[Entry]]:
        """:meth:`read` past the head too (retention and purge remove what is kept behind
        a prepared send as well)."""
        start = max(start, self.first)
        entries: list[Entry] = []
        size = 0
        position = start
        while position < end:
            room = (max_messages - len(entries)) if max_messages else READ_STEP
            found = self._from_tail(position, end, min(room, READ_STEP))
            if found is None:
                found = self._from_store(position, end, min(room, READ_STEP))
            if not found:
                return end, entries
            for entry in found:
                if max_bytes and entries and size + entry.message.size > max_bytes:
                    return entry.seq, entries
                entries.append(entry)
                size += entry.message.size
            position = found[-1].seq + 1
            if max_messages and len(entries) >= max_messages:
                return (position if position < end else end), entries
        return end, entries

    def _from_tail(self, start: int, end: int, limit: int) -> list[Entry] | None:
        """Up to ``limit`` entries from ``start`` if the tail holds ``start``, else None."""
        tail = self._tail
        lo = self._tail_from
        if lo >= len(tail) or start < tail[lo].seq:
            return None
        index = bisect.bisect_left(tail, start, lo=lo, key=entry_seq)
        stop = bisect.bisect_left(
            tail, end, lo=index, hi=min(len(tail), index + limit), key=entry_seq
        )
        return tail[index:stop]

    def _from_store(self, start: int, end: int, limit: int) -> list[Entry]:
        tail = self._tail
        below = min(end, tail[self._tail_from].seq if self._tail_from < len(tail) else end)
        if start < below:  # ask for no more than is there: a short read makes a journal flush
            stored = self.page_in(start - 1, min(limit, below - start))
            found = [Entry(s.seq, s.message) for s in stored if s.seq < below]
            if found:
                return found
        if below < end:
            return self._from_tail(below, end, limit) or []
        return []

    def read_blocks(
        self, start: int, end: int, *, max_messages: int = 0, max_bytes: int = 0
    ) -> tuple[int, list[StoredBlock]]:
        """:meth:`read`, each message as its content block with its envelope
        (:data:`~chute.core.model.store.StoredBlock`): the same pages, but what the store holds
        is not decoded, for an answer that sends the blocks on as they are (the native
        ``CursorFetch`` without a cursor).

        Raises:
            StoreError: the store cannot read them back now.
        """
        end = min(end, self.head)
        blocks: list[StoredBlock] = []
        size = 0
        position = max(start, self.first)
        while position < end:
            room = (max_messages - len(blocks)) if max_messages else BLOCK_STEP
            step = min(room, BLOCK_STEP)
            if max_bytes:  # read about what the bytes left hold, by the sizes seen so far
                left = max(0, max_bytes - size)
                step = min(step, left * len(blocks) // size + 1 if blocks else 16)
            found = self._blocks_from_tail(position, end, step)
            if found is None:
                found = self._blocks_from_store(position, end, step)
            if not found:
                return end, blocks
            more = sum(map(_block_size, found))
            if max_bytes and size + more > max_bytes:  # the page ends in this step
                for block in found:
                    if blocks and size + block[6] > max_bytes:
                        return block[0], blocks
                    blocks.append(block)
                    size += block[6]
            else:
                blocks += found
                size += more
            position = found[-1][0] + 1
            if max_messages and len(blocks) >= max_messages:
                return (position if position < end else end), blocks
        return end, blocks

    def _blocks_from_tail(self, start: int, end: int, limit: int) -> list[StoredBlock] | None:
        entries = self._from_tail(start, end, limit)
        if entries is None:
            return None
        return [message_block(e.seq, e.message, e.delivery_count, e.redelivered) for e in entries]

    def _blocks_from_store(self, start: int, end: int, limit: int) -> list[StoredBlock]:
        """As :meth:`_from_store`."""
        tail = self._tail
        below = min(end, tail[self._tail_from].seq if self._tail_from < len(tail) else end)
        if start < below:
            found = self._page_blocks(start - 1, min(limit, below - start))
            if found and found[-1][0] >= below:
                found = [b for b in found if b[0] < below]
            if found:
                return found
        if below < end:
            return self._blocks_from_tail(below, end, limit) or []
        return []

    def _sizes(self, start: int, end: int, limit: int) -> list[Sized]:
        """The :data:`Sized` of up to ``limit`` kept messages in ``[start, end)`` (past the
        head too), in offset order: what retention and purge look at, the ones only the
        store holds read as their stored blocks, not decoded."""
        start = max(start, self.first)
        if start >= end:
            return []
        found = self._from_tail(start, end, limit)
        if found is not None:
            return [(e.seq, e.message.size, e.message.timestamp) for e in found]
        tail = self._tail
        below = min(end, tail[self._tail_from].seq if self._tail_from < len(tail) else end)
        blocks = self._page_blocks(start - 1, min(limit, below - start))
        sized = [(b[0], b[6], b[3]) for b in blocks if b[0] < below]
        if sized or below >= end:
            return sized
        return [
            (e.seq, e.message.size, e.message.timestamp)
            for e in self._from_tail(below, end, limit) or []
        ]

    def _next_kept(self, after: int, end: int) -> Entry | None:
        """The first kept entry above ``after`` and below ``end``, read from the store."""
        stored = self.page_in(after, 1)
        if not stored or stored[0].seq >= end:
            return None
        return Entry(stored[0].seq, stored[0].message)

    def page_in(self, after: int, limit: int) -> list[StoredMessage]:
        """The store's kept messages above ``after`` (up to ``limit``), :attr:`gaps` skipped
        (if all it returned are gaps: the next ones).

        Raises:
            StoreError: the store cannot read them back now.
        """
        page_in = self.host.store.page_in
        while True:
            stored = page_in(self.address, after, limit)
            gaps = self.gaps
            if not gaps or not stored:
                return stored
            kept = [s for s in stored if s.seq not in gaps]
            if kept or len(stored) < limit:
                return kept
            after = stored[-1].seq

    def _page_blocks(self, after: int, limit: int) -> list[StoredBlock]:
        """:meth:`page_in` as stored blocks."""
        page_blocks = self.host.store.page_blocks
        while True:
            found = page_blocks(self.address, after, limit)
            gaps = self.gaps
            if not gaps or not found:
                return found
            kept = [b for b in found if b[0] not in gaps]
            if kept or len(found) < limit:
                return kept
            after = found[-1][0]

    def locate(self, offset: Offset) -> int:
        """The offset a reader starting at ``offset`` reads first."""
        head = self.head
        if offset.kind == "first":
            return self.first
        if offset.kind == "next":
            return head
        if offset.kind == "last":
            return self.last
        if offset.kind == "offset":
            return min(max(offset.value, self.first), head)
        return self.at_time(offset.value)

    def at_time(self, timestamp: int) -> int:
        """The first offset whose message was accepted at ``timestamp`` (ms) or later
        (:attr:`head` if none): a bisection over the tail, else over the store."""
        tail = self._tail
        lo_index = self._tail_from
        head = self.head
        if lo_index < len(tail) and tail[lo_index].message.timestamp <= timestamp:
            index = bisect.bisect_left(
                tail, timestamp, lo=lo_index, key=lambda e: e.message.timestamp
            )
            return tail[index].seq if index < len(tail) and tail[index].seq < head else head
        below = min(head, tail[lo_index].seq if lo_index < len(tail) else head)
        lo, hi = self.first, below  # the answer is the first kept offset at or above lo
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self._next_kept(mid - 1, below)
            if probe is None or probe.message.timestamp >= timestamp:
                hi = mid
            else:
                lo = probe.seq + 1
        found = self._next_kept(lo - 1, below) if lo < below else None
        return found.seq if found is not None else below


Sized = tuple[int, int, int]
"""A kept message as retention sees it: (offset, ``Message.size``, timestamp)."""


def entry_seq(entry: Entry) -> int:
    return entry.seq


_block_size: Final = operator.itemgetter(6)
"""A :data:`~chute.core.model.store.StoredBlock`'s ``Message.size``."""
