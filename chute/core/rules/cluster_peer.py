"""What a node's cluster keeps of each other node (:class:`Peer`), and what it needs of its
broker (:class:`ClusterHost`): shared by :mod:`chute.core.rules.cluster` (the sending side,
demand, recovery) and :mod:`chute.core.rules.cluster_receive` (the receiving side).

A peer holds the hand-overs in doubt with that node (sent, not yet confirmed, each with
its out ledger record: :class:`Sent`), the keys received from it and not yet released
(each with the in ledger record naming it, one record for all the keys stored in one
commit), its peer consumers here and what it announced.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol

from chute.core.model.cluster import IN_PREFIX, OUT_PREFIX, Handover, HandoverKey, Ledger
from chute.core.model.consumer import BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.store import StoredMessage
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic
from chute.core.rules.cluster_owned import StandInHost
from chute.core.rules.cluster_window import LinkWindow
from chute.core.rules.routing import Route
from chute.core.rules.subscriptions import Subscriptions
from chute.message import Message


class ClusterHost(StandInHost, Protocol):
    """What a node's cluster needs of its broker."""

    ledgers: dict[str, tuple[int, list[StoredMessage]]]
    demand_watch: Callable[[QueueChannel], None] | None
    subscriptions: Subscriptions

    def atomically(self) -> AbstractContextManager[None]: ...

    def route(
        self, dest: QueueChannel | Topic | Stream, message: Message, *, arrived: bool = False
    ) -> Route: ...

    def place(self, route: Route) -> None: ...

    def wait_for_room(self, address: str | None, wake: Callable[[], None]) -> None: ...


class Sent(NamedTuple):
    """A hand-over sent and not yet confirmed (a named tuple: one per hand-over)."""

    queue: QueueChannel
    consumer: BrokerConsumer
    entry: Entry
    record: int  # its out ledger record, 0 if none (a message the store never held)
    handover: Handover


class Peer:
    """What this node knows of one other node."""

    def __init__(self, name: str, window: LinkWindow) -> None:
        self.name = name
        self.up = False
        self.window = window
        self.out = Ledger(OUT_PREFIX + name)
        self.received_ledger = Ledger(IN_PREFIX + name)
        self.next_n = 1
        self.in_doubt: dict[HandoverKey, Sent] = {}
        self.received: dict[HandoverKey, int] = {}  # key -> in ledger record (0: none)
        self.keys_of: dict[int, int] = {}  # in ledger record -> its keys not yet released
        self.consumers: dict[str, BrokerConsumer] = {}  # address -> its peer consumer
        self.wants: set[str] = set()  # the addresses it announced demand for

    def doubt(self, key: HandoverKey, sent: Sent) -> None:
        """``sent`` left (or will leave) for this node, unconfirmed: at the link's window,
        every peer consumer standing for this node is held."""
        self.in_doubt[key] = sent
        if self.window.add(sent.handover.message.size):
            self.window.sent(self.consumers.values())

    def settle(self, key: HandoverKey) -> Sent | None:
        """``key`` is in doubt no more (confirmed, refused, or its queue gone)."""
        sent = self.in_doubt.pop(key, None)
        if sent is not None:
            self.window.remove(sent.handover.message.size)
        return sent


def peer_queue(consumer: BrokerConsumer) -> QueueChannel:
    """The queue a peer consumer consumes (always a :class:`QueueChannel`)."""
    queue = consumer.queue
    if not isinstance(queue, QueueChannel):
        raise TypeError(f"a peer consumer of {queue!r}, not a queue")
    return queue
