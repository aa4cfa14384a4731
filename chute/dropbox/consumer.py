"""The dropbox client's consumer: it receives by claiming files, and settles them.

A :class:`DropboxConsumer` claims one file per ``receive``
(:class:`~chute.dropbox.queue.QueueConsumer`: a rename into ``processing/``)
and hands it out as a :class:`~chute.client.received.Received`. What it
handed out and has not settled is kept by its :class:`Deliveries`, the
consumer's acknowledger: ``ack()`` moves a file to ``processed/`` (in
``client`` mode also every earlier one), ``nack()`` puts it back in
``target/`` or rejects it to ``error/``; a commit settles them all, a rollback
or a close gives them all back. In ``auto`` mode a file is acknowledged as it
is taken.

Not thread-safe: one thread at a time, as the rest of the dropbox client.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

from chute.client.closing import ClosedAtExit
from chute.client.received import Received
from chute.dropbox.layout import QueueLayout
from chute.dropbox.options import DropboxOptions
from chute.dropbox.queue import Delivery, QueueConsumer
from chute.dropbox.topic import remove_subscription
from chute.errors import ConnectError, ConsumerError, DestinationDeleted

__all__ = ["Deliveries", "DropboxConsumer", "OwnerSession"]


class OwnerConnection(Protocol):
    """What a consumer reads of its connection."""

    @property
    def closed(self) -> bool: ...
    @property
    def options(self) -> DropboxOptions: ...


class OwnerSession(Protocol):
    """What a consumer reads of the session that made it
    (:class:`~chute.dropbox.client.DropboxSession`)."""

    @property
    def closed(self) -> bool: ...
    @property
    def connection(self) -> OwnerConnection: ...


class Deliveries:
    """A consumer's received messages not yet settled, by ``seq``: what each
    :class:`Received` acks through (the consumer's Acknowledger). One thread at a time."""

    __slots__ = (
        "_refused",
        "_seq",
        "_unacked",
        "closed",
        "cumulative",
        "files",
        "ignores_acks",
        "settled",
        "transacted",
    )

    def __init__(self, files: QueueConsumer, ack_mode: str, transacted: bool) -> None:
        self.files = files
        self.settled = ack_mode == "auto" and not transacted
        """Auto mode: a message is acknowledged (moved to processed/) as it is taken."""
        self.ignores_acks = transacted or ack_mode == "auto"
        """``ack()`` is a no-op: taking or the commit settles."""
        self.cumulative = ack_mode == "client"
        self.transacted = transacted
        """A nack is decided at commit (a rollback gives the message back instead)."""
        self._unacked: OrderedDict[int, Delivery] = OrderedDict()
        self._refused: list[tuple[Delivery, bool]] = []
        """Messages nacked in the open transaction, with ``requeue``."""
        self._seq = itertools.count(1)
        self.closed = False

    def take(self, delivery: Delivery) -> int:
        """A claimed file handed out: its ``seq``."""
        seq = next(self._seq)
        if self.settled:
            self.files.ack(delivery)
        else:
            self._unacked[seq] = delivery
        return seq

    def ack(self, seq: int) -> None:
        if self.closed:
            raise ConsumerError("the consumer is closed")
        if self.ignores_acks:
            return
        if seq not in self._unacked:
            raise ConsumerError(f"message {seq} is not waiting for an acknowledgement")
        if self.cumulative:  # in delivery order
            for earlier in [s for s in self._unacked if s <= seq]:
                self.files.ack(self._unacked.pop(earlier))
        else:
            self.files.ack(self._unacked.pop(seq))

    def nack(self, seq: int, requeue: bool) -> None:
        if self.closed:
            raise ConsumerError("the consumer is closed")
        delivery = self._unacked.pop(seq, None)
        if delivery is None:
            raise ConsumerError(f"message {seq} is not waiting for an acknowledgement")
        if self.transacted:
            self._refused.append((delivery, requeue))
        else:
            self._refuse(delivery, requeue)

    def _refuse(self, delivery: Delivery, requeue: bool) -> None:
        if requeue:
            self.files.recover(delivery)
        else:
            self.files.reject(delivery)

    def settle_all(self) -> None:
        """Acknowledge every message taken and apply the nacks (a commit)."""
        while self._unacked:
            _, delivery = self._unacked.popitem(last=False)
            self.files.ack(delivery)
        refused, self._refused = self._refused, []
        for delivery, requeue in refused:
            self._refuse(delivery, requeue)

    def recover_all(self) -> None:
        """Give every message taken or nacked back to ``target/`` (a rollback, a close)."""
        refused, self._refused = self._refused, []
        while self._unacked:
            _, delivery = self._unacked.popitem(last=False)
            with contextlib.suppress(FileNotFoundError):
                self.files.recover(delivery)
        for delivery, _ in refused:
            with contextlib.suppress(FileNotFoundError):
                self.files.recover(delivery)


class DropboxConsumer(ClosedAtExit):
    """Receives from one dropbox by claiming files. One thread at a time."""

    def __init__(
        self,
        session: OwnerSession,
        consumer_id: int,
        deliveries: Deliveries,
        temporary: QueueLayout | None,
    ) -> None:
        self.session = session
        self.id = consumer_id
        self._deliveries = deliveries
        self._temporary = temporary

    @property
    def closed(self) -> bool:
        return self._deliveries.closed

    @property
    def files(self) -> QueueConsumer:
        """The claiming of files this consumer receives through."""
        return self._deliveries.files

    @property
    def layout(self) -> QueueLayout:
        return self._deliveries.files.layout

    def receive(self, timeout: float | None = None) -> Received | None:
        """The next message, or None after ``timeout`` seconds (None = wait forever).

        Wakes as soon as a file arrives (inotify), else within the polling
        interval. In ``auto`` mode the file is acknowledged (moved to
        ``processed/``) before it is returned.

        Raises:
            ConsumerError: the consumer or its session is closed.
            ConnectError: the connection is closed.
            DestinationDeleted: the dropbox was deleted (the consumer is closed).
        """
        if self._deliveries.closed:
            raise ConsumerError("the consumer is closed")
        if self.session.connection.closed:
            raise ConnectError("the connection is closed")
        if self.session.closed:
            raise ConsumerError("the session is closed")
        poll = self.session.connection.options.poll_interval
        try:
            delivery = self._deliveries.files.receive_wait(timeout, poll)
        except FileNotFoundError:
            if self.layout.base.is_dir():
                raise
            self._deliveries.files.close()
            self._deliveries.closed = True
            name = self.layout.destination
            raise DestinationDeleted(
                f"{name if ':' in name else 'queue:' + name} was deleted: this consumer is closed"
            ) from None
        if delivery is None:
            return None
        message = delivery.message
        message.delivery_count = delivery.decoded.delivery_count + 1  # as a broker counts
        return Received(message, self._deliveries.take(delivery), self._deliveries)

    def __iter__(self) -> Iterator[Received]:
        """Receive until the consumer is closed."""
        while not self._deliveries.closed:
            message = self.receive()
            if message is not None:
                yield message

    def close(self) -> None:
        """Close: unacknowledged messages go back to ``target/`` (redelivered); a
        non-durable subscription's directory is removed."""
        deliveries = self._deliveries
        if deliveries.closed:
            return
        deliveries.recover_all()
        deliveries.files.close()
        if self._temporary is not None:
            remove_subscription(self._temporary)
        deliveries.closed = True

    def _described(self) -> str:
        return "the dropbox consumer"
