"""The storing channel with a point-to-point router: JBoss Messaging's Queue.

A :class:`QueueChannel` holds entries that wait for delivery in ten FIFO lanes,
one per priority, so the order is "higher priority first, then the order the
broker accepted them" at O(1) per message; the work on the lanes by sequence
number (putting back, withdrawing, expiring, a cursor's range) is in
:mod:`chute.core.model.lanes`, and what a queue does by sequence number off the
per-message path (withdrawing, a cursor's range and ack) in
:mod:`chute.core.model.numbered`. It pushes to its consumers through a
:class:`~chute.core.model.consumer.PointToPointRouter` (round-robin among consumers
with credit; only the active exclusive consumer while one is attached). Delivery is
synchronous when it can be (a message arriving at an idle queue with a ready consumer
never waits in a lane), stored otherwise, as JBoss Messaging's Channel prefers.

Past the broker's memory limit a durable queue keeps new messages in the
store only; its :class:`~chute.core.model.paging.Pager` keeps those and reads them
back in order as the lanes run low.

Everything that leaves a queue leaves through :meth:`QueueChannel.settle`
(consumed, expired, dead-lettered, dropped), which keeps the counters, the
store and the bounds in step. Anything that must go elsewhere (the
dead-letter and expiry addresses) is handed to the :class:`QueueHost`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from chute.core.model import lanes
from chute.core.model.consumer import (
    AckMode,
    BrokerConsumer,
    Entry,
    PointToPointRouter,
    as_delivered,
)
from chute.core.model.numbered import Numbered
from chute.core.model.paging import HELD_OVERHEAD, Pager, Resources, held_cost
from chute.core.model.selector import Selector
from chute.core.model.settings import SINK_MEMORY_SHARE, DestinationSettings
from chute.core.model.store import AckOp

# A paging queue reads back its next window when fewer than this are waiting; a queue
# with fewer waiting never starts paging (its consumers keep up: paging would only
# write each message out and read it straight back).
PAGE_LOW = 64


class Reason(enum.Enum):
    """Why a message left a queue without being consumed."""

    EXPIRED = "expired"
    MAX_DELIVERIES = "max-deliveries"
    REJECTED = "rejected"  # nack(requeue=False)
    OVERFLOW = "overflow"  # overflow policy dead-letter
    DROPPED_OLDEST = "dropped-oldest"  # overflow policy drop-oldest
    FORWARD_FAILED = "forward-failed"  # a callback queue could not forward


class QueueHost(Resources, Protocol):
    """What a queue needs from the broker around it."""

    flow_backlog: int  # waiting messages that make a queue with consumers push back; 0 = never
    max_subscription_bytes: int  # bound of a non-durable subscription of an unbounded topic

    def congested(self, queue: QueueChannel) -> None:
        """``queue`` has consumers and a backlog past ``flow_backlog``: its producers should
        pause (see ``QueueChannel.flow_waiters``)."""

    def can_page(self) -> bool:
        """Whether queues page at all (a memory limit is set)."""

    def defer_page_in(self, queue: QueueChannel) -> bool:
        """True if ``queue`` must not read from the store now (a transaction's records are
        being gathered); the host calls ``queue.deliver()`` once they reached the store."""

    def divert(self, queue: QueueChannel, entry: Entry, reason: Reason) -> None:
        """Send a message that left ``queue`` unconsumed to its dead-letter or expiry address."""

    def room_freed(self, queue: QueueChannel) -> None:
        """A bounded queue has room again (wakes producers waiting under ``block``)."""

    def consumers_changed(self, queue: QueueChannel) -> None:
        """A local consumer was attached to ``queue`` or left it, or ``queue`` is a
        subscription made or dropped (a cluster tells the other nodes:
        :mod:`chute.core.rules.cluster`)."""


class QueueChannel(Numbered):
    """A queue (or a subscription, or a session pipe). Used from the broker's loop only."""

    def __init__(
        self,
        name: str,
        address: str,
        settings: DestinationSettings,
        host: QueueHost,
        *,
        durable: bool = True,
    ) -> None:
        self.name = name  # unique; the store knows the queue by it
        self.address = address  # what users see (a topic's subscriptions show the topic)
        self.settings = settings
        self.host = host
        self.durable = durable
        self.router = PointToPointRouter()
        self._lanes = lanes.new_lanes()
        self.ready = 0  # entries waiting in lanes
        self.held = 0  # ready + in flight
        self.held_bytes = 0
        self.expiring = 0  # held entries with an expiration (skip sweeps when 0)
        self.enqueued = 0
        self.acked = 0
        self.expired = 0
        self.dead_lettered = 0
        self.delivered = 0  # deliveries to consumers, redeliveries included
        self.redelivered = 0  # ... of messages delivered before
        self.attached = 0  # consumers ever attached (use, for idle removal)
        self.deleted = False
        self.next_seq = 1  # queues number their own messages; subscriptions use the topic's
        self._selective = 0  # consumers with a selector
        self.pager = Pager(name, address, host)  # messages that live only in the store
        # False while every lane is in sequence order, which lets a browse bisect a lane
        # (chute.core.operations.browse); set when a placement may break it, cleared by a
        # browse's scan
        self.out_of_order = False
        # producer flow control: called once the backlog is down to half of flow_backlog
        self.flow_waiters: list[Callable[[], None]] = []

    # -- entering ---------------------------------------------------------------

    def place(self, entry: Entry) -> None:
        """Take a message that was admitted (bounds already checked) and push it if possible."""
        message = entry.message
        if (
            self.settings.transient_in_memory
            and not message.persistent
            and not self._room_in_memory(entry)
        ):
            return
        size = message.size
        self.held += 1
        self.held_bytes += size
        self.enqueued += 1
        if message.expiration:
            self.expiring += 1
        memory = self.host.memory
        pager = self.pager
        cost = 2 * size + HELD_OVERHEAD  # held_cost(message), inline on the hot path
        if (
            (
                pager.count
                or (memory.limit and memory.used + cost > memory.limit and self.ready >= PAGE_LOW)
            )
            and self.durable
            and (message.persistent or not self.settings.transient_in_memory)
            and pager.page_out(entry)
        ):
            if self.router.consumers:
                if not self.ready:
                    self.deliver()  # a consumer is starving: read the backlog back
                flow = self.host.flow_backlog
                if flow and pager.count + self.ready >= flow and self._consumed():
                    self.host.congested(self)
            return
        memory.used += cost
        if entry.seq > pager.top_seq:  # the pager's invariant (chute.core.model.paging), inline
            if pager.count:  # held ahead of paged messages (a transaction): read-back skips it
                pager.skip.add(entry.seq)
                self.out_of_order = True  # the read-back will put lower numbers behind it
            else:
                pager.top_seq = entry.seq
        else:  # numbered before one already held (a prepared send placed at its commit)
            self.out_of_order = True
        if not self.ready and not self._selective and self.router.consumers:
            consumer = self.router.pick()
            if consumer is not None:
                self._push(consumer, entry)
                return
        self._lanes[entry.message.priority].append(entry)
        self.ready += 1
        if self.router.consumers:
            self.deliver()
            flow = self.host.flow_backlog
            if flow and self.ready + pager.count >= flow and self._consumed():
                self.host.congested(self)

    def _consumed(self) -> bool:
        """Whether a consumer may take from this queue, for producer flow control: a
        node's peer consumer on hold (its link down, or its consumers gone) takes
        nothing, and a queue only it has is consumed by nobody."""
        return any(not (c.peer and c.held) for c in self.router.consumers)

    def _room_in_memory(self, entry: Entry) -> bool:
        """Room under ``max_memory`` and this sink's share of it for a non-persistent message
        it may not page: its oldest such leave (diverted); False: the new one leaves."""
        memory = self.host.memory
        cost = held_cost(entry.message)
        share = memory.limit // SINK_MEMORY_SHARE
        while memory.limit and (
            memory.used + cost > memory.limit
            or 2 * (self.held_bytes - self.pager.size)
            + HELD_OVERHEAD * (self.held - self.pager.count)
            + cost
            > share
        ):
            oldest = lanes.take_oldest(self._lanes, lambda e: not e.message.persistent)
            if oldest is None:
                self.dead_lettered += 1
                self.host.divert(self, entry, Reason.OVERFLOW)
                return False
            self.ready -= 1
            self.dead_lettered += 1
            self.host.divert(self, oldest, Reason.DROPPED_OLDEST)
            self.settle(oldest, acked=False)
        return True

    @property
    def paged(self) -> int:
        """Messages held only in the store (see :mod:`chute.core.model.paging`)."""
        return self.pager.count

    @property
    def paged_bytes(self) -> int:
        return self.pager.size

    def restore_paged(self, count: int, size: int, *, after: int, up_to: int) -> None:
        """Recovery left ``count`` live messages (about ``size`` bytes) numbered in
        (``after``, ``up_to``] in the store: this queue pages them from the start."""
        self.held += count
        self.held_bytes += size
        self.enqueued += count
        self.pager.restore(count, size, after=after, up_to=up_to)

    def _page_in(self) -> None:
        """Read the next window of paged messages back from the store into the lanes."""
        if self.host.defer_page_in(self):
            return
        read = self.pager.read_back()
        if read is None:
            return
        by_priority = self._lanes
        for entry in read.entries:
            by_priority[entry.message.priority].append(entry)
        self.ready += len(read.entries)
        self.expiring += read.expiring
        count, size = read.gone
        self.held -= count
        self.held_bytes -= size

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put entries that went out back in their place, marked redelivered.

        An entry already delivered ``max_deliveries`` times is dead-lettered instead.
        """
        limit = self.settings.max_deliveries
        returned: list[Entry] = []
        for entry in entries:
            if limit and entry.delivery_count >= limit:
                self.dead_lettered += 1
                self.host.divert(self, entry, Reason.MAX_DELIVERIES)
                self.settle(entry, acked=False)
                continue
            entry.redelivered = True
            returned.append(entry)
        self._to_lanes(returned)
        if self.ready and self.router.consumers:
            self.deliver()

    def put_back(self, entries: Iterable[Entry]) -> None:
        """Put entries :meth:`withdraw_many` took back in their place, as they were."""
        self._to_lanes(entries)
        self.out_of_order = True  # one taken from the pager sits ahead of paged ones
        if self.ready:
            self.deliver()

    def _to_lanes(self, entries: Iterable[Entry]) -> None:
        self.ready += lanes.merge_back(self._lanes, entries)

    # -- pushing ----------------------------------------------------------------

    def deliver(self) -> None:
        """Push waiting entries to consumers with credit until one side runs out."""
        try:
            self._deliver()
        finally:
            if self.flow_waiters:
                self.relieve()

    def relieve(self) -> None:
        """Wake paused producers once the backlog is down to half of ``flow_backlog`` (or
        nobody consumes any more, or the queue is gone)."""
        if (
            self.deleted
            or not self.router.consumers
            or (self.ready + self.pager.count) * 2 <= self.host.flow_backlog
        ):
            waiters, self.flow_waiters = self.flow_waiters, []
            for wake in waiters:
                wake()

    def _deliver(self) -> None:
        if self.deleted:
            return
        pager = self.pager
        if pager.count and self.ready < PAGE_LOW:
            self._page_in()
        while self.ready:
            if pager.count and self.ready < PAGE_LOW:
                self._page_in()
            if self._selective:
                if not self._deliver_selective():
                    return
                continue
            consumer = self.router.pick()
            if consumer is None:
                return
            if len(self.router.consumers) == 1 and not pager.count:
                self._deliver_lone(consumer)
                continue
            entry = self._pop_first()
            if entry is not None:
                self._push(consumer, entry)

    def _deliver_lone(self, consumer: BrokerConsumer) -> None:
        """Push waiting entries to ``consumer``, the queue's lone consumer, in delivery
        order while it may take them: what :meth:`_deliver`'s loop does, with the router's
        pick (one consumer: it, while it has credit and is not held) and the lanes' scan
        made once per run, not per message. A queue that is not paging only (paging reads
        back as the lanes run low: :meth:`_deliver` does that between runs)."""
        router = self.router
        push = self._push
        for lane in reversed(self._lanes):
            while lane:
                entry = lane.popleft()
                self.ready -= 1
                push(consumer, entry)  # an expired one is diverted there, not pushed
                consumers = router.consumers
                if (
                    consumer.credit <= 0
                    or consumer.held
                    or self._selective
                    or len(consumers) != 1
                    or consumers[0] is not consumer
                ):
                    return

    def _deliver_selective(self) -> bool:
        """One push for the first consumer that has credit and a matching entry."""
        for consumer in self.router.candidates():
            if consumer.peer and any(
                not c.peer and c.selector is None for c in self.router.consumers
            ):
                continue  # a local consumer takes everything: no peer may take anything
            selector = consumer.selector
            for lane in reversed(self._lanes):
                for entry in lane:
                    if (selector is None or selector.matches(as_delivered(entry))) and not (
                        consumer.peer and self._local_takes(entry)
                    ):
                        lane.remove(entry)
                        self.ready -= 1
                        if self._expire_if_due(entry):
                            return True
                        self.router.chosen(consumer)
                        self._push(consumer, entry)
                        return True
        return False

    def _local_takes(self, entry: Entry) -> bool:
        """Whether a local consumer could take ``entry`` (credit aside): then no peer may
        (:class:`~chute.core.model.consumer.PointToPointRouter`)."""
        message = as_delivered(entry)
        return any(
            not c.peer and (c.selector is None or c.selector.matches(message))
            for c in self.router.consumers
        )

    def _pop_first(self) -> Entry | None:
        """The next entry in delivery order, skipping (and diverting) expired ones."""
        for lane in reversed(self._lanes):
            if lane:
                entry = lane.popleft()
                self.ready -= 1
                if entry.message.expiration and self._expire_if_due(entry):
                    return None
                return entry
        return None

    def _expire_if_due(self, entry: Entry) -> bool:
        if entry.message.expiration and entry.message.expiration <= self.host.clock():
            self._expire(entry)
            return True
        return False

    def _expire(self, entry: Entry) -> None:
        """An expired entry leaves for the expiry address."""
        self.expired += 1
        self.host.divert(self, entry, Reason.EXPIRED)
        self.settle(entry, acked=False)

    def _push(self, consumer: BrokerConsumer, entry: Entry) -> None:
        if entry.message.expiration and self._expire_if_due(entry):
            return
        entry.delivery_count += 1
        consumer.credit -= 1
        consumer.delivered += 1
        self.delivered += 1
        if entry.redelivered:
            self.redelivered += 1
        if consumer.ack_mode is AckMode.AUTO:
            self.settle(entry)
        else:
            consumer.inflight[entry.seq] = entry
            if self.durable and entry.message.persistent and not consumer.peer:
                # a hand-over (a peer consumer's) is no delivery: its out ledger record
                # says what is in doubt, with the message's own count
                self.host.store.delivered(self.name, entry.seq, entry.delivery_count)
        consumer.receiver.handle(consumer, entry)

    def marked(self, consumer: BrokerConsumer, entry: Entry) -> bool:
        """Whether delivering ``entry`` to ``consumer`` recorded a delivery mark in the store
        (a driver then holds the delivery until the mark is durable: see
        ``StreamConnection.mark_delivery``)."""
        return (
            consumer.ack_mode is not AckMode.AUTO
            and self.durable
            and entry.message.persistent
            and not consumer.peer
        )

    # -- leaving ----------------------------------------------------------------

    def settle(self, entry: Entry, *, acked: bool = True, recorded: bool = False) -> None:
        """An entry leaves the queue for good.

        Its ack record goes to the store (inside a transaction's commit, the
        broker gathers it with the others; see ``Broker.atomically``) unless
        ``recorded`` (a prepared transaction's commit record carries it); any
        diversion of the message must be recorded *before* this is called, so
        the store never holds an ack without the add that replaces it.
        """
        if self._leave(entry, acked) and not recorded:
            self.host.store.ack(AckOp(self.name, entry.seq))
        if entry.origin is not None:
            entry.origin.copy_finished(entry, acked=acked)
        if self.settings.bounded:
            self.host.room_freed(self)

    def _leave(self, entry: Entry, acked: bool) -> bool:
        """The queue's accounting of :meth:`settle`; True if the store must record an ack."""
        message = entry.message
        size = message.size
        self.held -= 1
        self.held_bytes -= size
        self.host.memory.used -= 2 * size + HELD_OVERHEAD  # held_cost(message)
        if message.expiration:
            self.expiring -= 1
        if acked:
            self.acked += 1
        return self.durable and (
            message.persistent
            or bool(self.pager.transient and self.pager.forget_transient(entry.seq))
        )

    def ack(self, consumer: BrokerConsumer, seq: int, *, cumulative: bool) -> int:
        """Settle what an ack covers; returns how many messages it settled.

        The store gets the acks of a cumulative ack in one call (``Store.acks``).
        """
        taken = consumer.take_acked(seq, cumulative=cumulative)
        if len(taken) == 1:
            self.settle(taken[0])
            return 1
        self.settle_acked(taken)
        return len(taken)

    def settle_acked(self, entries: Sequence[Entry]) -> None:
        """Entries taken from their consumer's in-flight set, acked, leave the queue for
        good: :meth:`settle` of each, their acks given to the store in one call
        (``Store.acks``)."""
        recorded = [entry.seq for entry in entries if self._leave(entry, True)]
        if recorded:
            self.host.store.acks(self.name, recorded)
        for entry in entries:
            if entry.origin is not None:
                entry.origin.copy_finished(entry, acked=True)
        if self.settings.bounded:
            self.host.room_freed(self)

    def reject(self, entry: Entry) -> None:
        """A consumer refused the message for good: dead-letter it."""
        self.dead_lettered += 1
        self.host.divert(self, entry, Reason.REJECTED)
        self.settle(entry, acked=False)

    # -- consumers ----------------------------------------------------------------

    def attach(self, consumer: BrokerConsumer) -> None:
        self.attached += 1
        self.router.add(consumer)
        if consumer.selector is not None:
            self._selective += 1
        if not consumer.peer:
            self.host.consumers_changed(self)
        self.deliver()

    def reselect(self, consumer: BrokerConsumer, selector: Selector | None) -> None:
        """Give an attached consumer another selector (a peer consumer whose node's
        consumers changed) and push what it may take now."""
        self._selective += (selector is not None) - (consumer.selector is not None)
        consumer.selector = selector
        if self.ready:
            self.deliver()

    def detach(self, consumer: BrokerConsumer) -> None:
        """Remove a consumer; its in-flight messages go back in their place."""
        if consumer.closed:
            return
        consumer.closed = True
        self.router.remove(consumer)
        if consumer.selector is not None:
            self._selective -= 1
        returned = list(consumer.inflight.values())
        consumer.inflight.clear()
        if not consumer.peer:
            self.host.consumers_changed(self)
        if returned:
            self.requeue(returned)
        elif self.ready:
            self.deliver()
        if self.flow_waiters:
            self.relieve()

    def evict_consumers(self) -> list[BrokerConsumer]:
        """Detach every consumer, keeping its in-flight messages from going back (the queue
        is being deleted: they go with it); returns the consumers."""
        consumers = list(self.router.consumers)
        memory = self.host.memory
        for consumer in consumers:
            consumer.closed = True
            self.router.remove(consumer)
            memory.used -= sum(held_cost(e.message) for e in consumer.inflight.values())
            consumer.inflight.clear()
        self._selective = 0
        return consumers

    # -- bounds -----------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        s = self.settings
        if s.max_messages and self.held + 1 > s.max_messages:
            return False
        return not (s.max_bytes and self.held_bytes + size > s.max_bytes)

    # -- looking ----------------------------------------------------------------

    def expire_due(self, now: int) -> int:
        """Divert every waiting entry whose expiration has passed; returns how many."""
        if not self.expiring:
            return 0
        due = lanes.take_due(self._lanes, now)
        self.ready -= len(due)
        for entry in due:
            self._expire(entry)
        return len(due)

    @property
    def lanes(self) -> tuple[deque[Entry], ...]:
        """The waiting entries, one lane per priority (lowest first); for reading only."""
        return tuple(self._lanes)

    def sent_out(self) -> Iterator[Entry]:
        """The held entries that are not waiting: in flight to consumers."""
        for consumer in self.router.consumers:
            yield from consumer.inflight.values()

    def drain(self) -> list[Entry]:
        """Remove and return every waiting entry (used when a queue is deleted); they
        still count in memory until the caller settles them or forgets them."""
        out = lanes.take_all(self._lanes)
        self.ready = 0
        waiters, self.flow_waiters = self.flow_waiters, []
        for wake in waiters:  # nothing is left to wait for
            wake()
        return out

    @property
    def inflight(self) -> int:
        return self.held - self.ready - self.pager.count

    def __repr__(self) -> str:
        return f"QueueChannel({self.name!r}, ready={self.ready}, held={self.held})"
