"""One STOMP client's state over the core: subscriptions, transactions, acks, credit.

Pure, like :mod:`chute.stomp.adapter`: no sockets. The driver
(:mod:`chute.server.stomp`) reads frames, calls a :class:`StompSession` and
writes what comes back; deliveries come back through the ``deliver`` callback
the driver gives it.

Mapping onto the core (after Artemis' ``StompSession``): one non-transacted
core session holds every subscription (each consumer with its own ack mode);
each STOMP transaction (BEGIN … COMMIT/ABORT) is a transacted core session of
its own, which SENDs, ACKs and NACKs naming that ``transaction`` go through, so
a NACK in a transaction is decided at COMMIT by the core, as for every
protocol (:mod:`chute.core.operations.session`).

Credit: an ``ack:auto`` subscription's window is refilled as its deliveries
are written (:meth:`StompSession.written`), not while the transport's write
buffer is full; a client-mode subscription gets credit back as it ACKs or
NACKs, and the queue pushes waiting messages once per read
(:meth:`StompSession.push_credited`), not once per ACK.

STOMP 1.0/1.1 name the delivery an ACK or NACK settles by ``message-id`` (and
``subscription``), not by an ack id: each client-mode subscription keeps the
message-ids awaiting an ack, in delivery order.

Streams (``/stream/NAME``): a subscription is a reader of its own, opened at
the SUBSCRIBE's ``x-stream-offset`` (the core refuses an offset on any other
destination); acks only make room in its window, and each MESSAGE carries the
message's offset.

Used from the broker's loop only.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from chute.core.model.address import Kind, parse
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.errors import (
    ChuteError,
    ConsumerError,
    InvalidAddress,
    RemoteProtocolError,
    TransactionError,
)
from chute.stomp.adapter import (
    TEMP_QUEUE_PREFIX,
    AckToken,
    SendReader,
    StompAck,
    SubscribeOptions,
    is_temp_queue,
    require,
    to_address,
)
from chute.stomp.delivery import MessageEncoder
from chute.stomp.frames import Frame

_MAX_CACHED_ADDRESSES: Final = 1024


class StompSubscription:
    """One SUBSCRIBE: the core consumer's receiver, so deliveries know their subscription."""

    __slots__ = (
        "ack",
        "auto",
        "cancel",
        "consumer",
        "deliver",
        "destination",
        "encoder",
        "id",
        "legacy",
        "owed",
        "stream",
    )

    def __init__(
        self,
        deliver: Callable[[StompSubscription, BrokerConsumer, Entry], None],
        sub_id: str,
        destination: str,
        ack: StompAck,
        consumer_id: int,
        *,
        version: str,
        cancel: Callable[[StompSubscription, ChuteError], None] | None = None,
        stream: bool = False,
    ) -> None:
        self.deliver = deliver
        self.cancel = cancel
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.auto = ack is StompAck.AUTO
        self.consumer: BrokerConsumer | None = None
        self.stream = stream  # reads a stream: each MESSAGE carries x-stream-offset
        self.owed = 0  # auto mode: deliveries written whose credit is not yet given back
        # STOMP 1.0/1.1 client modes: message-id -> seq of the deliveries awaiting an ACK,
        # in delivery order (ACK names a message by message-id, not by ack id)
        self.legacy: OrderedDict[str, int] | None = (
            OrderedDict() if not self.auto and version != "1.2" else None
        )
        self.encoder = MessageEncoder(
            destination,
            sub_id,
            None if self.auto else AckToken.prefix(consumer_id),
            version,
            stream=stream,
        )

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.consumer = consumer
        self.deliver(self, consumer, entry)

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """The broker closed the consumer (its destination was deleted)."""
        if self.cancel is not None:
            self.cancel(self, error)


class StompSession:
    """See the module docstring. Used from the broker's loop only."""

    def __init__(
        self,
        core: BrokerConnection,
        version: str,
        deliver: Callable[[StompSubscription, BrokerConsumer, Entry], None],
        cancelled: Callable[[StompSubscription, ChuteError], None] | None = None,
    ) -> None:
        self.core = core
        self.version = version
        self.session = core.session(AckMode.INDIVIDUAL)
        self._deliver = deliver
        self._cancelled = cancelled
        self.subscriptions: dict[str, StompSubscription] = {}
        self.by_consumer: dict[int, StompSubscription] = {}
        self.transactions: dict[str, BrokerSession] = {}
        self.temp_queues: dict[str, str] = {}  # /temp-queue/NAME -> core address
        self._addresses: dict[str, str] = {}  # destination -> core address (not temp queues)
        self._sends = SendReader()
        self._owing: set[StompSubscription] = set()
        self._credited: set[BrokerConsumer] = set()  # given credit by this read's ACKs and NACKs
        self._next_consumer = 1

    # -- SEND ------------------------------------------------------------------------------

    def send(self, frame: Frame) -> tuple[str | None, bool]:
        """Send what a SEND frame carries; returns its ``receipt`` and whether that must
        wait for the store's sync (a persistent message outside a transaction).

        Raises:
            WouldBlock: full under ``block`` (retry the frame once there is room).
            ChuteError: the send was refused. RemoteProtocolError: a malformed frame.
        """
        send = self._sends.read(frame)
        address = self._addresses.get(send.destination) or self.address(send.destination)
        message = send.message
        if send.reply_to is not None:
            message.reply_to = send.reply_to
            # not an address chute knows: pass it on as the client wrote it
            with contextlib.suppress(InvalidAddress):
                message.reply_to = self.address(send.reply_to)
        session = self.session if send.transaction is None else self.named_tx(send.transaction)
        session.send(address, message, ttl=send.ttl)
        return send.receipt, message.persistent and session.tx is None

    def address(self, destination: str) -> str:
        """The core address of a STOMP destination (a temporary queue's is created now).

        Raises:
            InvalidAddress: not a destination chute can serve.
        """
        address = self._addresses.get(destination)
        if address is not None:
            return address
        if is_temp_queue(destination):
            name = destination[len(TEMP_QUEUE_PREFIX) :]
            if not name:
                raise InvalidAddress("a temporary queue needs a name: /temp-queue/NAME")
            address = self.temp_queues.get(name)
            if address is None:
                address = self.temp_queues[name] = self.core.temporary_queue()
            return address
        address = to_address(destination)
        if len(self._addresses) >= _MAX_CACHED_ADDRESSES:
            self._addresses.clear()
        self._addresses[destination] = address
        return address

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------

    def subscribe(self, options: SubscribeOptions) -> StompSubscription:
        """Open the core consumer of a SUBSCRIBE.

        Raises:
            ChuteError: the id is in use, or the core refused the consumer.
        """
        if options.id in self.subscriptions:
            raise ConsumerError(f"subscription id {options.id!r} is already in use")
        address = self.address(options.destination)
        consumer_id = self._next_consumer
        self._next_consumer += 1
        sub = StompSubscription(
            self._deliver,
            options.id,
            options.destination,
            options.ack,
            consumer_id,
            version=self.version,
            cancel=self._cancel,
            stream=parse(address).kind is Kind.STREAM,
        )
        sub.encoder.whole = self.session.reads_partitions(address)
        self.subscriptions[options.id] = sub
        self.by_consumer[consumer_id] = sub
        try:
            sub.consumer = self.session.consumer(
                consumer_id,
                address,
                sub,
                prefetch=options.prefetch,
                selector=options.selector,
                subscription=options.name,
                durable=options.durable,
                shared=options.shared,
                ack_mode=options.ack.core,
                offset=options.offset,
            )
        except BaseException:
            del self.subscriptions[options.id]
            del self.by_consumer[consumer_id]
            raise
        return sub

    def _cancel(self, sub: StompSubscription, error: ChuteError) -> None:
        """The broker closed ``sub``'s consumer: forget the subscription, tell the driver."""
        if self.subscriptions.get(sub.id) is sub:
            del self.subscriptions[sub.id]
        if sub.consumer is not None:
            self.by_consumer.pop(sub.consumer.id, None)
            self.session.close_consumer(sub.consumer)
        self._owing.discard(sub)
        if self._cancelled is not None:
            self._cancelled(sub, error)

    def unsubscribe(self, sub_id: str, durable_name: str | None) -> None:
        """Close a subscription; with ``durable_name``, delete that durable subscription too.

        Raises:
            ConsumerError: no such subscription. NotFound: no such durable subscription.
        """
        sub = self.subscriptions.pop(sub_id, None)
        if sub is not None and sub.consumer is not None:
            self.by_consumer.pop(sub.consumer.id, None)
            self._owing.discard(sub)
            self.session.close_consumer(sub.consumer)
        if durable_name:
            self.core.unsubscribe(durable_name)
        elif sub is None:
            raise ConsumerError(f"no subscription with id {sub_id!r}")

    # -- ACK / NACK ----------------------------------------------------------------------------

    def ack(self, frame: Frame) -> tuple[str | None, bool]:
        """Acknowledge what an ACK frame names; returns its ``receipt`` and whether that
        must wait for the store's sync (outside a transaction).

        Raises:
            ConsumerError: it names no delivery awaiting an ack. TransactionError.
        """
        token = transaction = receipt = None
        for name, value in frame.headers:  # one pass; the first of each name counts
            if name == "id":
                if token is None:
                    token = value
            elif name == "transaction":
                if transaction is None:
                    transaction = value
            elif name == "receipt" and receipt is None:
                receipt = value
        sub, consumer, seq = self._acked(frame, token)
        session = self.session if transaction is None else self.named_tx(transaction)
        self._give_credit(consumer, session.ack(consumer, seq))
        if sub.legacy:
            self._forget_settled(sub, consumer, frame)
        return receipt, session.tx is None

    def nack(self, frame: Frame) -> bool:
        """Refuse what a NACK frame names (cumulatively for an ``ack:client`` subscription,
        like its ACK); returns whether its receipt must wait for the store's sync.

        Raises:
            ConsumerError: it names no delivery awaiting an ack. TransactionError.
        """
        sub, consumer, seq = self._acked(frame, frame.header("id"))
        requeue = (frame.header("requeue") or "true").lower() != "false"
        tx_name = frame.header("transaction")
        session = self.session if tx_name is None else self.named_tx(tx_name)
        taken = session.nack(consumer, seq, requeue=requeue, cumulative=sub.ack is StompAck.CLIENT)
        if sub.legacy:
            self._forget_settled(sub, consumer, frame)
        self._give_credit(consumer, taken)
        return tx_name is None

    def _acked(
        self, frame: Frame, token: str | None
    ) -> tuple[StompSubscription, BrokerConsumer, int]:
        """The subscription, consumer and sequence number an ACK or NACK names.

        ``token`` is the frame's ``id`` header (``frame.header("id")``).
        """
        if self.version != "1.2":
            token = self._legacy_token(frame)
        elif token is None:
            raise RemoteProtocolError(
                f"a {frame.command} frame needs a 'id' header", "missing-header"
            )
        consumer_id, seq = AckToken.parse(token)
        sub = self.by_consumer.get(consumer_id)
        if sub is None or sub.consumer is None:
            raise ConsumerError(f"ack id {token!r} belongs to no open subscription")
        if sub.ack is StompAck.AUTO:
            raise ConsumerError(f"subscription {sub.id!r} is in ack:auto mode")
        return sub, sub.consumer, seq

    def _legacy_token(self, frame: Frame) -> str:
        """STOMP 1.0/1.1: the ack id of the delivery ``message-id`` (+ ``subscription``) names."""
        message_id = require(frame, "message-id")
        sub_id = frame.header("subscription")
        subs: list[StompSubscription] = []
        if sub_id is None:
            subs.extend(self.subscriptions.values())
        elif sub_id in self.subscriptions:
            subs.append(self.subscriptions[sub_id])
        for sub in subs:
            seq = None if sub.legacy is None else sub.legacy.get(message_id)
            if seq is not None and sub.consumer is not None:
                return AckToken.make(sub.consumer.id, seq)
        raise ConsumerError(f"message {message_id[:60]!r} is not awaiting an ack")

    @staticmethod
    def _forget_settled(sub: StompSubscription, consumer: BrokerConsumer, frame: Frame) -> None:
        """STOMP 1.0/1.1: forget the message-ids an ACK or NACK settled, in O(settled).

        The one the frame names goes at once (client-individual); a cumulative
        one settles from the oldest delivery on, so the front is trimmed.
        """
        legacy = sub.legacy
        if not legacy:
            return
        inflight = consumer.inflight
        message_id = frame.header("message-id")
        if message_id is not None:
            seq = legacy.get(message_id)
            if seq is not None and seq not in inflight:
                del legacy[message_id]
        while legacy:
            _, seq = next(iter(legacy.items()))
            if seq in inflight:
                break
            legacy.popitem(last=False)

    # -- transactions ----------------------------------------------------------------------------

    def begin(self, name: str) -> None:
        """Raises TransactionError: the name is in use."""
        if name in self.transactions:
            raise TransactionError(f"transaction {name!r} has already begun")
        self.transactions[name] = self.core.session(AckMode.INDIVIDUAL, transacted=True)

    def commit(self, name: str) -> None:
        """Raises TransactionError (no such transaction), DestinationFull, WouldBlock."""
        session = self.named_tx(name)
        session.commit()  # a failure ends the connection (ERROR), which rolls it back
        del self.transactions[name]
        session.close()

    def abort(self, name: str) -> None:
        """Raises TransactionError: no such transaction."""
        session = self.named_tx(name)
        del self.transactions[name]
        session.rollback()
        session.close()

    def named_tx(self, name: str) -> BrokerSession:
        session = self.transactions.get(name)
        if session is None:
            raise TransactionError(f"no transaction {name!r} has begun on this connection")
        return session

    # -- credit ------------------------------------------------------------------------------------

    def _give_credit(self, consumer: BrokerConsumer, credit: int) -> None:
        """Let ``consumer`` have ``credit`` more messages, pushed by :meth:`push_credited`.

        One push per consumer per read, not one per ACK: the queue's delivery
        loop runs once for a batch of ACKs (a SEND later in the same read sees
        the credit at once, since only the push of waiting messages waits).
        """
        if credit > 0:
            BrokerSession.add_credit(consumer, credit, push=False)
            self._credited.add(consumer)

    def push_credited(self) -> None:
        """Push waiting messages to the consumers this read's ACKs and NACKs gave credit."""
        if not self._credited:
            return
        credited = list(self._credited)
        self._credited.clear()
        for consumer in credited:
            BrokerSession.push(consumer)

    def owe(self, sub: StompSubscription) -> None:
        """An ``ack:auto`` delivery of ``sub`` was queued for writing."""
        sub.owed += 1
        self._owing.add(sub)

    def written(self) -> None:
        """What was queued went out: give ``ack:auto`` subscriptions their credit back."""
        if not self._owing:
            return
        owing = list(self._owing)
        self._owing.clear()
        for sub in owing:
            credit, sub.owed = sub.owed, 0
            if sub.consumer is not None and not sub.consumer.closed:
                BrokerSession.add_credit(sub.consumer, credit)

    def stop_deliveries(self) -> None:
        """No more pushes (an auto-ack delivery counts once pushed): the connection ends."""
        self._credited.clear()
        for sub in self.subscriptions.values():
            if sub.consumer is not None:
                BrokerSession.stop(sub.consumer)
