"""Every topic's subscriptions: the one place they are named, made, restored and dropped.

A subscription (:class:`~chute.core.model.topic.Subscription`) is a queue of its
own behind a topic's router. It is created by a consumer (non-durable, shared,
durable), by a callback queue, or by a cursor on a topic (the Spark
connector), and after a restart by recovery from its stored definition. Each
way goes through :meth:`Subscriptions.create`, which registers the
subscription with its topic and here, and records the definition of a durable
one in the store, so the three stay in step.

Keys are the store names of subscriptions, unique broker-wide; the functions
below make them, and :func:`consumer_key` holds the rules by which a consumer's
options (a name, durable, shared, its connection's client id) name the
subscription it opens. Used from the broker's loop only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from chute.core.model.queue import QueueHost
from chute.core.model.selector import compile_selector
from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.model.store import QueueDefinition, QueueKind
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.errors import ConsumerError

_STORED_KINDS = {
    SubscriptionKind.DURABLE: QueueKind.SUBSCRIPTION,
    SubscriptionKind.CALLBACK: QueueKind.CALLBACK,
}
_CANNOT_PAGE = frozenset({SubscriptionKind.NON_DURABLE, SubscriptionKind.SHARED})


def consumer_key(
    topic: str,
    consumer: str,
    *,
    name: str | None,
    durable: bool,
    shared: bool,
    client_id: str | None,
) -> tuple[str, SubscriptionKind]:
    """The key and kind of the subscription a consumer of ``topic`` opens (JMS's rules):
    durable, named by the connection's client id and ``name`` (or by ``name`` alone
    when ``shared``); shared, by ``topic`` and ``name``; else a non-durable one of its
    own, keyed by ``consumer`` (unique to that consumer in the broker).

    Raises:
        ConsumerError: a durable or shared subscription without a name; a durable one
            that is not shared without a client id.
    """
    if durable:
        if not name:
            raise ConsumerError("a durable subscription needs a subscription name")
        if not shared and not client_id:
            raise ConsumerError(
                "a durable subscription needs a client id on the connection (or shared=True)"
            )
        return durable_key(name, None if shared else client_id), SubscriptionKind.DURABLE
    if shared:
        if not name:
            raise ConsumerError("a shared subscription needs a subscription name")
        return shared_key(topic, name), SubscriptionKind.SHARED
    return f"nondurable:{consumer}", SubscriptionKind.NON_DURABLE


def durable_key(name: str, client_id: str | None) -> str:
    """The key of a durable subscription (JMS: client id + name, or a shared name)."""
    return f"durable:{client_id}.{name}" if client_id else f"durable-shared:{name}"


def shared_key(topic: str, name: str) -> str:
    """The key of a non-durable shared subscription."""
    return f"shared:{topic}.{name}"


def callback_key(name: str) -> str:
    """The key of a callback queue's subscription."""
    return f"callback:{name}"


def cursor_key(topic: str, name: str) -> str:
    """The key of a topic cursor's durable subscription."""
    return f"cursor:{topic}.{name}"


class Subscriptions(Mapping[str, Subscription]):
    """Every subscription by key (a read-only mapping); see the module docstring."""

    def __init__(self, host: QueueHost) -> None:
        self.host = host
        self._by_key: dict[str, Subscription] = {}

    def __getitem__(self, key: str) -> Subscription:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def create(
        self,
        key: str,
        topic: Topic,
        kind: SubscriptionKind,
        *,
        selector: str | None = None,
        name: str | None = None,
        forward_to: str | None = None,
        owner: str | None = None,
        define: bool = True,
    ) -> Subscription:
        """Make and register a subscription of ``topic``; a durable one is also defined
        in the store unless ``define`` is False (recovery: it is defined already).

        Raises:
            InvalidSelector: a bad selector.
        """
        sub = Subscription(
            key,
            topic,
            kind,
            self._bound(topic.settings, kind),
            self.host,
            selector=compile_selector(selector) if selector else None,
            name=name,
            forward_to=forward_to,
            owner=owner,
        )
        topic.subscriptions[key] = sub
        topic.subscribed += 1
        self._by_key[key] = sub
        if define and sub.durable:
            self.host.store.define(
                QueueDefinition(
                    key,
                    _STORED_KINDS[kind],
                    topic=topic.address,
                    selector=selector or None,
                    forward_to=forward_to,
                    owner=owner,
                )
            )
        self.host.consumers_changed(sub)  # the topic's subscriptions changed (a cluster)
        return sub

    def _bound(self, settings: DestinationSettings, kind: SubscriptionKind) -> DestinationSettings:
        """A non-durable subscription cannot page: when its topic sets no bound, it holds
        at most ``max_subscription_bytes`` and a subscriber that falls behind loses its
        oldest messages to the dead-letter queue (``drop-oldest``), not the broker's
        memory."""
        limit = self.host.max_subscription_bytes
        if settings.bounded or not limit or kind not in _CANNOT_PAGE:
            return settings
        return dataclasses.replace(settings, max_bytes=limit, overflow=Overflow.DROP_OLDEST)

    def restore(self, definition: QueueDefinition, topic: Topic) -> Subscription:
        """Recreate a durable or callback subscription from its stored definition."""
        kind = (
            SubscriptionKind.CALLBACK
            if definition.kind is QueueKind.CALLBACK
            else SubscriptionKind.DURABLE
        )
        return self.create(
            definition.name,
            topic,
            kind,
            selector=definition.selector,
            forward_to=definition.forward_to,
            owner=definition.owner,
            define=False,
        )

    def drop(self, sub: Subscription) -> None:
        """Remove a subscription and discard what it holds (unsubscribing, a changed
        selector, a deleted cursor); its consumers must be detached first."""
        sub.topic.subscriptions.pop(sub.name, None)
        self._by_key.pop(sub.name, None)
        sub.deleted = True
        for entry in sub.drain():
            sub.settle(entry, acked=False)
        if sub.durable:
            self.host.store.undefine(sub.name)
        self.host.consumers_changed(sub)
