"""Serverless topic dropboxes: publish to every subscription, and fan out ``.incoming``.

DropboxMQ 1.2 keeps topic ``a.b`` in ``root/topic-root/a/b/`` (see
:mod:`chute.dropbox.layout`). A subscription is a full dropbox of its own,
``.subscriptions/<enc(subscription)>.<enc(clientId)>/``, consumed exactly as a
queue is (:class:`~chute.dropbox.queue.QueueConsumer` on its layout).

- **Publish** (:class:`TopicPublisher`): a copy of the message goes into every
  subscription that exists when it is sent, each written in that
  subscription's ``working/`` and renamed into its ``target/``. A subscription
  created later does not see earlier messages (JMS topic semantics). With no
  subscription, the message goes nowhere.
- **Fan-out** (:func:`distribute`): non-JMS producers drop files into
  ``.incoming/target``; the distributor claims each file by rename (as any
  consumer does, as client ``distributor``), copies it into every
  subscription, then moves it to ``.incoming/processed`` (or deletes it).
  A distributor killed mid-file leaves it in ``.incoming/processing``; the
  next :func:`distribute` with the same client id puts it back first
  (:func:`~chute.dropbox.queue.recover_layout`), so some subscriptions may
  get that message twice: at least once, never lost.

Not atomic across subscriptions: a crash between two copies leaves some
subscriptions with the message and others without until the fan-out is
redone. Expired files in ``.incoming`` go to ``.incoming/expired``.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from chute.dropbox.layout import (
    QueueLayout,
    TopicLayout,
    init_subscription,
    init_topic,
    subscription_layouts,
)
from chute.dropbox.queue import ConsumerOptions, QueueConsumer, QueueProducer, recover_layout
from chute.dropbox.transcoder import dropbox_id
from chute.message import Message, now_ms

__all__ = [
    "DISTRIBUTOR",
    "TopicPublisher",
    "distribute",
    "remove_subscription",
    "subscribe",
]

log = logging.getLogger("chute.dropbox")

DISTRIBUTOR = "distributor"
"""The client id under which :func:`distribute` claims files in ``.incoming``."""


class TopicPublisher:
    """Publishes to a topic dropbox: one copy per subscription. One thread at a time."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        *,
        durable: bool = True,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.layout: TopicLayout = init_topic(root, topic)
        self._durable = durable
        self._fsync = fsync
        self._producers: dict[Path, QueueProducer] = {}
        self._sequence = itertools.count()

    def send(self, message: Message) -> list[str]:
        """Put a copy of ``message`` into every subscription; returns the
        subscription directories it went to (empty: nobody subscribes).

        A message without an id gets one here, so every copy has the same.

        Raises:
            InvalidMessage: the message cannot be written as a DropboxMQ name.
            OSError: a copy could not be written (earlier copies stay).
        """
        subscriptions = subscription_layouts(self.layout)
        if not subscriptions:
            return []
        if not message.id:  # one DropboxMQ id (it carries the time) for every copy
            stamp = message.timestamp or now_ms()
            message = message.replace(id=dropbox_id(stamp, next(self._sequence)))
        sent: list[str] = []
        for layout in subscriptions:
            self._producer(layout).send(message)
            sent.append(layout.base.name)
        return sent

    def _producer(self, layout: QueueLayout) -> QueueProducer:
        producer = self._producers.get(layout.base)
        if producer is None:
            producer = QueueProducer(layout, durable=self._durable, fsync=self._fsync)
            self._producers[layout.base] = producer
        return producer


def subscribe(
    root: str | os.PathLike[str], topic: str, subscription: str, client_id: str
) -> QueueLayout:
    """Create (if missing) a subscription's dropbox; consume it with a QueueConsumer.

    Raises:
        InvalidAddress: a bad topic, subscription or client name.
    """
    return init_subscription(init_topic(root, topic), subscription, client_id)


def remove_subscription(layout: QueueLayout) -> None:
    """Delete a subscription's dropbox and every message in it (unsubscribe)."""
    shutil.rmtree(layout.base, ignore_errors=True)


def distribute(
    root: str | os.PathLike[str],
    topic: str,
    *,
    client_id: str = DISTRIBUTOR,
    delete_processed: bool = False,
    durable: bool = True,
    limit: int = 0,
) -> int:
    """Fan out the files in the topic's ``.incoming/target`` to every subscription.

    Returns how many files were distributed (``limit`` > 0 stops after that
    many). Run one distributor per client id at a time.

    Raises:
        InvalidAddress: a bad topic name.
    """
    layout = init_topic(root, topic)
    incoming = layout.incoming
    recover_layout(incoming, client_id)  # what a killed distributor left
    consumer = QueueConsumer(
        incoming,
        "",
        client_id,
        options=ConsumerOptions(delete_processed=delete_processed, delete_expired=False),
    )
    publisher = TopicPublisher(root, topic, durable=durable)
    count = 0
    while limit <= 0 or count < limit:
        delivery = consumer.receive()
        if delivery is None:
            break
        message = delivery.message
        message.delivery_count = 0
        message.redelivered = False
        publisher.send(message)
        consumer.ack(delivery)
        count += 1
    return count
