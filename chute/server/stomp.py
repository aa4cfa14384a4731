"""STOMP over a stream: one :class:`StompConnection` per client.

The same thin-driver shape as :mod:`chute.server.native`: bytes go into the
sans-IO :class:`~chute.stomp.StompCodec`, frames become calls on the core
(through the pure mapping of :mod:`chute.stomp.adapter`), and everything one
read produces is written with one ``transport.write``; deliveries caused by
other connections are flushed once per loop iteration.

Mapping onto the core: one non-transacted core session holds every
subscription (each consumer with its own ack mode); each STOMP transaction
(BEGIN … COMMIT/ABORT) is a transacted core session of its own, which SENDs and
ACKs naming that ``transaction`` go through. A NACK naming a transaction takes
its messages out of flight at once (their credit comes back, as for an ACK)
and is applied at COMMIT, after the core session's commit; ABORT, or the
connection ending with the transaction open, puts them back redelivered, as
an aborted ACK does.

Credit: an ``ack:auto`` subscription's window is refilled as its deliveries are
written, and not while the transport's write buffer is full; a client-mode
subscription gets credit back as it ACKs or NACKs, and the queue pushes
waiting messages once per read, not once per ACK.

The per-message path is kept short (``python -m bench.stomp_path`` measures
it): the codec's fast path and memo of header blocks, a :class:`SendReader`
that reads a repeated header tuple once, a cache of destination → address, a
:class:`~chute.stomp.delivery.MessageEncoder` per subscription that writes
MESSAGE frames from pre-encoded parts, and receipts written without building a
frame. A durable RECEIPT is written and flushed in the loop callback that
reports the store's sync; sockets have TCP_NODELAY.

Errors (STOMP 1.2 §ERROR: "the server MUST then close the connection"): a
:class:`~chute.errors.ChuteError` raised by a frame (a full destination, a
bad selector) and a protocol violation both end the connection the same way.
Reading stops at once and nothing after the failing frame is acted on; once
everything acted on before it is durable (so receipts already owed go out
first, in order), the ERROR frame (with ``receipt-id`` if the frame asked for
a receipt, and a ``code`` header) is written and the connection closed. The
core's connection close then gives unacked messages back and rolls open
transactions back. Nothing a client sends can stop the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import chute
from chute.core.broker import WouldBlock
from chute.core.consumer import AckMode, Consumer, Entry
from chute.core.queue import QueueChannel
from chute.core.session import Connection, Session
from chute.errors import (
    AuthenticationFailed,
    ChuteError,
    ConsumerError,
    InvalidAddress,
    LocalProtocolError,
    RemoteProtocolError,
    TransactionError,
)
from chute.server.stream import Retry, StreamConnection
from chute.stomp import heartbeat
from chute.stomp.adapter import (
    TEMP_QUEUE_PREFIX,
    AckToken,
    SendReader,
    StompAck,
    is_temp_queue,
    message_frame,
    negotiate_version,
    require,
    subscribe_options,
    to_address,
)
from chute.stomp.codec import HEARTBEAT, NeedData, StompCodec
from chute.stomp.delivery import MessageEncoder
from chute.stomp.frames import SUPPORTED_VERSIONS, Frame

if TYPE_CHECKING:
    from chute.server.app import BrokerServer

log = logging.getLogger("chute.stomp")

_SERVER_NAME = f"chute/{chute.__version__}"
_MIN_HEARTBEAT_MS = 1000
_MAX_CACHED_ADDRESSES = 1024


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on a TCP transport's socket: a RECEIPT or a MESSAGE leaves at once.

    asyncio and uvloop set it already on the sockets they accept; this makes
    it a property of the STOMP listener rather than of the event loop in use
    (Nagle's algorithm would hold a small frame for up to the peer's delayed ACK:
    ~40 ms on Linux). Other transports (WebSocket, a test's fake) have no socket.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Subscription:
    """One SUBSCRIBE: the core consumer's receiver, so deliveries know their subscription."""

    __slots__ = (
        "ack",
        "auto",
        "conn",
        "consumer",
        "destination",
        "encoder",
        "id",
        "legacy",
        "owed",
    )

    def __init__(
        self, conn: StompConnection, sub_id: str, destination: str, ack: StompAck, consumer_id: int
    ):
        self.conn = conn
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.auto = ack is StompAck.AUTO
        self.consumer: Consumer | None = None
        self.owed = 0  # auto mode: deliveries written whose credit is not yet given back
        # STOMP 1.0/1.1 client modes: message-id -> seq of the deliveries awaiting an ACK,
        # in delivery order (ACK names a message by message-id, not by ack id)
        self.legacy: OrderedDict[str, int] | None = (
            OrderedDict() if not self.auto and conn.codec.version != "1.2" else None
        )
        self.encoder = MessageEncoder(
            destination,
            sub_id,
            None if self.auto else AckToken.prefix(consumer_id),
            conn.codec.version,
        )

    def handle(self, consumer: Consumer, entry: Entry) -> None:
        self.consumer = consumer
        self.conn.deliver(self, consumer, entry)


class StompConnection(StreamConnection):
    """One STOMP client connection. Lives on the server's event loop only."""

    protocol_name = "STOMP"

    def __init__(self, server: BrokerServer) -> None:
        super().__init__(server)
        self.codec = StompCodec(max_frame_size=server.config.max_packet_size)
        self.session: Session | None = None
        self.subscriptions: dict[str, _Subscription] = {}
        self.by_consumer: dict[int, _Subscription] = {}
        self.transactions: dict[str, Session] = {}
        self._tx_nacks: dict[str, list[tuple[QueueChannel, Entry, bool]]] = {}  # (…, requeue)
        self.temp_queues: dict[str, str] = {}  # /temp-queue/NAME -> core address
        self._addresses: dict[str, str] = {}  # destination -> core address (not temp queues)
        self._sends = SendReader()
        self._owing: set[_Subscription] = set()
        self._credited: set[Consumer] = set()  # given credit by this read's ACKs and NACKs
        self._next_consumer = 1
        self._send_every = 0.0
        self._expect_every = 0.0
        self._handlers: dict[str, Callable[[Frame], None]] = {
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit,
            "ABORT": self._on_abort,
            "DISCONNECT": self._on_disconnect,
        }

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        _set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        if self._closing:
            return  # after an ERROR or DISCONNECT nothing more is read
        try:
            self.codec.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc, None)
            return
        self._process()
        self._check_flow()

    def connection_lost(self, exc: Exception | None) -> None:
        for name in list(self._tx_nacks):
            self._settle_tx_nacks(name, commit=False)
        super().connection_lost(exc)

    # -- frames -------------------------------------------------------------------------

    def _process(self) -> None:
        """Handle every whole frame buffered, in order, unless a blocked send holds us."""
        codec = self.codec
        frame: Frame | None = None
        try:
            while not self._blocked and not self._closing:
                item = codec.next_frame()
                if isinstance(item, NeedData):
                    break
                if item is HEARTBEAT:
                    continue
                frame = item
                if self.core is None:
                    self._on_connect(frame)
                    continue
                handler = self._handlers.get(frame.command)
                if handler is None:
                    raise RemoteProtocolError(
                        f"a client may not send {frame.command} now", "unexpected-frame"
                    )
                try:
                    handler(frame)
                except ChuteError as exc:
                    if isinstance(exc, RemoteProtocolError):
                        raise
                    self._fail(frame, exc)
        except RemoteProtocolError as exc:
            self._protocol_error(exc, frame)
        if self._credited:
            self._push_credited()
        self.flush()

    def _give_credit(self, consumer: Consumer, credit: int) -> None:
        """Let ``consumer`` have ``credit`` more messages, pushed once this read is handled.

        One push per consumer per read, not one per ACK: the queue's delivery
        loop runs once for a batch of ACKs (a SEND later in the same read sees
        the credit at once, since only the push of waiting messages waits).
        """
        if credit > 0:
            consumer.credit += credit
            self._credited.add(consumer)

    def _push_credited(self) -> None:
        credited = list(self._credited)
        self._credited.clear()
        if self._closing:
            return
        for consumer in credited:
            if not consumer.closed:
                consumer.queue.deliver()

    def _on_connect(self, frame: Frame) -> None:
        if frame.command not in ("CONNECT", "STOMP"):
            raise RemoteProtocolError(
                f"the first frame must be CONNECT or STOMP, not {frame.command}", "not-connected"
            )
        version = negotiate_version(frame.header("accept-version"))
        if version is None:
            supported = ",".join(SUPPORTED_VERSIONS)
            self._write(
                Frame.error(
                    "unsupported protocol version",
                    f"this broker speaks STOMP {supported}",
                    headers=[("version", supported)],
                )
            )
            self._close_after_flush()
            return
        self.codec.version = version
        login = frame.header("login")
        users = self.server.config.users
        if users and (login is None or users.get(login) != frame.header("passcode")):
            log.warning("STOMP authentication failed for %r from %s", login, self.peer)
            self._write(
                Frame.error(
                    "login or passcode rejected",
                    "check the login and passcode headers",
                    headers=[("code", AuthenticationFailed.code)],
                )
            )
            self._close_after_flush()
            return
        beat = (0, 0)
        if version != "1.0":
            client_beat = heartbeat.parse(frame.header("heart-beat"))
            config_ms = self.server.config.heartbeat_ms
            if config_ms:
                floor = min(_MIN_HEARTBEAT_MS, config_ms)
                beat = (floor, floor)
            send_ms, expect_ms = heartbeat.negotiate(client_beat, beat)
            self._start_heartbeat(send_ms, expect_ms)
        client_id = frame.header("client-id") or None
        self.core = Connection(self.broker, login=login, client_id=client_id)
        self.session = self.core.session(AckMode.INDIVIDUAL)
        self._write(
            Frame.connected(version, heart_beat=beat, session=self.core.id, server=_SERVER_NAME)
        )
        log.info(
            "STOMP %s client %s connected from %s (login=%s, client_id=%s)",
            version,
            self.core.id,
            self.peer,
            login,
            client_id,
        )

    # SEND -------------------------------------------------------------------------------

    def _on_send(self, frame: Frame) -> None:
        send = self._sends.read(frame)
        address = self._addresses.get(send.destination) or self._address(send.destination)
        message = send.message
        if send.reply_to is not None:
            message.reply_to = send.reply_to
            # not an address chute knows: pass it on as the client wrote it
            with contextlib.suppress(InvalidAddress):
                message.reply_to = self._address(send.reply_to)
        session = self.session if send.transaction is None else self._named_tx(send.transaction)
        if session is None:
            raise RemoteProtocolError("the first frame must be CONNECT", "not-connected")
        try:
            session.send(address, message, ttl=send.ttl)
        except WouldBlock as exc:
            self._block_until_room(exc, self._retry_send(frame))
            return
        if send.receipt is not None:
            self._answer(send.receipt, durable=message.persistent and session.tx is None)

    def _address(self, destination: str) -> str:
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
                address = self.temp_queues[name] = self._core().temporary_queue()
            return address
        address = to_address(destination)
        if len(self._addresses) >= _MAX_CACHED_ADDRESSES:
            self._addresses.clear()
        self._addresses[destination] = address
        return address

    def _retry_send(self, frame: Frame) -> Retry:
        def retry(error: ChuteError | None) -> None:
            try:
                if error is not None:
                    raise error
                self._on_send(frame)
            except RemoteProtocolError as exc:
                self._protocol_error(exc, frame)
            except ChuteError as exc:
                self._fail(frame, exc)

        return retry

    # SUBSCRIBE / UNSUBSCRIBE ----------------------------------------------------------------

    def _on_subscribe(self, frame: Frame) -> None:
        options = subscribe_options(frame, self.codec.version)
        if options.id in self.subscriptions:
            raise ConsumerError(f"subscription id {options.id!r} is already in use")
        address = self._address(options.destination)
        consumer_id = self._next_consumer
        self._next_consumer += 1
        sub = _Subscription(self, options.id, options.destination, options.ack, consumer_id)
        self.subscriptions[options.id] = sub
        self.by_consumer[consumer_id] = sub
        try:
            sub.consumer = self._session().consumer(
                consumer_id,
                address,
                sub,
                prefetch=options.prefetch,
                selector=options.selector,
                subscription=options.name,
                durable=options.durable,
                shared=options.shared,
                ack_mode=options.ack.core,
            )
        except BaseException:
            del self.subscriptions[options.id]
            del self.by_consumer[consumer_id]
            raise
        self._receipt(frame)

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.header("id")
        if sub_id is None and self.codec.version == "1.0":
            sub_id = frame.header("destination")
        if sub_id is None:
            raise RemoteProtocolError("an UNSUBSCRIBE frame needs an 'id' header", "missing-header")
        sub = self.subscriptions.pop(sub_id, None)
        if sub is not None and sub.consumer is not None:
            self.by_consumer.pop(sub.consumer.id, None)
            self._owing.discard(sub)
            self._session().close_consumer(sub.consumer)
        name = frame.header("durable-subscription-name") or frame.header(
            "activemq.subscriptionName"
        )
        if name:
            self._session().unsubscribe(name)
        elif sub is None:
            raise ConsumerError(f"no subscription with id {sub_id!r}")
        self._receipt(frame, durable=bool(name))

    # ACK / NACK -------------------------------------------------------------------------

    def _acked(self, frame: Frame, token: str | None) -> tuple[_Subscription, Consumer, int]:
        """The subscription, consumer and sequence number an ACK or NACK names.

        ``token`` is the frame's ``id`` header (``frame.header("id")``).
        """
        if self.codec.version != "1.2":
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
        subs: list[_Subscription] = []
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
    def _forget_settled(sub: _Subscription, consumer: Consumer, frame: Frame) -> None:
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

    def _on_ack(self, frame: Frame) -> None:
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
        session = self.session if transaction is None else self._named_tx(transaction)
        if session is None:
            raise RemoteProtocolError("the first frame must be CONNECT", "not-connected")
        settled = session.ack(consumer, seq)
        self._give_credit(consumer, settled)
        if sub.legacy:
            self._forget_settled(sub, consumer, frame)
        if receipt is not None:
            self._answer(receipt, durable=session.tx is None)

    def _on_nack(self, frame: Frame) -> None:
        sub, consumer, seq = self._acked(frame, frame.header("id"))
        requeue = (frame.header("requeue") or "true").lower() != "false"
        if seq not in consumer.inflight:
            raise ConsumerError(f"message {seq} is not awaiting an ack on {sub.id!r}")
        seqs = [seq]
        if sub.ack is StompAck.CLIENT:  # cumulative, like its ACK
            seqs = []
            for s in consumer.inflight:
                seqs.append(s)
                if s == seq:
                    break
        tx_name = frame.header("transaction")
        if tx_name is not None:
            self._named_tx(tx_name)
            queue = consumer.queue
            pending = self._tx_nacks.setdefault(tx_name, [])
            for s in seqs:
                pending.extend(
                    (queue, e, requeue) for e in queue.take_acked(consumer, s, cumulative=False)
                )
        else:
            session = self._session()
            for s in seqs:
                session.nack(consumer, s, requeue=requeue)
        if sub.legacy:
            self._forget_settled(sub, consumer, frame)
        self._give_credit(consumer, len(seqs))
        self._receipt(frame, durable=tx_name is None)

    def _settle_tx_nacks(self, name: str, *, commit: bool) -> None:
        """Apply a transaction's NACKs (``commit``), or give their messages back."""
        for queue, entry, requeue in self._tx_nacks.pop(name, ()):
            if queue.deleted:
                continue
            if requeue or not commit:
                queue.requeue([entry])
            else:
                queue.reject(entry)

    # transactions ------------------------------------------------------------------------

    def _on_begin(self, frame: Frame) -> None:
        name = require(frame, "transaction")
        if name in self.transactions:
            raise TransactionError(f"transaction {name!r} has already begun")
        self.transactions[name] = self._core().session(AckMode.INDIVIDUAL, transacted=True)
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        name = require(frame, "transaction")
        session = self._named_tx(name)
        session.commit()  # a failure ends the connection (ERROR), which rolls it back
        del self.transactions[name]
        session.close()
        self._settle_tx_nacks(name, commit=True)
        self._receipt(frame, durable=True)

    def _on_abort(self, frame: Frame) -> None:
        name = require(frame, "transaction")
        session = self._named_tx(name)
        del self.transactions[name]
        session.rollback()
        session.close()
        self._settle_tx_nacks(name, commit=False)
        self._receipt(frame)

    def _named_tx(self, name: str) -> Session:
        session = self.transactions.get(name)
        if session is None:
            raise TransactionError(f"no transaction {name!r} has begun on this connection")
        return session

    def _on_disconnect(self, frame: Frame) -> None:
        self._closing = True  # nothing after DISCONNECT is read
        self._stop_deliveries()
        if frame.header("receipt") is None:
            self._close_after_flush()
            return
        self._receipt(frame, durable=True, then_close=True)

    # -- helpers ------------------------------------------------------------------------

    def _core(self) -> Connection:
        if self.core is None:
            raise RemoteProtocolError("the first frame must be CONNECT", "not-connected")
        return self.core

    def _session(self) -> Session:
        if self.session is None:
            raise RemoteProtocolError("the first frame must be CONNECT", "not-connected")
        return self.session

    def _receipt(self, frame: Frame, *, durable: bool = False, then_close: bool = False) -> None:
        """Answer a ``receipt`` header: at once, or once the store synced if ``durable``."""
        receipt = frame.header("receipt")
        if receipt is not None:
            self._answer(receipt, durable=durable, then_close=then_close)

    def _answer(self, receipt: str, *, durable: bool = False, then_close: bool = False) -> None:
        """Send RECEIPT ``receipt``: at once, or once the store synced if ``durable``.

        A durable receipt is written (and flushed) in the very loop callback
        that reports the sync, with nothing waiting for a later iteration.
        """
        if not durable:
            self._write_receipt(receipt)
            if then_close:
                self._close_after_flush()
            return
        self._after_sync(lambda error: self._receipted(receipt, error, then_close))

    def _write_receipt(self, receipt: str) -> None:
        try:
            self._out.append(self.codec.send_receipt(receipt))
        except LocalProtocolError as exc:  # a header this version cannot carry
            log.warning("cannot send RECEIPT to %s: %s", self.peer, exc.reason)

    def _receipted(self, receipt: str, error: BaseException | None, then_close: bool) -> None:
        if error is None:
            self._write_receipt(receipt)
        else:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            self._write(Frame.error("not stored", reason, receipt_id=receipt))
        if then_close:
            self._close_after_flush()

    def _write(self, frame: Frame) -> None:
        try:
            self._out.append(self.codec.send(frame))
        except LocalProtocolError as exc:  # a header this version cannot carry
            log.warning("cannot send %s to %s: %s", frame.command, self.peer, exc.reason)

    def _fail(self, frame: Frame, exc: ChuteError) -> None:
        log.info(
            "STOMP %s from %s failed: %s: %s; closing",
            frame.command,
            self.peer,
            exc.code,
            exc.reason,
        )
        self._error_and_close(
            Frame.error(
                exc.reason,
                f"{frame.command} failed: {exc.code}: {exc.reason}",
                receipt_id=frame.header("receipt"),
                headers=[("code", exc.code)],
            )
        )

    def _protocol_error(self, exc: RemoteProtocolError, frame: Frame | None) -> None:
        log.warning(
            "STOMP protocol error from %s: %s (%s); closing", self.peer, exc.reason, exc.error_code
        )
        self._error_and_close(
            Frame.error(
                exc.reason,
                f"protocol error ({exc.error_code}): {exc.reason}",
                receipt_id=frame.header("receipt") if frame is not None else None,
                headers=[("code", exc.error_code)],
            )
        )

    def _stop_deliveries(self) -> None:
        """No more pushes to a closing connection (an auto-ack delivery counts once pushed)."""
        for sub in self.subscriptions.values():
            if sub.consumer is not None:
                sub.consumer.credit = 0

    def _error_and_close(self, error: Frame) -> None:
        """Stop reading; once what came before is durable, send ``error`` and close."""
        if self._closing:
            return
        self._closing = True
        self._stop_deliveries()
        if self.transport is not None:
            self.transport.pause_reading()
        if self.core is None:  # nothing was acted on: no receipt can be owed
            self._write(error)
            self._close_after_flush()
            return

        def send_error(_: BaseException | None) -> None:
            self._write(error)
            self._close_after_flush()

        self._after_sync(send_error)

    # -- deliveries -------------------------------------------------------------------------

    def deliver(self, sub: _Subscription, consumer: Consumer, entry: Entry) -> None:
        """Write the MESSAGE frame of ``entry`` (flushed with this loop iteration's writes)."""
        message = entry.message
        try:
            data = sub.encoder.encode(message, entry.seq, entry.delivery_count, entry.redelivered)
        except UnicodeEncodeError:  # a lone surrogate: the general encoder reports it
            self._write(
                message_frame(
                    message,
                    destination=sub.destination,
                    subscription=sub.id,
                    ack=None if sub.auto else AckToken.make(consumer.id, entry.seq),
                    delivery_count=entry.delivery_count,
                    redelivered=entry.redelivered or entry.delivery_count > 1,
                    version=self.codec.version,
                )
            )
        else:
            self._out.append(data)
        if sub.auto:
            sub.owed += 1
            self._owing.add(sub)
        elif sub.legacy is not None:
            sub.legacy[message.id] = entry.seq
        if consumer.queue.marked(consumer, entry):
            self.mark_delivery()  # redelivered after a crash (docs/durability.md)
        if not self._flush_scheduled:
            self._schedule_flush()

    def _writable(self) -> None:
        """Give auto-ack subscriptions back the credit of what was written."""
        if self._paused or self._closing or not self._owing:
            return
        owing = list(self._owing)
        self._owing.clear()
        for sub in owing:
            credit, sub.owed = sub.owed, 0
            if sub.consumer is not None and not sub.consumer.closed:
                Session.add_credit(sub.consumer, credit)

    # -- heart-beats ----------------------------------------------------------------------

    def _start_heartbeat(self, send_ms: int, expect_ms: int) -> None:
        self._send_every = send_ms / 1000
        self._expect_every = expect_ms / 1000
        intervals = [s for s in (self._send_every, self._expect_every) if s]
        if intervals:
            self._heartbeat = self.server.loop.call_later(min(intervals) / 2, self._beat)

    def _beat(self) -> None:
        if self._closing or self.transport is None:
            return
        now = time.monotonic()
        if self._expect_every and now - self._last_read > 2 * self._expect_every:
            log.warning("STOMP client %s sent no heart-beat; closing", self.peer)
            self.transport.abort()
            return
        if self._send_every and now - self._last_write >= self._send_every / 2:
            self.transport.write(b"\n")
            self._last_write = now
        intervals = [s for s in (self._send_every, self._expect_every) if s]
        self._heartbeat = self.server.loop.call_later(min(intervals) / 2, self._beat)
