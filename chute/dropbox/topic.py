"""Serverless topic dropboxes: publish to every subscription, and fan out ``.incoming``.

DropboxMQ 1.2 keeps topic ``a.b`` in ``root/topic-root/a/b/`` (see
:mod:`chute.dropbox.layout`). A subscription is a full dropbox of its own,
``.subscriptions/<enc(subscription)>.<enc(clientId)>/``, consumed exactly as a
queue is (:class:`~chute.dropbox.queue.QueueConsumer` on its layout).

Topics are a hierarchy, as in DropboxMQ: a message for ``news.eu`` goes to
the subscriptions of ``news.eu`` and of every topic above it (``news``),
walking from the topic's directory up to ``topic-root`` (:func:`lineage`).

- **Publish** (:class:`TopicPublisher`): a copy of the message goes into every
  subscription of the topic and of its ancestors that exists when it is sent,
  each written in that subscription's ``working/`` and renamed into its
  ``target/``. A subscription created later does not see earlier messages (JMS
  topic semantics). With no subscription, the message goes nowhere. Every
  copy has the same name, which must fit once claimed by the client of each
  subscription, as its directory names it
  (:func:`~chute.dropbox.names.subscription_claim_room`): a name too long for
  one of them is refused before any copy is written.
- **Fan-out** (:class:`Distributor`, :func:`distribute`): non-JMS producers drop
  files into ``.incoming/target``; the distributor claims each file by rename
  (as any consumer does, as client ``distributor`` unless told otherwise),
  publishes it as above, then moves it to ``.incoming/processed`` (or deletes
  it). A distributor killed mid-file leaves it in ``.incoming/processing``; the
  next distributor with the same client id puts it back first
  (:func:`~chute.dropbox.maintenance.recover_layout`), so some subscriptions may
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

from chute.dropbox.flow import WriteLock
from chute.dropbox.layout import (
    QueueLayout,
    TopicLayout,
    init_subscription,
    init_topic,
    subscription_layouts,
    topic_layout,
)
from chute.dropbox.maintenance import recover_layout
from chute.dropbox.names import subscription_claim_room
from chute.dropbox.queue import ConsumerOptions, QueueConsumer, QueueProducer
from chute.dropbox.transcoder import dropbox_id
from chute.dropbox.watch import DEFAULT_POLL_INTERVAL
from chute.errors import InvalidMessage
from chute.message import Message, now_ms

__all__ = [
    "DISTRIBUTOR",
    "Distributor",
    "TopicPublisher",
    "distribute",
    "lineage",
    "remove_subscription",
    "subscribe",
]

log = logging.getLogger("chute.dropbox")

DISTRIBUTOR = "distributor"
"""The client id under which :func:`distribute` claims files in ``.incoming``."""


def lineage(root: str | os.PathLike[str], topic: str) -> list[TopicLayout]:
    """``topic`` and every topic above it, nearest first: ``news.eu``, then ``news``.

    The topics whose subscriptions a message for ``topic`` goes to (DropboxMQ's
    distributor walks the same way, from the topic's directory up to
    ``topic-root``). Creates nothing.

    Raises:
        InvalidAddress: a bad topic name, or a level that resolves elsewhere.
    """
    parts = topic.split(".")
    return [topic_layout(root, ".".join(parts[:depth])) for depth in range(len(parts), 0, -1)]


class TopicPublisher:
    """Publishes to a topic dropbox: one copy per subscription of the topic and of
    every topic above it (:func:`lineage`). One thread at a time.

    Like DropboxMQ's publisher, a send first waits while the topic's own
    ``.incoming/write-lock.properties`` holds sends back (its ``target-limit``
    counts ``.incoming/target``; :class:`~chute.dropbox.flow.WriteLock`), for at
    most ``block_timeout`` seconds (None: as long as the lock says); the
    subscriptions' own lock files are not looked at, as DropboxMQ does not.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        *,
        durable: bool = True,
        fsync: Callable[[int], None] = os.fsync,
        block_timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self.layout: TopicLayout = init_topic(root, topic)
        self.write_lock = WriteLock(self.layout.incoming, poll_interval)
        self.block_timeout = block_timeout
        self._lineage = lineage(root, topic)
        self._durable = durable
        self._fsync = fsync
        self._producers: dict[Path, QueueProducer] = {}
        self._sequence = itertools.count()

    def subscriptions(self) -> list[QueueLayout]:
        """Every subscription dropbox a message sent now goes to, the topic's first."""
        return [sub for topic in self._lineage for sub in subscription_layouts(topic)]

    def send(self, message: Message) -> list[str]:
        """Put a copy of ``message`` into every subscription (:meth:`copy`), once the
        topic's write lock lets it.

        Raises:
            DestinationFull: still write-locked after ``block_timeout``; nothing
                was written.
            InvalidMessage, OSError: as :meth:`copy`.
        """
        self.write_lock.wait(self.block_timeout)
        return self.copy(message)

    def copy(self, message: Message) -> list[str]:
        """Put a copy of ``message`` into every subscription now; returns where it went
        (``topic:a.b/<dir>``, the topic's own subscriptions first; empty: nobody
        subscribes).

        A message without an id gets one here, so every copy has the same.

        Raises:
            InvalidMessage: the message cannot be written as a DropboxMQ name
                (among others: too long for a subscription's client to claim);
                no copy was written.
            OSError: a copy could not be written (earlier copies stay).
        """
        subscriptions = self.subscriptions()
        if not subscriptions:
            return []
        if not message.id:  # one DropboxMQ id (it carries the time) for every copy
            stamp = message.timestamp or now_ms()
            message = message.replace(id=dropbox_id(stamp, next(self._sequence)))
        room = max(subscription_claim_room(layout.base.name) for layout in subscriptions)
        sent: list[str] = []
        for layout in subscriptions:
            producer = self._producer(layout)
            # no lock of the subscription's own; the first copy raises if too long
            name, working = producer.stage(message, claim_room=room)
            producer.publish(working, name)
            sent.append(layout.destination)
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


class Distributor:
    """Fans out a topic's ``.incoming/target`` as DropboxMQ's distributor does.

    Constructing it takes back what a killed distributor with the same client
    id left in ``.incoming/processing`` (:attr:`restored` names them). One
    thread at a time; run one distributor per client id.

    Raises:
        InvalidAddress: (constructor) a bad topic name or client id.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        *,
        client_id: str = DISTRIBUTOR,
        delete_processed: bool = False,
        durable: bool = True,
    ) -> None:
        self.publisher = TopicPublisher(root, topic, durable=durable)
        incoming = self.publisher.layout.incoming
        self.restored: list[str] = recover_layout(incoming, client_id)
        self.files = QueueConsumer(
            incoming,
            "",
            client_id,
            options=ConsumerOptions(delete_processed=delete_processed, delete_expired=False),
        )

    def run(self, limit: int = 0) -> int:
        """Distribute what waits in ``.incoming/target``; returns how many files
        (``limit`` > 0 stops after that many).

        Each subscriber gets a fresh copy: a delivery count the file carried
        counted deliveries of the file in ``.incoming``, not of the copy.

        A file whose message cannot be written as a DropboxMQ name goes to
        ``.incoming/error``, with a log line.

        Raises:
            OSError: a copy could not be written; the file stays claimed in
                ``.incoming/processing`` until a distributor with this client id
                is constructed again.
        """
        count = 0
        while limit <= 0 or count < limit:
            delivery = self.files.receive()
            if delivery is None:
                break
            message = delivery.message
            message.delivery_count = 0
            message.redelivered = False
            try:
                self.publisher.copy(message)  # a distributor is no producer: no write lock
            except InvalidMessage as exc:  # no copy was written: the name is the same in each
                log.warning("%s: cannot be copied (%s): to error/", delivery.decoded.name, exc)
                self.files.reject(delivery)
                continue
            self.files.ack(delivery)
            count += 1
        return count


def distribute(
    root: str | os.PathLike[str],
    topic: str,
    *,
    client_id: str = DISTRIBUTOR,
    delete_processed: bool = False,
    durable: bool = True,
    limit: int = 0,
) -> int:
    """Fan out the files in the topic's ``.incoming/target`` once (a :class:`Distributor`).

    Returns how many files were distributed (``limit`` > 0 stops after that
    many). Run one distributor per client id at a time.

    Raises:
        InvalidAddress: a bad topic name.
    """
    distributor = Distributor(
        root, topic, client_id=client_id, delete_processed=delete_processed, durable=durable
    )
    return distributor.run(limit)
