"""XmlBlaster's special queues: login-name queues (with per-session pipes) and callback queues.

* Login-name queues — ``queue:__user__.<login>``: a :class:`LoginQueue` stores
  while the user has no live session and copies every message to each live
  session (each connection of the user that consumes from it) through a
  per-connection :class:`Pipe`. The stored message is settled once one copy
  was acked and every copy is finished; if every session that held a copy
  went away without acking, it goes back to be delivered again (to the
  sessions live then); if none acked and one rejected it, it is dead-lettered
  once. The login queue alone counts deliveries and moves expired messages.
* Callback queues — a durable subscription whose only receiver, a
  :class:`Forwarder`, forwards each message to a named destination
  (:func:`attach_forwarder`).

Temporary queues need nothing special: they are plain queues owned by a
connection (:mod:`chute.core.operations.session`). A login-name queue needs what every
queue needs from the broker (:class:`~chute.core.model.queue.QueueHost`); a
forwarder needs :class:`ForwardHost`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from chute.core.model.address import parse
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel, QueueHost, Reason
from chute.core.model.settings import DestinationSettings
from chute.core.model.topic import Subscription
from chute.errors import ChuteError
from chute.message import Message

log = logging.getLogger("chute.session")


class Pipe(QueueChannel):
    """JBoss Messaging's Pipe: a one-output channel carrying one session's copies of a login queue.

    A copy that expires or is rejected only finishes here: the login queue
    decides what becomes of the message, once for all its copies.
    """

    def _expire(self, entry: Entry) -> None:
        self.settle(entry, acked=False)

    def reject(self, entry: Entry) -> None:
        if isinstance(entry.origin, _Copies):
            entry.origin.rejected = True
        self.settle(entry, acked=False)


class _Copies:
    """Tracks the copies of one login-queue entry handed to sessions' pipes."""

    __slots__ = ("acked", "entry", "pending", "queue", "rejected")

    def __init__(self, queue: LoginQueue, entry: Entry, pending: int) -> None:
        self.queue = queue
        self.entry = entry
        self.pending = pending
        self.acked = False
        self.rejected = False

    def copy_finished(self, entry: Entry, *, acked: bool) -> None:
        self.acked = self.acked or acked
        self.pending -= 1
        if self.pending:
            return
        queue = self.queue
        queue.fanned.pop(self.entry.seq, None)
        if self.acked:
            queue.settle(self.entry)
        elif self.rejected:
            queue.reject(self.entry)
        else:
            queue.requeue([self.entry])


class LoginQueue(QueueChannel):
    """A user's queue, copied to every live session of that user (see module docstring)."""

    def __init__(self, address: str, settings: DestinationSettings, host: QueueHost) -> None:
        super().__init__(address, address, settings, host, durable=True)
        self.login = parse(address).login
        self.pipes: dict[str, Pipe] = {}
        self.fanned: dict[int, Entry] = {}  # by seq: entries whose copies are out

    def place(self, entry: Entry) -> None:
        super().place(entry)
        self.deliver()

    def requeue(self, entries: Iterable[Entry]) -> None:
        super().requeue(entries)
        self.deliver()  # the base class only pushes to consumers; this queue has pipes

    def deliver(self) -> None:
        if not self.pipes:
            # no session of the user here: only the peer consumers of a cluster (nodes
            # with such sessions, chute.core.rules.cluster_owned) may take the messages
            super().deliver()
            return
        while self.ready and self.pipes and not self.deleted:
            entry = self._pop_first()
            if entry is None:
                continue
            entry.delivery_count += 1
            if self.durable and entry.message.persistent:
                self.host.store.delivered(self.name, entry.seq, entry.delivery_count)
            copies = _Copies(self, entry, len(self.pipes))
            self.fanned[entry.seq] = entry
            for pipe in list(self.pipes.values()):
                # the pipe's push counts this delivery on the copy again: start one lower
                copy = Entry(
                    entry.seq,
                    entry.message,
                    entry.delivery_count - 1,
                    entry.redelivered,
                    origin=copies,
                )
                pipe.place(copy)

    def expire_due(self, now: int) -> int:
        before = self.expired
        for pipe in list(self.pipes.values()):
            pipe.expire_due(now)  # expired copies finish; the last one brings the entry back
        super().expire_due(now)
        return self.expired - before

    def sent_out(self) -> Iterator[Entry]:
        yield from super().sent_out()
        yield from self.fanned.values()  # copies out to sessions

    def pipe_for(self, connection_id: str) -> Pipe:
        """The pipe of one connection of the user (made on first use)."""
        pipe = self.pipes.get(connection_id)
        if pipe is None:
            # unbounded, and the login queue counts deliveries
            settings = dataclasses.replace(
                self.settings, max_messages=0, max_bytes=0, max_deliveries=0
            )
            pipe = Pipe(
                f"{self.name}@{connection_id}", self.address, settings, self.host, durable=False
            )
            self.pipes[connection_id] = pipe
            self.deliver()
        return pipe

    def drop_pipe(self, connection_id: str) -> None:
        """The connection ended: its pipe goes, and the copies it held finish unacked."""
        pipe = self.pipes.pop(connection_id, None)
        if pipe is None:
            return
        pipe.deleted = True
        for entry in pipe.drain():
            pipe.settle(entry, acked=False)


class ForwardHost(Protocol):
    """What a callback queue's forwarder needs from the broker."""

    def forward(self, address: str, message: Message) -> None:
        """Route a copy onwards (raises DestinationFull on a full target or a loop)."""

    def divert(self, queue: QueueChannel, entry: Entry, reason: Reason) -> None:
        """Send a message that left ``queue`` unconsumed to its dead-letter address."""


class Forwarder:
    """The receiver of a callback queue: forwards each message, then acks it."""

    def __init__(self, host: ForwardHost, queue: Subscription, forward_to: str) -> None:
        self.host = host
        self.queue = queue
        self.forward_to = forward_to

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        queue = self.queue
        consumer.credit += 1  # never runs dry
        try:
            self.host.forward(self.forward_to, entry.message)
        except ChuteError as exc:
            log.warning(
                "callback %s could not forward %s to %s: %s",
                queue.name,
                entry.message.id,
                self.forward_to,
                exc.reason,
            )
            consumer.take_acked(entry.seq, cumulative=False)
            queue.dead_lettered += 1
            self.host.divert(queue, entry, Reason.FORWARD_FAILED)
            queue.settle(entry, acked=False)
            return
        queue.ack(consumer, entry.seq, cumulative=False)

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """Its subscription went with its topic: nothing more to forward."""


def attach_forwarder(host: ForwardHost, sub: Subscription, forward_to: str) -> BrokerConsumer:
    """Make ``sub`` a callback queue: its one consumer forwards to ``forward_to``."""
    forwarder = Forwarder(host, sub, forward_to)
    consumer = BrokerConsumer(0, sub, forwarder, ack_mode=AckMode.INDIVIDUAL, credit=1)
    sub.attach(consumer)
    return consumer
