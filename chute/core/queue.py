"""The storing channel with a point-to-point router: seed 004's Queue.

A :class:`QueueChannel` holds entries that wait for delivery in ten FIFO lanes,
one per priority, so the order is "higher priority first, then the order the
broker accepted them" at O(1) per message. It pushes to its consumers through
a :class:`PointToPointRouter` (round-robin among consumers with credit; only
the active exclusive consumer while one is attached). Delivery is synchronous
when it can be (a message arriving at an idle queue with a ready consumer
never waits in a lane), stored otherwise, as seed 004's Channel prefers.

Everything that leaves a queue leaves through :meth:`QueueChannel.settle`
(consumed, expired, dead-lettered, dropped), which keeps the counters, the
store and the bounds in step. Anything that must go elsewhere (the
dead-letter and expiry addresses) is handed to the :class:`QueueHost`.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from chute.core.consumer import AckMode, Consumer, Entry
from chute.core.settings import DestinationSettings
from chute.core.store import AckOp, Store
from chute.errors import ConsumerError
from chute.message import Message

PRIORITIES = 10


class Reason(enum.Enum):
    """Why a message left a queue without being consumed."""

    EXPIRED = "expired"
    MAX_DELIVERIES = "max-deliveries"
    REJECTED = "rejected"  # nack(requeue=False)
    OVERFLOW = "overflow"  # overflow policy dead-letter
    DROPPED_OLDEST = "dropped-oldest"  # overflow policy drop-oldest
    FORWARD_FAILED = "forward-failed"  # a callback queue could not forward


class QueueHost(Protocol):
    """What a queue needs from the broker around it."""

    store: Store
    clock: Callable[[], int]

    def divert(self, queue: QueueChannel, entry: Entry, reason: Reason) -> None:
        """Send a message that left ``queue`` unconsumed to its dead-letter or expiry address."""

    def room_freed(self, queue: QueueChannel) -> None:
        """A bounded queue has room again (wakes producers waiting under ``block``)."""


class PointToPointRouter:
    """Picks one consumer per message: round-robin over those with credit.

    While an exclusive consumer is attached, only the first-attached exclusive
    consumer receives (seed 002's single sink); the others stand by.
    """

    __slots__ = ("_exclusive", "_next", "consumers")

    def __init__(self) -> None:
        self.consumers: list[Consumer] = []
        self._next = 0
        self._exclusive: Consumer | None = None

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._elect()

    def remove(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._elect()

    def _elect(self) -> None:
        self._exclusive = next((c for c in self.consumers if c.exclusive), None)

    def pick(self) -> Consumer | None:
        """The next consumer with credit (and advance the round-robin past it), or None.

        On the per-message path: a plain loop, no generator.
        """
        exclusive = self._exclusive
        if exclusive is not None:
            return exclusive if exclusive.credit > 0 else None
        consumers = self.consumers
        n = len(consumers)
        i = self._next
        for _ in range(n):
            if i >= n:
                i = 0
            c = consumers[i]
            i += 1
            if c.credit > 0:
                self._next = i
                return c
        return None

    def candidates(self) -> Iterator[Consumer]:
        """Consumers with credit, in the order the router would try them (no side effects)."""
        exclusive = self._exclusive
        if exclusive is not None:
            if exclusive.credit > 0:
                yield exclusive
            return
        consumers = self.consumers
        n = len(consumers)
        start = self._next % n if n else 0
        for i in range(n):
            c = consumers[(start + i) % n]
            if c.credit > 0:
                yield c

    def chosen(self, consumer: Consumer) -> None:
        """Advance the round-robin past ``consumer`` (after a selective choice)."""
        try:
            self._next = self.consumers.index(consumer) + 1
        except ValueError:
            self._next = 0


class QueueChannel:
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
        self._lanes: list[deque[Entry]] = [deque() for _ in range(PRIORITIES)]
        self.ready = 0  # entries waiting in lanes
        self.held = 0  # ready + in flight
        self.held_bytes = 0
        self.expiring = 0  # held entries with an expiration (skip sweeps when 0)
        self.enqueued = 0
        self.acked = 0
        self.expired = 0
        self.dead_lettered = 0
        self.deleted = False
        self.next_seq = 1  # queues number their own messages; subscriptions use the topic's
        self._selective = 0  # consumers with a selector

    # -- entering ---------------------------------------------------------------

    def place(self, entry: Entry) -> None:
        """Take a message that was admitted (bounds already checked) and push it if possible."""
        self.held += 1
        self.held_bytes += entry.message.size
        self.enqueued += 1
        if entry.message.expiration:
            self.expiring += 1
        if not self.ready and not self._selective and self.router.consumers:
            consumer = self.router.pick()
            if consumer is not None:
                self._push(consumer, entry)
                return
        self._lanes[entry.message.priority].append(entry)
        self.ready += 1
        if self.router.consumers:
            self.deliver()

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put entries that went out back in their place, marked redelivered.

        An entry already delivered ``max_deliveries`` times is dead-lettered instead.
        """
        limit = self.settings.max_deliveries
        by_lane: dict[int, list[Entry]] = {}
        for entry in entries:
            if limit and entry.delivery_count >= limit:
                self.dead_lettered += 1
                self.host.divert(self, entry, Reason.MAX_DELIVERIES)
                self.settle(entry, acked=False)
                continue
            entry.redelivered = True
            by_lane.setdefault(entry.message.priority, []).append(entry)
        for priority, returned in by_lane.items():
            lane = self._lanes[priority]
            returned.sort(key=_seq)
            if not lane or returned[-1].seq < lane[0].seq:
                lane.extendleft(reversed(returned))
            else:  # rare: interleave with what is waiting (keeps FIFO by sequence)
                merged = list(heapq.merge(lane, returned, key=_seq))
                lane.clear()
                lane.extend(merged)
            self.ready += len(returned)
        if self.ready and self.router.consumers:
            self.deliver()

    # -- pushing ----------------------------------------------------------------

    def deliver(self) -> None:
        """Push waiting entries to consumers with credit until one side runs out."""
        if self.deleted:
            return
        while self.ready:
            if self._selective:
                if not self._deliver_selective():
                    return
                continue
            consumer = self.router.pick()
            if consumer is None:
                return
            entry = self._pop_first()
            if entry is not None:
                self._push(consumer, entry)

    def _deliver_selective(self) -> bool:
        """One push for the first consumer that has credit and a matching entry."""
        for consumer in self.router.candidates():
            selector = consumer.selector
            for lane in reversed(self._lanes):
                for entry in lane:
                    if selector is None or selector.matches(as_delivered(entry)):
                        lane.remove(entry)
                        self.ready -= 1
                        if self._expire_if_due(entry):
                            return True
                        self.router.chosen(consumer)
                        self._push(consumer, entry)
                        return True
        return False

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

    def _push(self, consumer: Consumer, entry: Entry) -> None:
        if entry.message.expiration and self._expire_if_due(entry):
            return
        entry.delivery_count += 1
        consumer.credit -= 1
        consumer.delivered += 1
        if consumer.ack_mode is AckMode.AUTO:
            self.settle(entry)
        else:
            consumer.inflight[entry.seq] = entry
            if self.durable and entry.message.persistent:
                self.host.store.delivered(self.name, entry.seq, entry.delivery_count)
        consumer.receiver.handle(consumer, entry)

    # -- leaving ----------------------------------------------------------------

    def settle(self, entry: Entry, *, acked: bool = True) -> None:
        """An entry leaves the queue for good.

        Its ack record goes to the store (inside a transaction's commit, the
        broker gathers it with the others; see ``Broker.atomically``); any
        diversion of the message must be recorded *before* this is called, so
        the store never holds an ack without the add that replaces it.
        """
        self.held -= 1
        self.held_bytes -= entry.message.size
        if entry.message.expiration:
            self.expiring -= 1
        if acked:
            self.acked += 1
        if self.durable and entry.message.persistent:
            self.host.store.ack(AckOp(self.name, entry.seq))
        if entry.origin is not None:
            entry.origin.copy_finished(entry, acked=acked)
        if self.settings.bounded:
            self.host.room_freed(self)

    def take_acked(self, consumer: Consumer, seq: int, *, cumulative: bool) -> list[Entry]:
        """Remove from ``consumer``'s in-flight set what an ack of ``seq`` covers.

        Raises:
            ConsumerError: ``seq`` is not in flight to this consumer.
        """
        inflight = consumer.inflight
        if seq not in inflight:
            raise ConsumerError(
                f"message {seq} is not awaiting an ack from consumer {consumer.id} "
                "(already acked, or never delivered to it)"
            )
        if not cumulative:
            return [inflight.pop(seq)]
        taken = []
        while True:
            s, entry = inflight.popitem(last=False)
            taken.append(entry)
            if s == seq:
                return taken

    def ack(self, consumer: Consumer, seq: int, *, cumulative: bool) -> int:
        """Settle what an ack covers; returns how many messages it settled."""
        taken = self.take_acked(consumer, seq, cumulative=cumulative)
        for entry in taken:
            self.settle(entry)
        return len(taken)

    def reject(self, entry: Entry) -> None:
        """A consumer refused the message for good: dead-letter it."""
        self.dead_lettered += 1
        self.host.divert(self, entry, Reason.REJECTED)
        self.settle(entry, acked=False)

    # -- consumers ----------------------------------------------------------------

    def attach(self, consumer: Consumer) -> None:
        self.router.add(consumer)
        if consumer.selector is not None:
            self._selective += 1
        self.deliver()

    def detach(self, consumer: Consumer) -> None:
        """Remove a consumer; its in-flight messages go back in their place."""
        if consumer.closed:
            return
        consumer.closed = True
        self.router.remove(consumer)
        if consumer.selector is not None:
            self._selective -= 1
        returned = list(consumer.inflight.values())
        consumer.inflight.clear()
        if returned:
            self.requeue(returned)
        elif self.ready:
            self.deliver()

    # -- bounds -----------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        s = self.settings
        if s.max_messages and self.held + 1 > s.max_messages:
            return False
        return not (s.max_bytes and self.held_bytes + size > s.max_bytes)

    def withdraw(self, seq: int) -> Entry | None:
        """Take the waiting entry ``seq`` out of its lane (it stays held), or None.

        For recovery of a prepared transaction's acks: O(depth), never on the
        per-message path.
        """
        for lane in self._lanes:
            for entry in lane:
                if entry.seq == seq:
                    lane.remove(entry)
                    self.ready -= 1
                    return entry
        return None

    def evict_oldest(self) -> Entry | None:
        """Remove the oldest waiting entry (lowest sequence in any lane), for drop-oldest."""
        oldest: deque[Entry] | None = None
        for lane in self._lanes:
            if lane and (oldest is None or lane[0].seq < oldest[0].seq):
                oldest = lane
        if oldest is None:
            return None
        entry = oldest.popleft()
        self.ready -= 1
        return entry

    # -- looking ----------------------------------------------------------------

    def expire_due(self, now: int) -> int:
        """Divert every waiting entry whose expiration has passed; returns how many."""
        if not self.expiring:
            return 0
        due: list[Entry] = []
        for lane in self._lanes:
            if any(0 < e.message.expiration <= now for e in lane):
                keep = [e for e in lane if not 0 < e.message.expiration <= now]
                due.extend(e for e in lane if 0 < e.message.expiration <= now)
                lane.clear()
                lane.extend(keep)
        self.ready -= len(due)
        for entry in due:
            self._expire(entry)
        return len(due)

    def snapshot(self) -> list[Entry]:
        """Every held entry (waiting and in flight) in delivery order: priority, then sequence."""
        held = [e for lane in self._lanes for e in lane]
        for consumer in self.router.consumers:
            held.extend(consumer.inflight.values())
        held.sort(key=_delivery_order)
        return held

    def drain(self) -> list[Entry]:
        """Remove and return every waiting entry (used when a queue is deleted)."""
        out = [e for lane in self._lanes for e in lane]
        for lane in self._lanes:
            lane.clear()
        self.ready = 0
        return out

    @property
    def inflight(self) -> int:
        return self.held - self.ready

    def __repr__(self) -> str:
        return f"QueueChannel({self.name!r}, ready={self.ready}, held={self.held})"


def as_delivered(entry: Entry) -> Message:
    """The message as its next delivery will show it (for selectors over JMSRedelivered and
    JMSXDeliveryCount). The stored message itself never changes: it may be shared."""
    if not entry.delivery_count and not entry.redelivered:
        return entry.message
    return entry.message.replace(delivery_count=entry.delivery_count + 1, redelivered=True)


def _seq(entry: Entry) -> int:
    return entry.seq


def _delivery_order(entry: Entry) -> tuple[int, int]:
    return (-entry.message.priority, entry.seq)
