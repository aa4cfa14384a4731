"""Per-client state: connections, sessions, consumers, transactions, special queues.

A :class:`Connection` is one logged-in client (seed 001's *session*); it owns
:class:`Session` objects (seed 003/JMS sessions: an ack mode and maybe a local
transaction), its temporary queues and, for a named user, its pipe from the
user's login-name queue. Closing a connection undoes all of it: consumers'
in-flight messages go back in their place, an open transaction rolls back,
temporary queues and non-durable subscriptions disappear.

Temporary (session) queues from seed 001 live here too —
``queue:__tmp__.<connection>.<n>``: anyone may send to one (it is the usual
reply-to), only its connection may consume, and it dies with the connection.
Login-name and callback queues are in :mod:`chute.core.queuetypes`.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chute.core.address import TEMP_PREFIX, Kind, canonical, parse, user_queue
from chute.core.broker import Destination, WouldBlock
from chute.core.consumer import AckMode, Consumer, Entry, Receiver
from chute.core.queue import QueueChannel
from chute.core.queuetypes import LoginQueue
from chute.core.selector import compile_selector
from chute.core.settings import Overflow
from chute.core.store import QueueDefinition, QueueKind
from chute.core.topic import Subscription, SubscriptionKind, Topic
from chute.core.twophase import check_xid
from chute.errors import (
    AccessDenied,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    NotFound,
    TransactionError,
)
from chute.message import Message

if TYPE_CHECKING:
    from chute.core.broker import Broker

log = logging.getLogger("chute.session")

_REFUSING = (Overflow.REJECT, Overflow.BLOCK)  # the policies that can refuse a commit


@dataclass
class Transaction:
    """A local transaction: sends and acks that commit or roll back together."""

    sends: list[tuple[str, Message, int]] = field(default_factory=list)
    acks: list[tuple[QueueChannel, Entry]] = field(default_factory=list)


_connection_ids = itertools.count(1)


class Connection:
    """One client connection's core state."""

    def __init__(
        self, broker: Broker, *, login: str | None = None, client_id: str | None = None
    ) -> None:
        self.broker = broker
        self.id = f"c{next(_connection_ids)}"
        self.login = login
        self.client_id = client_id
        self.sessions: list[Session] = []
        self.temp_queues: dict[str, QueueChannel] = {}
        self._temp_ids = itertools.count(1)
        self.closed = False
        broker.connections[self.id] = self

    def session(self, ack_mode: AckMode = AckMode.AUTO, *, transacted: bool = False) -> Session:
        session = Session(self, ack_mode, transacted)
        self.sessions.append(session)
        return session

    def temporary_queue(self) -> str:
        """Create a queue that lives as long as this connection; returns its address."""
        address = f"queue:{TEMP_PREFIX}{self.id}.{next(self._temp_ids)}"
        settings = self.broker.settings(address)
        queue = QueueChannel(address, address, settings, self.broker, durable=False)
        self.broker.add_queue(queue)
        self.temp_queues[address] = queue
        return address

    def close(self) -> None:
        """Close every session, drop temporary queues and login pipes. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for session in list(self.sessions):
            session.close()
        for queue in self.temp_queues.values():
            self.broker.delete_queue(queue)
        self.temp_queues.clear()
        if self.login is not None:
            login_queue = self.broker.queues.get(user_queue(self.login))
            if isinstance(login_queue, LoginQueue):
                login_queue.drop_pipe(self)
        self.broker.connections.pop(self.id, None)


class Session:
    """An ack mode, its consumers and maybe a local transaction."""

    def __init__(self, connection: Connection, ack_mode: AckMode, transacted: bool) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.ack_mode = ack_mode
        self.transacted = transacted
        self.consumers: dict[int, Consumer] = {}
        self.tx: Transaction | None = Transaction() if transacted else None
        self.closed = False

    # -- producing --------------------------------------------------------------

    def send(self, address: str, message: Message, *, ttl: int = 0) -> None:
        """Send now, or at commit in a transacted session (see Broker.send for errors)."""
        if self.tx is not None:
            self.broker.destination(address)  # fail now on a bad address
            self.tx.sends.append((address, message, ttl))
            return
        self.broker.send(address, message, ttl=ttl)

    # -- consuming --------------------------------------------------------------

    def consumer(
        self,
        consumer_id: int,
        address: str,
        receiver: Receiver,
        *,
        prefetch: int = 100,
        selector: str | None = None,
        exclusive: bool = False,
        subscription: str | None = None,
        durable: bool = False,
        shared: bool = False,
        ack_mode: AckMode | None = None,
    ) -> Consumer:
        """Open a consumer; the broker starts pushing at once, up to ``prefetch``.

        Raises:
            InvalidAddress, InvalidSelector, NotFound, AccessDenied, ConsumerError.
        """
        if consumer_id in self.consumers:
            raise ConsumerError(f"consumer id {consumer_id} is already open in this session")
        if prefetch < 1:
            raise ConsumerError("prefetch must be at least 1")
        mode = ack_mode or self.ack_mode
        compiled = compile_selector(selector) if selector else None
        addr = parse(address)
        if addr.kind is Kind.TOPIC:
            queue: QueueChannel = self._subscription(
                consumer_id,
                str(addr),
                compiled_text=selector,
                name=subscription,
                durable=durable,
                shared=shared,
            )
            compiled = None  # the subscription filters; its consumers take everything
        else:
            if subscription or durable or shared:
                raise ConsumerError("subscription, durable and shared apply to topics only")
            queue = self._queue_for_consumer(str(addr))
        consumer = Consumer(
            consumer_id,
            queue,
            receiver,
            ack_mode=mode,
            credit=prefetch,
            selector=compiled,
            exclusive=exclusive,
            owner=self,
        )
        self.consumers[consumer_id] = consumer
        queue.attach(consumer)
        return consumer

    def _queue_for_consumer(self, address: str) -> QueueChannel:
        addr = parse(address)
        if addr.is_temporary:
            queue = self.connection.temp_queues.get(address)
            if queue is None:
                if address in self.broker.queues:
                    raise AccessDenied(f"{address} belongs to another connection")
                raise NotFound(f"temporary queue {address} does not exist")
            return queue
        if addr.login is not None:
            if addr.login != self.connection.login:
                raise AccessDenied(f"{address} is the login-name queue of another user")
            login_queue = self.broker.destination(address)
            if not isinstance(login_queue, LoginQueue):
                raise InvalidAddress(f"{address} is not a login-name queue")
            return login_queue.pipe_for(self.connection)
        dest = self.broker.destination(address)
        if not isinstance(dest, QueueChannel):
            raise InvalidAddress(f"{address} is not a queue")
        return dest

    def _subscription(
        self,
        consumer_id: int,
        address: str,
        *,
        compiled_text: str | None,
        name: str | None,
        durable: bool,
        shared: bool,
    ) -> Subscription:
        broker = self.broker
        topic = broker.destination(address)
        if not isinstance(topic, Topic):
            raise InvalidAddress(f"{address} is not a topic")
        conn = self.connection
        if durable:
            if not name:
                raise ConsumerError("a durable subscription needs a subscription name")
            if not shared and not conn.client_id:
                raise ConsumerError(
                    "a durable subscription needs a client id on the connection (or shared=True)"
                )
            key = durable_key(name, None if shared else conn.client_id)
            kind = SubscriptionKind.DURABLE
        elif shared:
            if not name:
                raise ConsumerError("a shared subscription needs a subscription name")
            key = f"shared:{address}.{name}"
            kind = SubscriptionKind.SHARED
        else:
            key = f"nondurable:{conn.id}.{id(self)}.{consumer_id}"
            kind = SubscriptionKind.NON_DURABLE
        sub = broker.subscriptions.get(key)
        if sub is not None and (
            sub.topic is not topic or sub.selector_text != (compiled_text or None)
        ):
            if sub.router.consumers:
                raise ConsumerError(
                    f"subscription {name!r} is in use on {sub.topic.address} with selector "
                    f"{sub.selector_text!r}; close its consumers before changing it"
                )
            broker.drop_subscription(sub)  # JMS: a changed topic or selector makes a new one
            sub = None
        if sub is None:
            sub = Subscription(
                key,
                topic,
                kind,
                topic.settings,
                broker,
                selector=compile_selector(compiled_text) if compiled_text else None,
                name=name,
            )
            topic.subscriptions[key] = sub
            broker.subscriptions[key] = sub
            if sub.durable:
                broker.store.define(
                    QueueDefinition(
                        key, QueueKind.SUBSCRIPTION, topic=address, selector=compiled_text
                    )
                )
        elif kind is SubscriptionKind.DURABLE and not shared and sub.router.consumers:
            raise ConsumerError(
                f"durable subscription {name!r} already has a consumer "
                "(use shared=True to share it)"
            )
        return sub

    def close_consumer(self, consumer: Consumer) -> None:
        """Close a consumer: its in-flight messages go back; a non-durable subscription ends."""
        self.consumers.pop(consumer.id, None)
        queue = consumer.queue
        queue.detach(consumer)
        if (
            isinstance(queue, Subscription)
            and not queue.router.consumers
            and queue.kind in (SubscriptionKind.NON_DURABLE, SubscriptionKind.SHARED)
        ):
            self.broker.drop_subscription(queue)

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """Delete a durable subscription (of ``client_id``, default this connection's; a
        shared durable subscription when neither has one) and every message it holds.

        Raises:
            NotFound: no such subscription. ConsumerError: it still has consumers.
        """
        owner = client_id or self.connection.client_id
        subs = self.broker.subscriptions
        sub = (
            (subs.get(durable_key(name, owner)) if owner else None)
            or subs.get(durable_key(name, None))
            or subs.get(callback_key(name))
        )
        if sub is None:
            raise NotFound(
                f"no durable subscription named {name!r}"
                + (f" for client id {owner!r}" if owner else "")
            )
        if sub.router.consumers and sub.kind is not SubscriptionKind.CALLBACK:
            raise ConsumerError(f"subscription {name!r} still has consumers; close them first")
        for consumer in list(sub.router.consumers):
            sub.detach(consumer)
        self.broker.drop_subscription(sub)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create (or replace) a callback queue: a durable subscription of ``topic`` that
        forwards every message to ``forward_to``.

        Raises:
            InvalidAddress: ``topic`` is not a topic, or forwards to itself. InvalidSelector.
        """
        address = canonical(topic)
        target = canonical(forward_to)
        if target == address:
            raise InvalidAddress("a callback cannot forward a topic to itself")
        if not isinstance(self.broker.destination(address), Topic):
            raise InvalidAddress(f"{topic} is not a topic")
        self.broker.destination(target)
        if selector:
            compile_selector(selector)
        key = callback_key(name)
        old = self.broker.subscriptions.get(key)
        if old is not None:
            for consumer in list(old.router.consumers):
                old.detach(consumer)
            self.broker.drop_subscription(old)
        definition = QueueDefinition(
            key, QueueKind.CALLBACK, topic=address, selector=selector or None, forward_to=target
        )
        self.broker.store.define(definition)
        self.broker.restore_subscription(definition)

    # -- acknowledging ------------------------------------------------------------

    def ack(self, consumer: Consumer, seq: int, *, cumulative: bool | None = None) -> int:
        """Acknowledge; cumulative in ``client`` mode unless told. Returns messages settled.

        Raises:
            ConsumerError: ``seq`` is not awaiting an ack from this consumer.
        """
        if cumulative is None:
            cumulative = consumer.ack_mode is AckMode.CLIENT
        if consumer.ack_mode is AckMode.AUTO:
            raise ConsumerError("this consumer is in auto-ack mode: nothing to acknowledge")
        queue = consumer.queue
        if self.tx is not None:
            taken = queue.take_acked(consumer, seq, cumulative=cumulative)
            self.tx.acks.extend((queue, e) for e in taken)
            return len(taken)
        return queue.ack(consumer, seq, cumulative=cumulative)

    def nack(self, consumer: Consumer, seq: int, *, requeue: bool = True) -> None:
        """Give a message back (``requeue``) or refuse it for good (dead letter).

        Raises:
            ConsumerError: ``seq`` is not awaiting an ack from this consumer.
        """
        queue = consumer.queue
        [entry] = queue.take_acked(consumer, seq, cumulative=False)
        if requeue:
            queue.requeue([entry])
        else:
            queue.reject(entry)

    @staticmethod
    def add_credit(consumer: Consumer, credit: int) -> None:
        """Let the broker push ``credit`` more messages to ``consumer``."""
        if credit <= 0:
            return
        consumer.credit += credit
        if not consumer.closed:
            consumer.queue.deliver()

    # -- transactions ---------------------------------------------------------------

    def commit(self) -> None:
        """Apply the transaction's acks, then its sends; the store gets one atomic commit.

        Raises:
            TransactionError: not a transacted session.
            DestinationFull / WouldBlock: a send finds no room under ``reject`` /
                ``block`` (counting the room this transaction's acks free); nothing
                was applied and the transaction stays open (roll it back or retry).
        """
        tx = self._require_tx()
        broker = self.broker
        self._check_tx_room(tx)
        self.tx = Transaction()
        with broker.atomically():
            for queue, entry in tx.acks:
                queue.settle(entry)
            for address, message, ttl in tx.sends:
                broker.send(address, message, ttl=ttl)

    def _check_tx_room(self, tx: Transaction) -> None:
        """Refuse a commit whose sends cannot all fit under ``reject``/``block`` policies.

        Also resolves every address first, so a send to a destination that has
        gone since (a closed temporary queue) fails before anything is applied.
        """
        needed: dict[str, tuple[QueueChannel, int, int]] = {}
        resolved: dict[str, Destination | None] = {}  # None: a queue without a bound
        for address, message, _ttl in tx.sends:
            try:
                dest = resolved[address]
            except KeyError:
                dest = self.broker.destination(address)
                if not isinstance(dest, Topic) and dest.settings.overflow not in _REFUSING:
                    dest = None
                resolved[address] = dest
            if dest is None:
                continue
            targets = dest.router.route(message) if isinstance(dest, Topic) else [dest]
            for queue in targets:
                if queue.settings.overflow not in _REFUSING:
                    continue
                _, count, size = needed.get(queue.name, (queue, 0, 0))
                needed[queue.name] = (queue, count + 1, size + message.size)
        if not needed:
            return
        freed: dict[str, tuple[int, int]] = {}
        for queue, entry in tx.acks:
            count, size = freed.get(queue.name, (0, 0))
            freed[queue.name] = (count + 1, size + entry.message.size)
        for name, (queue, count, size) in needed.items():
            s = queue.settings
            freed_count, freed_size = freed.get(name, (0, 0))
            if (s.max_messages and queue.held - freed_count + count > s.max_messages) or (
                s.max_bytes and queue.held_bytes - freed_size + size > s.max_bytes
            ):
                reason = (
                    f"{queue.address} has no room for this transaction's {count} messages; "
                    "nothing was committed"
                )
                if s.overflow is Overflow.BLOCK:
                    raise WouldBlock(reason, queue.address, s.block_timeout_ms)
                raise DestinationFull(reason)

    def prepare(self, xid: str) -> None:
        """Prepare the transaction under ``xid`` (two-phase): its sends and acks are
        staged durably and wait, across restarts, for ``Broker.xa.commit(xid)`` or
        ``rollback(xid)`` from any connection. The session starts a new transaction.

        Raises:
            TransactionError: not transacted, a bad xid, or one already prepared.
            DestinationFull / WouldBlock: as :meth:`commit`; nothing was prepared.
        """
        tx = self._require_tx()
        check_xid(xid)
        self._check_tx_room(tx)
        self.tx = Transaction()
        self.broker.xa.prepare(xid, tx.sends, tx.acks)

    def rollback(self) -> None:
        """Discard the sends; the acked messages are delivered again (redelivered)."""
        tx = self._require_tx()
        self.tx = Transaction()
        by_queue: dict[int, tuple[QueueChannel, list[Entry]]] = {}
        for queue, entry in tx.acks:
            by_queue.setdefault(id(queue), (queue, []))[1].append(entry)
        for queue, entries in by_queue.values():
            queue.requeue(entries)

    def _require_tx(self) -> Transaction:
        if self.tx is None:
            raise TransactionError("this session is not transacted")
        return self.tx

    # -- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Roll back an open transaction and close every consumer. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.tx is not None and (self.tx.acks or self.tx.sends):
            self.rollback()
        for consumer in list(self.consumers.values()):
            self.close_consumer(consumer)
        if self in self.connection.sessions:
            self.connection.sessions.remove(self)


def durable_key(name: str, client_id: str | None) -> str:
    """The broker-wide key of a durable subscription (JMS: client id + name, or a shared name)."""
    return f"durable:{client_id}.{name}" if client_id else f"durable-shared:{name}"


def callback_key(name: str) -> str:
    return f"callback:{name}"
