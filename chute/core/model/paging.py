"""Paging: how a durable queue keeps its memory bounded however deep its backlog.

Simple-message-queue's memory bound, after Artemis' paging. The broker keeps one
:class:`MemoryBudget` for the message data every queue holds in memory.
While it is over its limit, a durable queue stops taking new messages into
memory: it *pages* them. A paged message lives only in the store (a
persistent one was recorded there anyway; a non-persistent one is recorded
for the purpose) and the queue keeps nothing for it but its count and size.
As consumers drain the queue, it reads the paged messages back from the
store in sequence order, a window at a time (:meth:`Store.page_in`).

Invariants (per queue, kept by its :class:`Pager`):

* ``top_seq`` is the highest sequence number the queue ever held in memory;
  the paged messages are exactly the live ones in the store above it. So a
  message may be paged only if its sequence number is above ``top_seq``
  (a late transaction commit below it stays in memory), and reading back
  "everything above ``top_seq``, in order" never returns a message twice.
* Once a queue pages, every new message pages until the backlog is read
  back, so the arrival order is kept.

Costs and limits, written for users in ``docs/durability.md``: priorities
order what is in memory, so a high-priority message paged behind a backlog
waits for its turn to be read back; selectors see the in-memory window only;
temporary queues and non-durable subscriptions never page (their bound is
their overflow policy); while a transaction's records are being gathered
(:meth:`Broker.atomically`) a queue reads nothing back, since the store
does not hold them yet: it reads once they are written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from chute.core.model.consumer import Entry
from chute.core.model.store import AddOp, Store, StoredMessage
from chute.errors import StoreError
from chute.message import Message

log = logging.getLogger("chute.core.model.queue")

PAGE_BYTES: Final = 1 << 20  # how much one read-back brings in
PAGE_MIN: Final = 16  # ... but at least this many messages
PAGE_MAX: Final = 4096  # ... and at most this many

HELD_OVERHEAD: Final = 512
"""What holding one message in memory costs besides twice its ``size``: the message
and entry objects, its id, its properties' dict, the queue's slot, the journal's
index entry. Twice the size because a message received keeps its wire encoding
next to its body (a delivery reuses it). Measured by ``python -m bench.message_cost``:
a message with a 16-byte body costs ~650 bytes of the broker's memory, one with
1 KiB ~2.7 KiB."""


def held_cost(message: Message) -> int:
    """What ``message`` costs the broker's memory while a queue holds it."""
    return 2 * message.size + HELD_OVERHEAD


LOW_RATIO: Final = 0.9
"""Without a low watermark of its own, producers held at ``high`` go on below this of it."""


class MemoryBudget:
    """What every queue holds in memory (:func:`held_cost` of each message), against
    three lines: past ``limit`` durable queues page (0: never); at ``high`` producers
    start to wait (0: never), and once they wait they go on only under ``low``
    (:meth:`must_wait`; see :class:`chute.core.rules.admission.Admission`).

    The gap between ``high`` and ``low`` is hysteresis, as a thermostat has: with one
    line, the message that takes the queues over it holds the producers and the next
    one a consumer drains lets them go, so a producer would be held and let go once per
    message. ``low`` is given, or :data:`LOW_RATIO` of ``high``.
    """

    __slots__ = ("high", "limit", "low", "used")

    def __init__(self, limit: int = 0, high: int = 0, low: int = 0) -> None:
        """
        Raises:
            ValueError: a negative line, or ``low`` not under ``high`` (or given without it).
        """
        if limit < 0 or high < 0 or low < 0:
            raise ValueError(f"memory limits ({limit}, {high}, {low}) must be 0 (none) or positive")
        if low and not low < high:
            raise ValueError(
                f"the memory low watermark ({low}) must be under the high watermark ({high})"
            )
        self.limit = limit
        self.high = high
        self.low = (low or max(1, int(high * LOW_RATIO))) if high else 0
        self.used = 0

    def must_wait(self, waiting: bool) -> bool:
        """Whether producers must wait for memory now: at or past ``high``, or, while
        they wait already (``waiting``), not yet under ``low``."""
        return bool(self.high) and self.used >= (self.low if waiting else self.high)

    def __repr__(self) -> str:
        return (
            f"MemoryBudget(used={self.used}, limit={self.limit}, high={self.high}, low={self.low})"
        )


def window(paged: int, paged_bytes: int) -> int:
    """How many paged messages to read back at once: about PAGE_BYTES worth."""
    if paged <= 0:
        return 0
    average = max(1, paged_bytes // paged)
    return min(paged, max(PAGE_MIN, min(PAGE_MAX, PAGE_BYTES // average)))


class Resources(Protocol):
    """What every part of the core uses of the broker around it: where records go, the
    time and the memory budget. The base of every host: the model's own (a queue's, a
    pager's, a stream's) extend it, the rest extend the
    :class:`~chute.core.model.registry.Registry` built on it."""

    @property
    def store(self) -> Store:
        """Where records go: the store, or a transaction's gathering while one applies."""
        ...

    @property
    def clock(self) -> Callable[[], int]:
        """Now, in ms since the epoch."""
        ...

    @property
    def memory(self) -> MemoryBudget:
        """What the messages held in memory cost, against the broker's limit."""
        ...


class PagingHost(Resources, Protocol):
    """What a pager needs from the broker."""

    def can_page(self) -> bool:
        """Whether queues page at all (a memory limit is set)."""


@dataclass(slots=True)
class ReadBack:
    """What one read-back brought in, for the queue's own accounting."""

    entries: list[Entry] = field(default_factory=list)
    """In sequence order, for the queue's lanes."""
    expiring: int = 0
    """Of them, restored ones whose expiration the queue has not counted yet."""
    gone: tuple[int, int] = (0, 0)
    """(count, bytes) the queue held for paged messages the store no longer has, or the
    surplus of restored byte estimates: no longer held."""


class Pager:
    """The paged messages of one durable queue, and the read-back that keeps them in
    order (see the module docstring). Used from the broker's loop only."""

    __slots__ = (
        "address",
        "count",
        "host",
        "name",
        "size",
        "skip",
        "top_seq",
        "transient",
        "uncounted",
    )

    def __init__(self, name: str, address: str, host: PagingHost) -> None:
        self.name = name
        self.address = address
        self.host = host
        self.count = 0  # messages that live only in the store
        self.size = 0  # ... and their bytes (estimated for a lazy recovery's)
        self.top_seq = 0  # the highest sequence number ever held in memory
        # seqs above top_seq held in memory all the same (a transaction's, a withdrawn one)
        self.skip: set[int] = set()
        self.transient: set[int] = set()  # non-persistent seqs recorded for paging
        self.uncounted = (0, 0)  # seqs paged by a lazy recovery: expirations not yet counted

    def page_out(self, entry: Entry) -> bool:
        """Keep ``entry`` (of a durable queue) in the store only, if it may be paged;
        True if it was."""
        if entry.seq <= self.top_seq or entry.origin is not None or not self.host.can_page():
            return False
        message = entry.message
        if not message.persistent:  # the broker recorded the persistent ones already
            self.host.store.add(AddOp(self.address, (self.name,), entry.seq, message))
        self.count += 1
        self.size += message.size
        return True

    def restore(self, count: int, size: int, *, after: int, up_to: int) -> None:
        """Recovery left ``count`` live messages (about ``size`` bytes) numbered in
        (``after``, ``up_to``] in the store: they are paged from the start."""
        self.count += count
        self.size += size
        self.uncounted = (after, up_to)

    def read_back(self) -> ReadBack | None:
        """Read the next window of paged messages back from the store (None: the store
        cannot read now; the queue tries again later)."""
        wanted = window(self.count, self.size)
        skip = self.skip
        try:
            stored = self._read(self.top_seq, wanted)
        except StoreError as exc:
            log.warning("queue %s: cannot read paged messages back yet: %s", self.name, exc)
            return None
        memory = self.host.memory
        result = ReadBack()
        entries = result.entries
        low, high = self.uncounted
        for item in stored:
            seq = item.seq
            if seq <= self.top_seq:
                continue
            self.top_seq = seq
            if skip and seq in skip:
                skip.discard(seq)
                continue
            message = item.message
            if not message.persistent:
                self.transient.add(seq)
            if message.expiration and low < seq <= high:
                result.expiring += 1  # restored paged: its expiration was not counted yet
            self.count -= 1
            self.size -= message.size
            memory.used += held_cost(message)
            entries.append(Entry(seq, message, item.delivery_count, item.delivery_count > 0))
        if not self.count and self.size:  # restored sizes were estimates
            result.gone = (0, self.size)
            self.size = 0
        if skip:
            skip.difference_update([s for s in skip if s <= self.top_seq])
        if skip and not self.count:
            self.top_seq = max(self.top_seq, *skip)
            skip.clear()
        if not stored and self.count:
            log.error(
                "queue %s: the store holds none of its %d paged messages; counting them gone",
                self.name,
                self.count,
            )
            result.gone = (self.count, self.size)
            self.count = self.size = 0
            skip.clear()
        return result

    def peek(self, after: int, room: int) -> list[Entry]:
        """Up to ``room`` paged messages numbered above ``after``, read from the store in
        sequence order; nothing changes (browsing, cursors)."""
        skip = self.skip
        return [
            Entry(item.seq, item.message, item.delivery_count, item.delivery_count > 0)
            for item in self._read(after, room)
            if item.seq not in skip
        ]

    def _read(self, after: int, wanted: int) -> list[StoredMessage]:
        """The stored messages numbered above ``after``, in sequence order, enough that
        ``wanted`` of them are not in :attr:`skip` (fewer when the store has no more).
        Read in rounds, each asking for what is still missing: the held messages among
        them cost their own records only, where asking for ``len(skip)`` more every
        time read as many records again however few were in range."""
        skip = self.skip
        read: list[StoredMessage] = []
        missing = wanted
        while missing > 0:
            items = self.host.store.page_in(self.name, after, missing)
            read += items
            if len(items) < missing:
                break
            missing -= sum(1 for item in items if item.seq not in skip) if skip else missing
            after = items[-1].seq
        return read

    def withdraw_many(self, seqs: list[int]) -> list[Entry]:
        """Take the paged messages numbered ``seqs`` (ascending) out of the pager, in
        sequence order: they are then held in memory. Those not paged are not there.

        The store is read from ``top_seq`` on, a window about as large as what is
        asked: when the taken messages are the lowest paged ones (a move of a whole
        queue takes them so), ``top_seq`` moves past them as a read-back would, and
        nothing is left for the read-back to skip; otherwise (a selector's picks) they
        join :attr:`skip`. Asked one by one, a deep queue's move read the store once
        per message and let ``skip`` grow with every message moved, which each later
        read had to step over: quadratic.
        """
        skip = self.skip
        wanted = [s for s in seqs if s > self.top_seq and s not in skip]
        if not self.count or not wanted:
            return []
        last = wanted[-1]
        need = set(wanted)
        taken: list[Entry] = []
        lowest = True  # every paged message read so far is wanted
        after = self.top_seq
        while need:
            room = len(need)
            items = self.host.store.page_in(self.name, after, room)
            for item in items:
                seq = item.seq
                if seq > last:
                    break
                if seq in skip:
                    continue
                if seq not in need:
                    lowest = False
                    continue
                need.discard(seq)
                message = item.message
                self.count -= 1
                self.size -= message.size
                self.host.memory.used += held_cost(message)
                taken.append(Entry(seq, message, item.delivery_count, item.delivery_count > 0))
            if not need or len(items) < room or items[-1].seq >= last:
                break
            after = items[-1].seq  # held ones took room: read on
            if min(need) - 1 > after:  # paged ones not asked for lie between: skip them
                lowest = False
                after = min(need) - 1
        if not taken:
            return taken
        if lowest and len(taken) == len(wanted):
            self.top_seq = taken[-1].seq
            if skip:
                skip.difference_update([s for s in skip if s <= self.top_seq])
        else:
            skip.update(e.seq for e in taken)
        return taken

    def forget_transient(self, seq: int) -> bool:
        """A non-persistent message left: whether it had been recorded for paging (so its
        ack must be recorded too)."""
        if seq in self.transient:
            self.transient.remove(seq)
            return True
        return False
