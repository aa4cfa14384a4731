"""Streams: append-only logs read from an offset, as RabbitMQ's streams and Kafka's topics.

Theory of operation
-------------------
A :class:`Stream` (``stream:NAME``) keeps every message it takes, in the order
the broker accepted them, until its retention removes the oldest: past
``max_bytes`` or ``max_messages``, or older than ``max_age``. Nothing a reader
does removes anything. A message's **offset** is its sequence number in the
stream, so offsets only grow; ``first`` is the oldest offset still kept and
``head`` the offset the next readable message will have.

Every message a stream takes is recorded in the store (a stream is durable:
a message sent as non-persistent is kept as a persistent one), under the
stream's address as a durable queue of kind ``stream``. The stream holds in
memory only its newest messages (``tail_bytes``) and reads older ones back from
the store (:meth:`Store.page_in`), so a stream costs the memory of its tail,
whatever its length. Retention acks what it removes, which is what lets the
journal delete a segment once nothing in it is kept (journal space is
reclaimed as retention moves on), and has the store record where it left
``first`` first (:meth:`Store.stream_first`): a restart recovers ``first``
there, as Kafka's log start offset, whatever compaction
(:mod:`chute.core.rules.compaction`) removed above it since.

Reading, two ways:

* :meth:`Stream.read` returns the messages in an offset range, at most a page:
  stateless, for readers that keep their own position (the Spark source keeps
  it in Spark's checkpoint; the native ``CursorFetch`` request without a cursor).
* A :class:`~chute.core.model.readers.StreamReader` is a consumer's own queue, as a
  topic subscription is: it is fed from its position, a window at a time, as
  its consumer's credit allows; acks only make room in the window. Consumers
  open one with an offset (:func:`~chute.core.model.offsets.parse_offset`: ``first``,
  ``last``, ``next``, a number, or ``timestamp=MS``; :meth:`Stream.locate` finds
  where it reads first); native clients and STOMP's ``x-stream-offset`` header.

A prepared (two-phase) send has its offset when prepared but is placed only
at its commit: :attr:`Stream.head` stays below the lowest such offset, so no
reader ever moves past a message that is yet to appear (retention and purge
still remove what is kept behind it).

What a stream needs of the broker is :class:`StreamHost`. Pure: no sockets, no
files. Used from the broker's loop only.
"""

from __future__ import annotations

import bisect
import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from chute.core.model.consumer import Entry
from chute.core.model.paging import HELD_OVERHEAD, Resources, held_cost
from chute.core.model.queue import QueueChannel
from chute.core.model.readers import StreamReader
from chute.core.model.settings import Cleanup, DestinationSettings
from chute.core.model.streamlog import StreamLog, entry_seq

log = logging.getLogger("chute.stream")

TAIL_BYTES: Final = 8 << 20
"""How many bytes of its newest messages a stream keeps in memory, at most."""

TAILS_BYTES: Final = 64 << 20
"""What the tails of every stream together keep: with many streams each keeps its share
(at least :data:`TAIL_MIN`), so the memory streams take does not grow with their number."""

TAIL_MIN: Final = 256 << 10

RETAIN_STEP: Final = 1024
"""Messages removed by retention per step (the rest on the next append or sweep)."""

Keyed = tuple[int, str, int, int, bool]
"""What compaction needs of a keyed message: its offset, key, ``Message.size``, timestamp,
and whether it is a tombstone (an empty body)."""


class StreamHost(Resources, Protocol):
    """What a stream needs of the broker around it."""

    @property
    def streams(self) -> Mapping[str, Stream]:
        """Every stream (their tails share one budget)."""
        ...

    def trim_when_stored(self, stream: Stream) -> None:
        """Call ``stream.trim()`` once what was recorded reached the store: now, or at the
        end of the transaction being gathered (the tail keeps its records until then)."""


class Stream(StreamLog):
    """An append-only log. See the module docstring."""

    def __init__(self, address: str, settings: DestinationSettings, host: StreamHost) -> None:
        super().__init__(address, settings, host)
        self.host: StreamHost = host
        self.appended = 0  # messages taken since start
        self.removed = 0  # messages retention, compaction or a purge removed since start
        self.compacted = 0  # ... compaction removed
        self.keyed: list[Keyed] | None = [] if settings.cleanup is Cleanup.COMPACT else None
        """A compacted stream's keyed messages appended and not yet looked at by compaction
        (:mod:`chute.core.rules.compaction`), in the order appended; None on other streams."""
        self.recovered_below = 1
        """Offsets below this were recovered from the store rather than appended: compaction
        reads them back once."""
        self.recorded_first: int | None = None
        """The first offset the store last recorded for this stream (:meth:`Store.stream_first`;
        None: none yet). A restart recovers :attr:`first` from it, not from the oldest message
        kept, which compaction moves."""
        self.readers: list[StreamReader] = []
        self.delivered_before = 0  # deliveries by readers closed since start
        self.redelivered_before = 0  # ... redeliveries
        self.deleted = False
        self.forward: QueueChannel | None = None
        """In a cluster, while this node is not the stream's home (or does not know it
        yet): the queue its sends wait in to be handed over to the home
        (:mod:`chute.core.rules.cluster_streams`); None on the home and on one node."""
        self.on_wake: Callable[[Stream], None] | None = None
        """Told when readers may read on (messages appended): the home's answers to
        other nodes waiting for the stream's next messages."""

    def leave(self, reader: StreamReader) -> None:
        """``reader`` closed: it reads no more, and what it delivered stays counted (the
        stream's ``delivered`` is a counter, it never goes down)."""
        if reader in self.readers:
            self.readers.remove(reader)
            self.delivered_before += reader.delivered
            self.redelivered_before += reader.redelivered

    @property
    def delivered(self) -> int:
        """Deliveries to the stream's consumers since start, closed readers' included."""
        return self.delivered_before + sum(r.delivered for r in self.readers)

    @property
    def redelivered(self) -> int:
        """Redeliveries to the stream's consumers since start, closed readers' included."""
        return self.redelivered_before + sum(r.redelivered for r in self.readers)

    def hold(self, seq: int) -> None:
        """``seq`` is a prepared send's, placed at its commit: readers wait below it."""
        self.hold_range(seq, seq + 1)

    def hold_range(self, first: int, end: int) -> None:
        """:meth:`hold` each of ``[first, end)`` (a prepared chunk's run): one run held."""
        self.reserved.update(range(first, end))
        heapq.heappush(self._held, [first, end])

    def release(self, seq: int) -> None:
        """A reserved offset that will never be placed (its transaction rolled back)."""
        self.reserved.discard(seq)
        self._wake()

    # -- appending ------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Keep messages the store already recorded (a transaction's together: retention
        and waiting readers look once); readers waiting for them get them."""
        if not entries:
            return
        reserved = self.reserved
        if reserved:
            for entry in entries:
                reserved.discard(entry.seq)
        if not self._keep_run(entries):
            for entry in entries:
                if not self.count or entry.seq < self.first:
                    self.first = entry.seq
                self.count += 1
                self.bytes += entry.message.size
                self._keep(entry)
        self.appended += len(entries)
        keyed = self.keyed
        if keyed is not None:
            for entry in entries:
                message = entry.message
                key = message.key
                if key is not None:
                    keyed.append(
                        (entry.seq, key, message.size, message.timestamp, not message.body)
                    )
        now = self.host.clock()
        while self.retain(now, on_append=True) >= RETAIN_STEP:
            pass  # a large transaction may pass the limits by more than one step
        if self._first != self.recorded_first and self.keyed is not None:
            self._record_first()  # the first message of an empty compacted stream
        self._wake()

    def _keep_run(self, entries: Sequence[Entry]) -> bool:
        """Keep ``entries`` whole when they come in offset order after every offset
        appended so far (a batch, the usual case): one pass, the tail extended and
        trimmed once. False, keeping nothing, when they do not (a prepared send
        committed after newer ones): :meth:`_keep` then takes them one by one."""
        newest = self._newest
        size = 0
        for entry in entries:
            if entry.seq <= newest:
                return False
            newest = entry.seq
            size += entry.message.size
        count = len(entries)
        if not self.count or entries[0].seq < self._first:
            self._first = entries[0].seq
        self.count += count
        self.bytes += size
        self._newest = newest
        cost = 2 * size + HELD_OVERHEAD * count  # held_cost of each
        self._tail.extend(entries)
        self._tail_bytes += cost
        self.host.memory.used += cost
        self.host.trim_when_stored(self)
        return True

    def _keep(self, entry: Entry) -> None:
        tail = self._tail
        lo = self._tail_from
        newest, self._newest = self._newest, max(self._newest, entry.seq)
        # the tail holds every kept offset from its first on: a prepared send committed
        # older than that (or than newer ones only the store holds) is read from the store
        older = entry.seq < tail[lo].seq if lo < len(tail) else entry.seq <= newest
        if older:
            return
        cost = held_cost(entry.message)
        if len(tail) > lo and entry.seq < tail[-1].seq:
            bisect.insort(
                tail, entry, lo=self._tail_from, key=entry_seq
            )  # a prepared send's commit
        else:
            tail.append(entry)
        self._tail_bytes += cost
        self.host.memory.used += cost
        self.host.trim_when_stored(self)

    def trim(self) -> None:
        """Keep no more than :data:`TAIL_BYTES` of the newest messages in memory (less when
        many streams share :data:`TAILS_BYTES`): what goes is counted in one pass and
        dropped at once."""
        tail = self._tail
        limit = min(TAIL_BYTES, max(TAIL_MIN, TAILS_BYTES // max(1, len(self.host.streams))))
        over = self._tail_bytes - limit
        if over <= 0:
            return
        start = index = self._tail_from
        last = len(tail) - 1  # the newest stays
        freed = 0
        while freed < over and index < last:
            freed += 2 * tail[index].message.size + HELD_OVERHEAD  # held_cost, inlined
            index += 1
        if index == start:
            return
        self._tail_from = index
        self._tail_bytes -= freed
        self.host.memory.used -= freed
        self._compact_tail()

    def _drop_tail_head(self) -> None:
        tail = self._tail
        gone = tail[self._tail_from]
        self._tail_from += 1
        cost = held_cost(gone.message)
        self._tail_bytes -= cost
        self.host.memory.used -= cost
        self._compact_tail()

    def _compact_tail(self) -> None:
        """Let go of the tail's dropped entries once they are many."""
        if self._tail_from > 4096 and self._tail_from * 2 > len(self._tail):
            del self._tail[: self._tail_from]
            self._tail_from = 0

    def _wake(self) -> None:
        if self.on_wake is not None:
            self.on_wake(self)
        head = self.head
        for reader in self.readers:
            if reader.position < head and reader.router.consumers:
                reader.deliver()

    def nudge(self) -> None:
        """Let readers that stopped short of the head read on (a selective reader reads
        a bounded number of messages per fill; the broker's sweep calls this)."""
        for reader in self.readers:
            if not reader.ready and reader.position < self.head and reader.router.consumers:
                reader.deliver()

    # -- retention ------------------------------------------------------------------

    def over(self, now: int) -> bool:
        """Whether retention has something to remove (by size, count, or age when ``now``
        is given)."""
        s = self.settings
        if (s.max_bytes and self.bytes > s.max_bytes) or (
            s.max_messages and self.count > s.max_messages
        ):
            return True
        return bool(s.max_age_ms and self.count and self._oldest_time() < now - s.max_age_ms)

    def _oldest_time(self) -> int:
        tail = self._tail
        if self._tail_from < len(tail) and tail[self._tail_from].seq == self.first:
            return tail[self._tail_from].message.timestamp
        found = self._next_kept(self.first - 1, self.next_seq)
        return found.message.timestamp if found is not None else 1 << 62

    def retain(self, now: int, *, on_append: bool = False) -> int:
        """Remove the oldest messages past the retention limits, a step at a time; returns
        how many went. On append only size and count are looked at (age in the sweep)."""
        s = self.settings
        if on_append and not (
            (s.max_bytes and self.bytes > s.max_bytes)
            or (s.max_messages and self.count > s.max_messages)
        ):
            return 0
        removed = 0
        while removed < RETAIN_STEP and self.count and self.over(now):
            batch = self._sizes(self.first, self.next_seq, 64)
            if not batch:
                break
            gone: list[int] = []
            for seq, size, timestamp in batch:
                if not self._past_retention(timestamp, now):
                    break
                gone.append(seq)
                self.count -= 1
                self.bytes -= size
            if not gone:
                break
            self._forget_below(gone[-1] + 1)
            self._record_first()  # before the acks: a crash never keeps them without it
            self.host.store.acks(self.address, gone)
            self.removed += len(gone)
            removed += len(gone)
        return removed

    def _record_first(self) -> None:
        """Have the store record :attr:`first` if it moved since it last did: retention, a
        purge or the first message moved it; compaction never does (:meth:`remove`). Only
        on a compacted stream: on any other the oldest message kept is its first offset
        after a restart too, and a stream capped by retention would write a record each
        append."""
        if self.keyed is None:  # not compacted
            return
        first = self._first if self.count else self.next_seq
        if first != self.recorded_first:
            self.recorded_first = first
            self.host.store.stream_first(self.address, first)

    def _past_retention(self, timestamp: int, now: int) -> bool:
        """Whether retention removes the oldest kept, accepted at ``timestamp``."""
        s = self.settings
        return bool(
            (s.max_bytes and self.bytes > s.max_bytes)
            or (s.max_messages and self.count > s.max_messages)
            or (s.max_age_ms and timestamp < now - s.max_age_ms)
        )

    def _forget_below(self, seq: int) -> None:
        tail = self._tail
        while self._tail_from < len(tail) and tail[self._tail_from].seq < seq:
            self._drop_tail_head()
        if not self.count:
            self.first = self.next_seq
            return
        if self._tail_from < len(tail):
            oldest = tail[self._tail_from].seq
            if oldest == seq:
                self.first = seq
                return
            # what is kept below the tail is in the store (the tail keeps what the store
            # is yet to record), and an offset missing at ``seq`` (a prepared send's, held
            # or rolled back) must not send the look past the tail
            found = self._next_kept(seq - 1, oldest) if seq < oldest else None
            self.first = found.seq if found is not None else oldest
            return
        found = self._next_kept(seq - 1, self.next_seq)
        self.first = found.seq if found is not None else self.next_seq

    def remove(self, entries: Sequence[tuple[int, int]]) -> int:
        """Stop keeping the messages at these ``(offset, Message.size)``, in offset order,
        anywhere in the log (compaction: :mod:`chute.core.rules.compaction`); returns how
        many went. Their offsets become gaps every read skips, :attr:`first` included
        (it moves only by retention); offsets no longer kept (retention or a purge passed
        them) are left alone. The store records the removal.
        """
        first = self.first
        self._record_first()  # a stream recovered from a store that had none recorded
        tail = self._tail
        lo = self._tail_from
        tail_first = tail[lo].seq if lo < len(tail) else self.next_seq
        gone = {seq: size for seq, size in entries if seq >= first}
        if tail_first <= max(gone, default=0):  # some are in the tail: only those still there
            kept: list[Entry] = []
            freed = 0
            present: set[int] = set()
            for entry in tail[lo:]:
                if entry.seq in gone:
                    freed += held_cost(entry.message)
                    present.add(entry.seq)
                else:
                    kept.append(entry)
            for seq in [s for s in gone if s >= tail_first and s not in present]:
                del gone[seq]  # withdrawn: never kept
            self._tail = kept
            self._tail_from = 0
            self._tail_bytes -= freed
            self.host.memory.used -= freed
        if not gone:
            return 0
        seqs = sorted(gone)
        self.host.store.acks(self.address, seqs)
        self.gaps.update(seqs)
        self.count -= len(seqs)
        self.bytes -= sum(gone.values())
        self.removed += len(seqs)
        self.compacted += len(seqs)
        if not self.count:
            self.first = self.next_seq
        # else the first offset stays where retention left it, as Kafka's log start offset:
        # a reader there (a Spark query resuming) reads on from the next one kept
        return len(seqs)

    def forget_gaps(self, seqs: Sequence[int]) -> None:
        """The store recorded the removal of ``seqs`` (:meth:`remove`): reads need not skip
        them any longer."""
        self.gaps.difference_update(seqs)

    def withdraw(self, seq: int) -> bool:
        """Take back a message the store refused to keep; False if a reader had already
        been handed it (it is gone from the stream either way)."""
        tail = self._tail
        index = bisect.bisect_left(tail, seq, lo=self._tail_from, key=entry_seq)
        if index >= len(tail) or tail[index].seq != seq:
            return False
        entry = tail.pop(index)
        if self.keyed:  # rare (a disk fault): compaction must not count it as kept
            self.keyed = [k for k in self.keyed if k[0] != seq]
        cost = held_cost(entry.message)
        self._tail_bytes -= cost
        self.host.memory.used -= cost
        self.count -= 1
        self.bytes -= entry.message.size
        if seq == self.first:
            self._forget_below(seq + 1)
            self._record_first()
        handed = False
        for reader in self.readers:
            waiting = reader.withdraw(seq)
            if waiting is not None:
                reader.settle(waiting, acked=False)
            elif reader.position > seq:
                handed = True
        return not handed

    def purge(self) -> int:
        """Remove every message kept; returns how many."""
        count = 0
        while self.count:
            batch = self._sizes(self.first, self.next_seq, RETAIN_STEP)
            if not batch:
                break
            self.bytes -= sum(size for _, size, _ in batch)
            self.count -= len(batch)
            count += len(batch)
            self._forget_below(batch[-1][0] + 1)
            self._record_first()  # before the acks, as retention's
            self.host.store.acks(self.address, [seq for seq, _, _ in batch])
        self.count = self.bytes = 0
        self.first = self.next_seq
        self._record_first()
        self.removed += count
        return count

    def drop(self) -> None:
        """The stream is deleted: give back the memory of its tail."""
        self.deleted = True
        while self._tail_from < len(self._tail):
            self._drop_tail_head()

    def restore(self, first: int, count: int, size: int, recorded: int | None = None) -> None:
        """Recovery found ``count`` messages (``size`` bytes) from offset ``first`` on, and the
        first offset the store recorded (``recorded``, None if none): the stream's first
        offset is ``recorded`` if that is lower (compaction removed the oldest since), else
        ``first`` (a crash cut the acks of what retention removed, which is kept again; or
        a store written before first offsets were recorded)."""
        self.recorded_first = recorded
        if recorded is not None:
            first = min(first, recorded)
        self.first = first if count else self.next_seq
        self._newest = self.next_seq - 1  # what the store holds is newer than the tail
        self.recovered_below = self.next_seq
        self.count = count
        self.bytes = size

    def __repr__(self) -> str:
        return f"Stream({self.address!r}, first={self.first}, head={self.head})"
