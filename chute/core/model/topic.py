"""The publish/subscribe channel: JBoss Messaging's Topic.

A :class:`Topic` stores nothing itself. It is a synchronous input pipe into a
:class:`MultipointRouter` whose receivers are :class:`Subscription` queues, each
a :class:`~chute.core.model.queue.QueueChannel` of its own: every subscription gets
its own copy (an entry; the message object is shared) and its consumers
compete on it. The topic numbers what it accepts, and every subscription keeps
that number, so a topic's sequence is one offset space for all subscribers.

Subscription kinds (keys are internal store names):

* non-durable — one per consumer, gone when the consumer closes;
* non-durable shared — named, gone when its last consumer closes;
* durable — named by client id and name (or by name alone when shared),
  outlives connections until unsubscribed;
* callback — a durable subscription whose only receiver forwards every
  message to a named destination (XmlBlaster's callback queue).
"""

from __future__ import annotations

import enum

from chute.core.model.queue import QueueChannel, QueueHost
from chute.core.model.selector import Selector
from chute.core.model.settings import DestinationSettings
from chute.message import Message


class SubscriptionKind(enum.Enum):
    NON_DURABLE = "non-durable"
    SHARED = "shared"  # non-durable, shared by name
    DURABLE = "durable"
    CALLBACK = "callback"


class Subscription(QueueChannel):
    """A topic's per-subscriber queue."""

    def __init__(
        self,
        key: str,
        topic: Topic,
        kind: SubscriptionKind,
        settings: DestinationSettings,
        host: QueueHost,
        *,
        selector: Selector | None = None,
        name: str | None = None,
        forward_to: str | None = None,
        owner: str | None = None,
    ) -> None:
        durable = kind in (SubscriptionKind.DURABLE, SubscriptionKind.CALLBACK)
        super().__init__(key, topic.address, settings, host, durable=durable)
        self.topic = topic
        self.kind = kind
        self.selector = selector
        self.subscription_name = name
        self.forward_to = forward_to
        self.owner = owner
        """The user who made it (None: nobody in particular, as without users)."""

    def has_room(self, size: int) -> bool:
        """A bound on a subscription's backlog never refuses a message to an empty one (one
        that holds nothing, waiting or unacknowledged): a message larger than
        ``max_bytes`` reaches a subscriber that keeps up, and under ``drop-oldest``
        the newest message always stays."""
        return not self.held or super().has_room(size)

    def wants(self, message: Message) -> bool:
        return self.selector is None or self.selector.matches(message)

    @property
    def selector_text(self) -> str | None:
        return self.selector.text if self.selector is not None else None

    def __repr__(self) -> str:
        return f"Subscription({self.name!r}, {self.kind.value}, held={self.held})"


class MultipointRouter:
    """Duplicates each message to every subscription whose selector matches."""

    __slots__ = ("subscriptions",)

    def __init__(self) -> None:
        self.subscriptions: dict[str, Subscription] = {}

    def route(self, message: Message) -> list[Subscription]:
        return [s for s in self.subscriptions.values() if s.wants(message)]


class Topic:
    """Used from the broker's loop only."""

    def __init__(self, address: str, settings: DestinationSettings) -> None:
        self.address = address
        self.settings = settings
        self.router = MultipointRouter()
        self.next_seq = 1
        self.published = 0
        self.subscribed = 0  # subscriptions ever made (use, for idle removal)

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        return self.router.subscriptions

    def __repr__(self) -> str:
        return f"Topic({self.address!r}, subscriptions={len(self.subscriptions)})"
