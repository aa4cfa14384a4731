"""Sessions: an ack mode, its consumers, and maybe a local transaction.

A :class:`BrokerSession` belongs to one connection (:mod:`chute.core.operations.connection`),
whose user every operation is checked for; what it needs of its connection
is :class:`SessionOwner`.

Transactions: a transacted session gathers sends, acks and nacks in a
:class:`~chute.core.rules.transaction.Transaction` and applies them together at
:meth:`BrokerSession.commit` (acks, then sends, then nacks, in one atomic store
commit), or stages them under an xid at :meth:`BrokerSession.prepare`
(:mod:`chute.core.rules.twophase`); the rules both keep are
:mod:`chute.core.rules.transaction`'s. A nack inside a transaction takes its
messages out of flight at once (their consumer may receive more) and decides
their fate at commit: back in their place (``requeue``) or to the dead-letter
address. A rollback, or the session closing with the transaction open, puts
acked and nacked messages back, redelivered, alike. Every protocol reaches
these rules here, so they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chute.core.model.address import Kind, parse, split_partition
from chute.core.model.consumer import AckMode, BrokerConsumer, Receiver
from chute.core.model.offsets import parse_offset
from chute.core.model.paging import held_cost
from chute.core.model.queue import QueueChannel
from chute.core.model.queuetypes import LoginQueue
from chute.core.model.readers import StreamReader
from chute.core.model.selector import Selector, compile_selector
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.rules.access import Action
from chute.core.rules.admission import Share
from chute.core.rules.broker import Broker
from chute.core.rules.routing import WouldBlock, take_each, takes_itself
from chute.core.rules.subscriptions import consumer_key
from chute.core.rules.transaction import (
    Transaction,
    apply,
    check_room,
    check_waiting_helps,
    give_back,
    runs,
)
from chute.core.rules.twophase import check_xid
from chute.errors import (
    AccessDenied,
    ChuteError,
    ConsumerError,
    InvalidAddress,
    NotFound,
    TransactionError,
)
from chute.message import Message


class SessionOwner(Protocol):
    """What a session needs of its connection
    (:class:`chute.core.operations.connection.BrokerConnection`)."""

    @property
    def broker(self) -> Broker: ...

    @property
    def id(self) -> str: ...

    @property
    def login(self) -> str | None: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def temp_queues(self) -> dict[str, QueueChannel]:
        """This connection's temporary queues, by address."""

    @property
    def share(self) -> Share:
        """What this connection sent lately, for admission (:mod:`chute.core.rules.admission`)."""

    @property
    def owner_name(self) -> str | None:
        """Who owns the durable subscriptions this connection makes."""

    def authorize(self, action: Action, address: str) -> None:
        """Raise AccessDenied unless the connection may do ``action`` on ``address``."""

    def authorize_use(self, action: Action, address: str) -> None:
        """:meth:`authorize`, and ``create`` if ``address`` does not exist yet."""

    def authorize_send(self, address: str) -> None:
        """:meth:`authorize_use` for a send, remembered per address."""

    def check_owner(self, sub: Subscription) -> None:
        """Raise AccessDenied unless the connection's user made ``sub``."""

    def xa_key(self, xid: str) -> str:
        """The broker-wide key of this user's transaction ``xid``."""

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """Delete a durable subscription."""

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create (or replace) a callback queue."""

    def session_closed(self, session: BrokerSession) -> None:
        """The session closed."""


class BrokerSession:
    """An ack mode, its consumers and maybe a local transaction."""

    def __init__(self, connection: SessionOwner, ack_mode: AckMode, transacted: bool) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.ack_mode = ack_mode
        self.transacted = transacted
        self.consumers: dict[int, BrokerConsumer] = {}
        self.tx: Transaction | None = Transaction() if transacted else None
        self.closed = False
        self.producer: str | None = None
        """Who produces on this session, for duplicate detection (:meth:`name_producer`)."""
        self._checks = not self.broker.access.allows_all  # skip the gate when all is allowed

    # -- producing --------------------------------------------------------------

    def name_producer(self, name: str) -> None:
        """Name this session's producer (the client chooses ``name`` and gives it again to
        the session it resumes on after losing its broker): a resend of a persistent
        send outside a transaction that this producer stored lately is dropped
        (:mod:`chute.core.rules.dedup`). The name is kept apart per user."""
        login = self.connection.login
        self.producer = name if login is None else f"{login}\x00{name}"

    def send(self, address: str, message: Message, *, ttl: int = 0, carried: bool = False) -> None:
        """Send now, or at commit in a transacted session (see Broker.send for errors
        and ``carried``, which only a session that is not transacted takes).

        Raises:
            AccessDenied: this connection's user may not send to ``address``.
            WouldBlock: the broker is over its memory or disk limit (address None:
                retry once it admits again, :mod:`chute.core.rules.admission`).
            TransactionError: ``carried`` in a transacted session; or this send must
                wait for memory that the transaction's own messages hold (waiting
                cannot help: the transaction can only roll back now). Once a send of
                a transaction was refused, its later sends are checked (address,
                permission) but not staged, and do not wait for memory: its commit
                raises, saying why.
        """
        tx = self.tx
        broker = self.broker
        producer = self.producer
        if producer is not None and tx is None and message.persistent and not carried:
            if self._checks:
                self.connection.authorize_send(address)
            sent = broker.sent_ids
            if sent.seen(producer, message.id):
                return  # a resend of what is stored: confirmed again, not stored twice
            broker.admission.admit(self.connection.share, message.size)
            broker.send(address, message, ttl=ttl)
            sent.stored(producer, message.id)  # after the add: a sync covers both
            return
        if carried and tx is not None:
            raise TransactionError("a carried message is sent outside a transaction")
        doomed = tx is not None and tx.refused is not None  # it can only roll back
        if not doomed:
            try:
                broker.admission.admit(self.connection.share, message.size)
            except WouldBlock:
                check_waiting_helps(broker.admission.never_admits, tx)
                raise
        if tx is None:
            if self._checks:
                self.connection.authorize_send(address)
            broker.send(address, message, ttl=ttl, carried=carried)
            return
        try:
            if self._checks:
                self.connection.authorize_send(address)
            broker.destination(address)  # fail now on a bad address
        except ChuteError as exc:
            tx.refused = tx.refused or exc
            raise
        if doomed:
            return  # nothing more is staged: its commit says why it rolled back
        tx.sends.append((address, message, ttl))
        cost = held_cost(message)
        tx.held += cost
        broker.memory.used += cost  # held here until the commit places it

    def send_each(self, address: str, messages: Sequence[Message], *, ttl: int = 0) -> int:
        """:meth:`send` of each of ``messages`` to the stream at ``address`` outside a
        transaction, in one pass (a producer's sends that arrived together): admitted
        together as a bulk send is, recorded as one batch, appended at once.
        Returns how many were sent, in order: none if they must wait for room or are
        refused, or this is not such a stream, or the session is transacted or its
        producer named (its resends are looked for one by one); fewer than all if the
        store cannot record one. The caller sends the rest with :meth:`send`, which
        raises why."""
        broker = self.broker
        stream = broker.streams.get(address)
        if (
            self.tx is not None
            or self.producer is not None
            or stream is None
            or not takes_itself(stream)
        ):
            return 0
        try:
            if self._checks:
                self.connection.authorize_send(address)
            size = sum(message.size for message in messages)
            broker.admission.admit(self.connection.share, size, len(messages))
        except ChuteError:
            return 0
        return take_each(stream, messages, broker.store, broker.clock(), ttl)

    def send_many(self, address: str, messages: Sequence[Message], *, ttl: int = 0) -> None:
        """Send ``messages`` to ``address`` together (a bulk producer's one request): in
        a transacted session they join the transaction, as :meth:`send` of each would;
        outside one they are checked, placed and stored as one transaction of their
        own, all or none.

        Raises:
            AccessDenied, WouldBlock: as :meth:`send`, for all of them.
            DestinationFull / WouldBlock: outside a transaction, as :meth:`commit`:
                the destination has no room for all of them; none was sent.
        """
        if not messages:
            return
        tx = self.tx
        broker = self.broker
        doomed = tx is not None and tx.refused is not None  # as in send
        if not doomed:
            size = sum(m.size for m in messages)
            try:
                broker.admission.admit(self.connection.share, size, len(messages))
            except WouldBlock:
                check_waiting_helps(broker.admission.never_admits, tx)
                raise
        try:
            if self._checks:
                self.connection.authorize_send(address)
            broker.destination(address)  # fail now on a bad address
        except ChuteError as exc:
            if tx is not None:
                tx.refused = tx.refused or exc
            raise
        if doomed:
            return
        sends = [(address, message, ttl) for message in messages]
        if tx is not None:
            tx.sends += sends
            cost = sum(held_cost(message) for message in messages)
            tx.held += cost
            broker.memory.used += cost  # held here until the commit places it
            return
        first = messages[0].id
        producer = self.producer
        if producer is not None:  # all or none: the first id stands for them all
            if broker.sent_ids.seen(producer, first):
                return  # a resend of what is stored: confirmed again, not stored twice
            if not any(m.persistent for m in messages):
                producer = None  # not waited on, never resent
        check_room(broker.destination, sends, ())
        with broker.atomically():
            broker.send_many(address, messages, ttl=ttl)
        if producer is not None:
            broker.sent_ids.stored(producer, first)  # after the commit: a sync covers both

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
        offset: str | int | None = None,
    ) -> BrokerConsumer:
        """Open a consumer; the broker starts pushing at once, up to ``prefetch``.

        On a stream, the consumer reads from ``offset`` (:func:`~chute.core.model.offsets.
        parse_offset`; None: the next message) without consuming anything.

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
        if addr.kind is not Kind.TOPIC and (subscription or durable or shared):
            raise ConsumerError("subscription, durable and shared apply to topics only")
        if offset is not None and addr.kind is not Kind.STREAM:
            raise ConsumerError(f"an offset applies to streams only, and {addr} is not one")
        # a stream's partition is granted as its stream is
        self.connection.authorize_use(Action.CONSUME, split_partition(str(addr))[0])
        queue: QueueChannel
        if addr.kind is Kind.STREAM:
            queue = self._stream_reader(consumer_id, str(addr), offset, prefetch, compiled)
            compiled = None  # the reader filters as it reads
        elif addr.kind is Kind.TOPIC:
            queue = self._subscription(
                consumer_id,
                str(addr),
                selector=selector,
                name=subscription,
                durable=durable,
                shared=shared,
            )
            compiled = None  # the subscription filters; its consumers take everything
        else:
            queue = self._queue_for_consumer(str(addr))
        consumer = BrokerConsumer(
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

    def reads_partitions(self, address: str) -> bool:
        """Whether a consumer of ``address`` reads every partition of a stream with several:
        its messages' ``seq`` number its deliveries, and their properties say their
        partition and offset (:mod:`chute.core.rules.partitions`)."""
        addr = parse(address)
        text = str(addr)
        return (
            addr.kind is Kind.STREAM
            and "#" not in text
            and self.broker.settings(text).partitions > 1
        )

    def _stream_reader(
        self,
        consumer_id: int,
        address: str,
        offset: str | int | None,
        prefetch: int,
        selector: Selector | None,
    ) -> StreamReader:
        start = parse_offset(offset)
        stream = self.broker.destination(address)
        if not isinstance(stream, Stream):
            raise InvalidAddress(f"{address} is not a stream")
        key = f"reader:{self.connection.id}.{id(self)}.{consumer_id}"
        return self.broker.partitions.reader(key, stream, start, prefetch, selector)

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
        key, kind = consumer_key(
            address,
            f"{conn.id}.{id(self)}.{consumer_id}",
            name=name,
            durable=durable,
            shared=shared,
            client_id=conn.client_id,
        )
        subscriptions = broker.subscriptions
        sub = subscriptions.get(key)
        if sub is not None and (sub.topic is not topic or sub.selector_text != (selector or None)):
            conn.check_owner(sub)
            if sub.router.consumers:
                raise ConsumerError(
                    f"subscription {name!r} is in use on {sub.topic.address} with selector "
                    f"{sub.selector_text!r}; close its consumers before changing it"
                )
            subscriptions.drop(sub)  # JMS: a changed topic or selector makes a new one
            sub = None
        if sub is not None:
            conn.check_owner(sub)
        if sub is None:
            if kind is SubscriptionKind.DURABLE:
                conn.authorize(Action.CREATE, address)  # a durable queue of its own
            sub = subscriptions.create(
                key, topic, kind, selector=selector, name=name, owner=conn.owner_name
            )
        elif kind is SubscriptionKind.DURABLE and not shared and sub.router.consumers:
            raise ConsumerError(
                f"durable subscription {name!r} already has a consumer "
                "(use shared=True to share it)"
            )
        return sub

    def close_consumer(self, consumer: BrokerConsumer) -> None:
        """Close a consumer: its in-flight messages go back; a non-durable subscription ends."""
        self.consumers.pop(consumer.id, None)
        queue = consumer.queue
        queue.detach(consumer)
        if isinstance(queue, StreamReader):
            queue.close()
        elif (
            isinstance(queue, Subscription)
            and not queue.router.consumers
            and queue.kind in (SubscriptionKind.NON_DURABLE, SubscriptionKind.SHARED)
        ):
            self.broker.subscriptions.drop(queue)

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """``BrokerConnection.unsubscribe`` (JMS puts it on the session)."""
        self.connection.unsubscribe(name, client_id=client_id)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """``BrokerConnection.callback``."""
        self.connection.callback(topic, name, forward_to, selector)

    # -- acknowledging ------------------------------------------------------------

    def ack(self, consumer: BrokerConsumer, seq: int, *, cumulative: bool | None = None) -> int:
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
            taken = consumer.take_acked(seq, cumulative=cumulative)
            self.tx.acks.extend((queue, e) for e in taken)
            return len(taken)
        return queue.ack(consumer, seq, cumulative=cumulative)

    def nack(
        self, consumer: BrokerConsumer, seq: int, *, requeue: bool = True, cumulative: bool = False
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
        taken = consumer.take_acked(seq, cumulative=cumulative)
        if self.tx is not None:
            self.tx.nacks.extend((queue, e, requeue) for e in taken)
        elif requeue:
            queue.requeue(taken)
        else:
            for entry in taken:
                queue.reject(entry)
        return len(taken)

    @staticmethod
    def add_credit(consumer: BrokerConsumer, credit: int, *, push: bool = True) -> None:
        """Let the broker push ``credit`` more messages to ``consumer``: now, or with
        ``push`` False at the driver's next :meth:`push` (one push for a read's acks)."""
        if credit <= 0:
            return
        consumer.credit += credit
        if push and not consumer.closed:
            consumer.queue.deliver()

    @staticmethod
    def push(consumer: BrokerConsumer) -> None:
        """Push ``consumer`` the waiting messages its credit allows (none once closed)."""
        if not consumer.closed:
            consumer.queue.deliver()

    @staticmethod
    def stop(consumer: BrokerConsumer) -> None:
        """Push ``consumer`` nothing more (its connection is ending): its credit is spent,
        what it was sent stays in flight until it closes."""
        consumer.credit = 0

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
        self._check_refused(tx)
        broker = self.broker
        check_room(self.broker.destination, tx.sends, tx.acks)
        self.tx = Transaction()
        broker.memory.used -= tx.held  # the queues count what they take

        def place() -> None:  # a run of sends to a stream is one batch
            for address, ttl, messages in runs(tx.sends):
                broker.send_many(address, messages, ttl=ttl)

        with broker.atomically():
            apply(tx.acks, place, tx.nacks)

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
        self._check_refused(tx)
        check_room(self.broker.destination, tx.sends, tx.acks)
        self.tx = Transaction()
        self.broker.memory.used -= tx.held
        self.broker.xa.prepare(self.connection.xa_key(xid), tx.sends, tx.acks, tx.nacks)

    def rollback(self) -> None:
        """Discard the sends; the acked and nacked messages are delivered again (redelivered)."""
        tx = self._require_tx()
        self.tx = Transaction()
        self.broker.memory.used -= tx.held
        give_back(tx.acks, tx.nacks)

    def _check_refused(self, tx: Transaction) -> None:
        """Roll back and raise TransactionError if a send of ``tx`` was refused."""
        if tx.refused is not None:
            reason = tx.refused.reason
            self.rollback()
            raise TransactionError(
                f"rolled back: a send in this transaction was refused ({reason})"
            )

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
        self.connection.session_closed(self)
