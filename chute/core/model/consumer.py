"""Consumers: the receivers a queue's router pushes messages to.

As in JBoss Messaging: a receiver never pulls; it declares availability and the channel
pushes. Here availability is *credit* (the prefetch window): a consumer with
credit 0 is skipped by its router until its adapter grants more.

Ack modes:

* ``auto`` — the message is settled the moment it is pushed (STOMP ``ack:auto``;
  at-most-once if the connection dies with it unread).
* ``client`` — an ack settles every message delivered to this consumer up to
  and including the acked one, in delivery order (cumulative).
* ``individual`` — an ack settles exactly one message.

Unsettled messages are *in flight*: they still count against the queue's
bounds and go back to the queue, in their place, if the consumer closes. An
ack or nack takes what it covers out of flight (:meth:`BrokerConsumer.take_acked`);
the queue (in a transaction, its commit) then settles or requeues it.

A queue picks the consumer of each message with a :class:`PointToPointRouter`.
A consumer knows its queue only through :class:`ConsumedQueue`, the part of
:class:`~chute.core.model.queue.QueueChannel` that sessions and drivers use on a
consumer's behalf (the queue module imports this one, never the reverse).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from chute.core.model.selector import Selector
from chute.errors import ChuteError, ConsumerError
from chute.message import Message


class AckMode(enum.Enum):
    AUTO = "auto"
    CLIENT = "client"
    INDIVIDUAL = "individual"


class Entry:
    """A message's place in one queue: its sequence number and delivery history.

    The message object may be shared by several entries (a topic's fan-out);
    the entry's own fields are what differ per queue.
    """

    __slots__ = ("delivery_count", "message", "origin", "redelivered", "seq")

    def __init__(
        self,
        seq: int,
        message: Message,
        delivery_count: int = 0,
        redelivered: bool = False,
        origin: Fanout | None = None,
    ) -> None:
        self.seq = seq
        self.message = message
        self.delivery_count = delivery_count
        self.redelivered = redelivered
        self.origin = origin

    def __repr__(self) -> str:
        return f"Entry(seq={self.seq}, deliveries={self.delivery_count}, {self.message!r})"


def as_delivered(entry: Entry) -> Message:
    """The message as its next delivery will show it (for selectors over JMSRedelivered and
    JMSXDeliveryCount). The stored message itself never changes: it may be shared."""
    if not entry.delivery_count and not entry.redelivered:
        return entry.message
    return entry.message.replace(delivery_count=entry.delivery_count + 1, redelivered=True)


class Fanout(Protocol):
    """Told when a copy of a fanned-out entry (login-name queues) is settled or dropped."""

    def copy_finished(self, entry: Entry, *, acked: bool) -> None: ...


class ConsumedQueue(Protocol):
    """What a consumer's session and driver may ask of the queue it consumes from
    (:class:`~chute.core.model.queue.QueueChannel` is the one implementation)."""

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def deleted(self) -> bool: ...

    def deliver(self) -> None:
        """Push waiting messages to consumers with credit."""

    def marked(self, consumer: BrokerConsumer, entry: Entry) -> bool:
        """Whether delivering ``entry`` recorded a delivery mark in the store."""

    def ack(self, consumer: BrokerConsumer, seq: int, *, cumulative: bool) -> int:
        """Settle what an ack of ``seq`` covers; how many messages it settled."""

    def settle(self, entry: Entry, *, acked: bool = True, recorded: bool = False) -> None:
        """An entry taken out of flight leaves the queue for good."""

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put entries taken out of flight back in their place, redelivered."""

    def reject(self, entry: Entry) -> None:
        """An entry taken out of flight goes to the dead-letter address."""

    def detach(self, consumer: BrokerConsumer) -> None:
        """Remove the consumer; its in-flight messages go back."""


class Receiver(Protocol):
    """JBoss Messaging's Receiver: something that handles a pushed message.

    ``handle`` must not raise; an adapter that cannot write any more should
    stop granting credit instead.
    """

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None: ...


@runtime_checkable
class Cancellable(Protocol):
    """A receiver that can be told the broker closed its consumer (the destination was
    deleted: :mod:`chute.core.rules.destinations`). A destination consumed through a receiver
    that cannot be told is not deleted."""

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """``consumer`` is closed and detached already: forget it, and tell the client
        ``error`` if there is one to tell. Must not raise."""


class BrokerConsumer:
    """One consumer on one queue. Used from the broker's loop only."""

    __slots__ = (
        "ack_mode",
        "closed",
        "credit",
        "delivered",
        "exclusive",
        "held",
        "id",
        "inflight",
        "peer",
        "prefetch",
        "queue",
        "receiver",
        "selector",
    )

    def __init__(
        self,
        consumer_id: int,
        queue: ConsumedQueue,
        receiver: Receiver,
        *,
        ack_mode: AckMode,
        credit: int,
        selector: Selector | None = None,
        exclusive: bool = False,
        peer: bool = False,
    ) -> None:
        self.id = consumer_id
        self.queue = queue
        self.receiver = receiver
        self.ack_mode = ack_mode
        self.credit = credit
        self.prefetch = credit  # the window it was opened with (for management)
        self.selector = selector
        self.exclusive = exclusive
        self.inflight: OrderedDict[int, Entry] = OrderedDict()
        self.delivered = 0
        self.closed = False
        self.peer = peer
        """A node of the cluster that has consumers of this queue (its hand-overs:
        :mod:`chute.core.rules.cluster`): tried only when no local consumer can take
        the message (:class:`PointToPointRouter`)."""
        self.held = False
        """Its connection cannot write more now (a slow client): skipped as if without
        credit until released
        (:meth:`chute.core.operations.connection.BrokerConnection.hold_deliveries`)."""

    def take_acked(self, seq: int, *, cumulative: bool) -> list[Entry]:
        """Remove from the in-flight set what an ack of ``seq`` covers: ``seq`` alone, or
        with ``cumulative`` every message delivered before it too (see the module docstring).

        Raises:
            ConsumerError: ``seq`` is not in flight to this consumer.
        """
        inflight = self.inflight
        if seq not in inflight:
            raise ConsumerError(
                f"message {seq} is not awaiting an ack from consumer {self.id} "
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

    def __repr__(self) -> str:
        return (
            f"BrokerConsumer(id={self.id}, queue={self.queue.name}, credit={self.credit}, "
            f"inflight={len(self.inflight)})"
        )


class PointToPointRouter:
    """Picks one consumer per message: round-robin over those with credit.

    While an exclusive consumer is attached, only the first-attached exclusive
    consumer receives (Simple-message-queue's single sink); the others stand by.

    Peer consumers (other nodes of a cluster, :attr:`BrokerConsumer.peer`) are a lower
    tier: a message goes to one only when no local consumer could take it (there is
    none, or none's selector matches it, whatever their credit: a slow local consumer
    keeps its backlog, as Artemis's ``OFF_WITH_REDISTRIBUTION`` does), round-robin
    among the peers. Credit alone must not decide it: two nodes whose consumers are
    both busy would hand the same message back and forth. :meth:`pick` picks a peer
    only while no local consumer is attached; with selectors, the queue asks per
    message (``QueueChannel._local_takes``). A queue without peers never pays for the
    tiers (one integer tested per pick).
    """

    __slots__ = ("_exclusive", "_next", "_next_peer", "_peers", "consumers")

    def __init__(self) -> None:
        self.consumers: list[BrokerConsumer] = []
        self._next = 0
        self._next_peer = 0
        self._peers = 0
        self._exclusive: BrokerConsumer | None = None

    def add(self, consumer: BrokerConsumer) -> None:
        self.consumers.append(consumer)
        self._elect()

    def remove(self, consumer: BrokerConsumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._elect()

    def _elect(self) -> None:
        self._exclusive = next((c for c in self.consumers if c.exclusive), None)
        self._peers = sum(1 for c in self.consumers if c.peer)

    @property
    def local(self) -> list[BrokerConsumer]:
        """The consumers of this node (not peers)."""
        if not self._peers:
            return self.consumers
        return [c for c in self.consumers if not c.peer]

    def pick(self) -> BrokerConsumer | None:
        """The next consumer with credit (and advance the round-robin past it), or None.

        On the per-message path: a plain loop, no generator; a lone consumer (a queue of
        a cluster whose consumers are all on another node has one: that node's peer
        consumer) is the pick whether it is a peer or not, with no loop.
        """
        exclusive = self._exclusive
        if exclusive is not None:
            return exclusive if exclusive.credit > 0 and not exclusive.held else None
        consumers = self.consumers
        n = len(consumers)
        if n == 1:
            lone = consumers[0]
            return lone if lone.credit > 0 and not lone.held else None
        if self._peers:
            return self._pick_tiered()
        i = self._next
        for _ in range(n):
            if i >= n:
                i = 0
            c = consumers[i]
            i += 1
            if c.credit > 0 and not c.held:
                self._next = i
                return c
        return None

    def _pick_tiered(self) -> BrokerConsumer | None:
        """:meth:`pick` with peers: a local consumer, or a peer only when there is no
        local one (as :meth:`candidates` then :meth:`chosen`, in a plain loop: a queue
        of a cluster takes this path for every message)."""
        consumers = self.consumers
        n = len(consumers)
        peers = n == self._peers  # no local consumer: the peers' turn
        i = self._next_peer if peers else self._next
        for _ in range(n):
            if i >= n:
                i = 0
            c = consumers[i]
            i += 1
            if c.peer is peers and c.credit > 0 and not c.held:
                if peers:
                    self._next_peer = i
                else:
                    self._next = i
                return c
        return None

    def candidates(self) -> Iterator[BrokerConsumer]:
        """Consumers with credit, in the order the router would try them (no side effects):
        the local ones, then the peers."""
        exclusive = self._exclusive
        if exclusive is not None:
            if exclusive.credit > 0 and not exclusive.held:
                yield exclusive
            return
        consumers = self.consumers
        n = len(consumers)
        if not self._peers:
            start = self._next % n if n else 0
            for i in range(n):
                c = consumers[(start + i) % n]
                if c.credit > 0 and not c.held:
                    yield c
            return
        for peer, after in ((False, self._next), (True, self._next_peer)):
            start = after % n if n else 0
            for i in range(n):
                c = consumers[(start + i) % n]
                if c.peer is peer and c.credit > 0 and not c.held:
                    yield c

    def chosen(self, consumer: BrokerConsumer) -> None:
        """Advance the round-robin past ``consumer`` (after a selective choice)."""
        try:
            after = self.consumers.index(consumer) + 1
        except ValueError:
            after = 0
        if consumer.peer:
            self._next_peer = after
        else:
            self._next = after
