"""Per-client state: connections, sessions, consumers, transactions, special queues.

A :class:`Connection` is one logged-in client (seed 001's *session*), made by
:func:`connect`, which authenticates it (:mod:`chute.core.access`). It is the
one face of the broker that every adapter drives: it owns :class:`Session`
objects (seed 003/JMS sessions: an ack mode and maybe a local transaction),
its temporary queues and, for a named user, its pipe from the user's
login-name queue; and it carries out what a client asks for the connection
as a whole (browse, prepared transactions, cursors, subscriptions, stats).
Every such operation asks the broker's :class:`~chute.core.access.Access`
first, so no protocol decides on its own what a client may do.

Closing a connection undoes all of it: consumers' in-flight messages go back
in their place, an open transaction rolls back, temporary queues and
non-durable subscriptions disappear.

Transactions: a transacted session gathers sends, acks and nacks and applies
them together at :meth:`Session.commit` (acks, then sends, then nacks, in one
atomic store commit), or stages them under an xid at :meth:`Session.prepare`.
A nack inside a transaction takes its messages out of flight at once (their
consumer may receive more) and decides their fate at commit: back in their
place (``requeue``) or to the dead-letter address. A rollback, or the session
closing with the transaction open, puts acked and nacked messages back,
redelivered, alike.

Temporary (session) queues from seed 001 live here too —
``queue:__tmp__.<connection>.<n>``: anyone may send to one (it is the usual
reply-to), only its connection may consume, and it dies with the connection.
Login-name and callback queues are in :mod:`chute.core.queuetypes`.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from chute.core.access import ANONYMOUS, Action, Principal
from chute.core.address import TEMP_PREFIX, Kind, canonical, parse, user_queue
from chute.core.broker import Broker
from chute.core.consumer import AckMode, Consumer, Entry, Receiver
from chute.core.queue import QueueChannel
from chute.core.queuetypes import LoginQueue, attach_forwarder
from chute.core.routing import Destination, WouldBlock
from chute.core.selector import compile_selector
from chute.core.settings import Overflow
from chute.core.subscriptions import callback_key, durable_key, shared_key
from chute.core.topic import Subscription, SubscriptionKind, Topic
from chute.core.twophase import Nacked, Send, Taken, check_xid, give_back
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    NotFound,
    TransactionError,
)
from chute.message import Message

log = logging.getLogger("chute.session")

_REFUSING = (Overflow.REJECT, Overflow.BLOCK)  # the policies that can refuse a commit


def connect(
    broker: Broker,
    login: str | None,
    passcode: str | None,
    *,
    client_id: str | None = None,
    protocol: str = "native",
    peer: str = "",
) -> Connection:
    """Authenticate a client and make its core connection (every protocol comes here).

    Raises:
        AuthenticationFailed: the login and passcode do not match (logged).
    """
    try:
        principal = broker.access.authenticate(login, passcode)
    except AuthenticationFailed:
        log.warning("%s authentication failed for %r from %s", protocol, login, peer or "?")
        raise
    connection = Connection(broker, principal, client_id=client_id, protocol=protocol, peer=peer)
    log.info(
        "%s client %s connected from %s (user=%s, client_id=%s)",
        protocol,
        connection.id,
        peer or "?",
        principal,
        client_id,
    )
    return connection


@dataclass
class Transaction:
    """A local transaction: sends, acks and nacks that commit or roll back together."""

    sends: list[Send] = field(default_factory=list)
    acks: list[Taken] = field(default_factory=list)
    nacks: list[Nacked] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.sends or self.acks or self.nacks)


_connection_ids = itertools.count(1)


class Connection:
    """One client connection's core state and the operations it may ask for.

    Made by :func:`connect` (which authenticates); built directly, it trusts its
    ``principal`` (tests, and the broker's own clients). Used from the broker's loop only.
    """

    def __init__(
        self,
        broker: Broker,
        principal: Principal = ANONYMOUS,
        *,
        client_id: str | None = None,
        protocol: str = "core",
        peer: str = "",
    ) -> None:
        self.broker = broker
        self.id = f"c{next(_connection_ids)}"
        self.principal = principal
        self.client_id = client_id
        self.protocol = protocol
        self.peer = peer
        self.sessions: list[Session] = []
        self.temp_queues: dict[str, QueueChannel] = {}
        self._temp_ids = itertools.count(1)
        self.closed = False
        broker.connections[self.id] = self

    @property
    def login(self) -> str | None:
        """The user this connection acts for (None: anonymous)."""
        return self.principal.user

    def authorize(self, action: Action, address: str) -> None:
        """Raise AccessDenied unless this connection's user may do ``action`` on ``address``."""
        self.broker.access.authorize(self.principal, action, address)

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

    # -- looking ----------------------------------------------------------------------

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Entry]:
        """A snapshot of a queue in delivery order; nothing is consumed.

        Raises:
            AccessDenied, InvalidAddress, InvalidSelector, NotFound.
        """
        self.authorize(Action.BROWSE, address)
        return self.broker.browse(address, selector, limit)

    def stats(self) -> dict[str, Any]:
        """Every destination with its counters (see ``Broker.stats``)."""
        self.authorize(Action.MANAGE, "*")
        return self.broker.stats()

    # -- prepared transactions and committed batches -----------------------------------

    def prepared(self) -> list[str]:
        """The xids of the prepared transactions waiting for commit or rollback."""
        self.authorize(Action.MANAGE, "*")
        return self.broker.xa.xids()

    def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (raises NotFound for an unknown xid)."""
        self.authorize(Action.MANAGE, "*")
        self.broker.xa.commit(xid)

    def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction (raises NotFound for an unknown xid)."""
        self.authorize(Action.MANAGE, "*")
        self.broker.xa.rollback(xid)

    def commit_batch(self, sink: str, batch: int, xids: tuple[str, ...], *, keep: bool) -> bool:
        """Commit a sink's batch once (``CommittedBatches.commit``); False for a duplicate."""
        return self.broker.batches.commit(sink, batch, xids, keep=keep)

    # -- cursors (the Spark connector) ---------------------------------------------------

    def cursor_open(
        self, address: str, name: str | None, *, selector: str | None = None, lease_ms: int = 0
    ) -> tuple[int, int]:
        """Open a cursor (or, with no name, look at a queue); ``(earliest, head)``."""
        self.authorize(Action.CONSUME, address)
        self.authorize(Action.BROWSE, address)
        cursors = self.broker.cursors
        if name is None:
            return cursors.info(address)
        return cursors.open(address, name, selector=selector, lease_ms=lease_ms, owner=self.id)

    def cursor_fetch(
        self,
        address: str,
        name: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> tuple[int, list[Entry]]:
        """One page of a cursor's range (see ``Cursors.fetch``)."""
        self.authorize(Action.BROWSE, address)
        return self.broker.cursors.fetch(
            address, name, start, end, max_messages=max_messages, max_bytes=max_bytes
        )

    def cursor_ack(self, address: str, name: str, end: int) -> int:
        """Consume everything the cursor holds below ``end``; how many."""
        self.authorize(Action.CONSUME, address)
        return self.broker.cursors.ack(address, name, end)

    def cursor_close(self, address: str, name: str, *, delete: bool = False) -> None:
        self.broker.cursors.close(address, name, delete=delete)

    # -- subscriptions ------------------------------------------------------------------

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """Delete a durable subscription (of ``client_id``, default this connection's; a
        shared durable subscription when neither has one) and every message it holds.

        Raises:
            NotFound: no such subscription. ConsumerError: it still has consumers.
        """
        owner = client_id or self.client_id
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
        self.authorize(Action.DELETE, sub.address)
        if sub.router.consumers and sub.kind is not SubscriptionKind.CALLBACK:
            raise ConsumerError(f"subscription {name!r} still has consumers; close them first")
        for consumer in list(sub.router.consumers):
            sub.detach(consumer)
        subs.drop(sub)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create (or replace) a callback queue: a durable subscription of ``topic`` that
        forwards every message to ``forward_to``.

        Raises:
            InvalidAddress: ``topic`` is not a topic, or forwards to itself. InvalidSelector.
        """
        broker = self.broker
        address = canonical(topic)
        target = canonical(forward_to)
        if target == address:
            raise InvalidAddress("a callback cannot forward a topic to itself")
        self.authorize(Action.CONSUME, address)
        self.authorize(Action.SEND, target)
        dest = broker.destination(address)
        if not isinstance(dest, Topic):
            raise InvalidAddress(f"{topic} is not a topic")
        broker.destination(target)
        if selector:
            compile_selector(selector)
        key = callback_key(name)
        old = broker.subscriptions.get(key)
        if old is not None:
            for consumer in list(old.router.consumers):
                old.detach(consumer)
            broker.subscriptions.drop(old)
        sub = broker.subscriptions.create(
            key, dest, SubscriptionKind.CALLBACK, selector=selector, forward_to=target
        )
        attach_forwarder(broker, sub, target)

    # -- closing ------------------------------------------------------------------------

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
                login_queue.drop_pipe(self.id)
        self.broker.connections.pop(self.id, None)

    def __repr__(self) -> str:
        return f"Connection({self.id}, {self.protocol}, user={self.principal})"


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
        self._checks = not self.broker.access.allows_all  # skip the gate when all is allowed

    # -- producing --------------------------------------------------------------

    def send(self, address: str, message: Message, *, ttl: int = 0) -> None:
        """Send now, or at commit in a transacted session (see Broker.send for errors).

        Raises:
            AccessDenied: this connection's user may not send to ``address``.
        """
        if self._checks:
            self.connection.authorize(Action.SEND, address)
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
        self.connection.authorize(Action.CONSUME, str(addr))
        if addr.kind is Kind.TOPIC:
            queue: QueueChannel = self._subscription(
                consumer_id,
                str(addr),
                selector=selector,
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
            return login_queue.pipe_for(self.connection.id)
        dest = self.broker.destination(address)
        if not isinstance(dest, QueueChannel):
            raise InvalidAddress(f"{address} is not a queue")
        return dest

    def _subscription(
        self,
        consumer_id: int,
        address: str,
        *,
        selector: str | None,
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
            key = shared_key(address, name)
            kind = SubscriptionKind.SHARED
        else:
            key = f"nondurable:{conn.id}.{id(self)}.{consumer_id}"
            kind = SubscriptionKind.NON_DURABLE
        subscriptions = broker.subscriptions
        sub = subscriptions.get(key)
        if sub is not None and (sub.topic is not topic or sub.selector_text != (selector or None)):
            if sub.router.consumers:
                raise ConsumerError(
                    f"subscription {name!r} is in use on {sub.topic.address} with selector "
                    f"{sub.selector_text!r}; close its consumers before changing it"
                )
            subscriptions.drop(sub)  # JMS: a changed topic or selector makes a new one
            sub = None
        if sub is None:
            sub = subscriptions.create(key, topic, kind, selector=selector, name=name)
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
            self.broker.subscriptions.drop(queue)

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """:meth:`Connection.unsubscribe` (JMS puts it on the session)."""
        self.connection.unsubscribe(name, client_id=client_id)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """:meth:`Connection.callback`."""
        self.connection.callback(topic, name, forward_to, selector)

    # -- acknowledging ------------------------------------------------------------

    def ack(self, consumer: Consumer, seq: int, *, cumulative: bool | None = None) -> int:
        """Acknowledge; cumulative in ``client`` mode unless told. Returns messages settled.

        In a transacted session the messages leave flight now and are settled at commit.

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

    def nack(
        self, consumer: Consumer, seq: int, *, requeue: bool = True, cumulative: bool = False
    ) -> int:
        """Give a message back (``requeue``) or refuse it for good (dead letter); with
        ``cumulative``, every message delivered to ``consumer`` up to ``seq`` too.
        Returns how many messages it took out of flight.

        In a transacted session the messages leave flight now and their fate is
        decided at commit (see the module docstring).

        Raises:
            ConsumerError: ``seq`` is not awaiting an ack from this consumer.
        """
        queue = consumer.queue
        taken = queue.take_acked(consumer, seq, cumulative=cumulative)
        if self.tx is not None:
            self.tx.nacks.extend((queue, e, requeue) for e in taken)
        elif requeue:
            queue.requeue(taken)
        else:
            for entry in taken:
                queue.reject(entry)
        return len(taken)

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
        """Apply the transaction's acks, then its sends, then its nacks; the store gets
        one atomic commit.

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
            for queue, entry, requeue in tx.nacks:
                if queue.deleted:
                    continue
                if requeue:
                    queue.requeue([entry])
                else:
                    queue.reject(entry)

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
        for taken_from, entry in tx.acks:
            count, size = freed.get(taken_from.name, (0, 0))
            freed[taken_from.name] = (count + 1, size + entry.message.size)
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
        staged durably and wait, across restarts, for a commit or rollback of ``xid``
        from any connection. The session starts a new transaction.

        Raises:
            TransactionError: not transacted, a bad xid, or one already prepared.
            DestinationFull / WouldBlock: as :meth:`commit`; nothing was prepared.
        """
        tx = self._require_tx()
        check_xid(xid)
        self._check_tx_room(tx)
        self.tx = Transaction()
        self.broker.xa.prepare(xid, tx.sends, tx.acks, tx.nacks)

    def rollback(self) -> None:
        """Discard the sends; the acked and nacked messages are delivered again (redelivered)."""
        tx = self._require_tx()
        self.tx = Transaction()
        give_back(tx.acks + [(queue, entry) for queue, entry, _ in tx.nacks])

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
        if self.tx is not None and not self.tx.empty:
            self.rollback()
        for consumer in list(self.consumers.values()):
            self.close_consumer(consumer)
        if self in self.connection.sessions:
            self.connection.sessions.remove(self)
