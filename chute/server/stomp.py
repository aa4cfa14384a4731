"""STOMP over a stream: one :class:`StompConnection` per client.

The same thin-driver shape as :mod:`chute.server.native`: bytes go into the
sans-IO :class:`~chute.stomp.StompCodec`, frames become calls on the core
(through the pure mapping of :mod:`chute.stomp.adapter`), and everything one
read produces is written with one ``transport.write``; deliveries caused by
other connections are flushed once per loop iteration.

Mapping onto the core: one non-transacted core session holds every
subscription (each consumer with its own ack mode); each STOMP transaction
(BEGIN … COMMIT/ABORT) is a transacted core session of its own, which SENDs and
ACKs naming that ``transaction`` go through.

Credit: an ``ack:auto`` subscription's window is refilled as its deliveries are
written, and not while the transport's write buffer is full; a client-mode
subscription gets credit back as it ACKs or NACKs.

Errors: a :class:`~chute.errors.ChuteError` raised by a frame becomes an ERROR
frame (with ``receipt-id`` if the frame asked for a receipt) and the
connection carries on; a protocol violation becomes an ERROR frame and a
close. Nothing a client sends can stop the broker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import chute
from chute.core.broker import WouldBlock
from chute.core.consumer import AckMode, Consumer, Entry
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
    StompAck,
    is_temp_queue,
    message_frame,
    message_from_send,
    negotiate_version,
    require,
    subscribe_options,
    to_address,
)
from chute.stomp.codec import HEARTBEAT, NeedData, StompCodec
from chute.stomp.frames import SUPPORTED_VERSIONS, Frame

if TYPE_CHECKING:
    from chute.server.app import BrokerServer

log = logging.getLogger("chute.stomp")

_SERVER_NAME = f"chute/{chute.__version__}"
_MIN_HEARTBEAT_MS = 1000


class _Subscription:
    """One SUBSCRIBE: the core consumer's receiver, so deliveries know their subscription."""

    __slots__ = ("ack", "conn", "consumer", "destination", "id", "owed")

    def __init__(self, conn: StompConnection, sub_id: str, destination: str, ack: StompAck):
        self.conn = conn
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.consumer: Consumer | None = None
        self.owed = 0  # auto mode: deliveries written whose credit is not yet given back

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
        self.temp_queues: dict[str, str] = {}  # /temp-queue/NAME -> core address
        self._owing: set[_Subscription] = set()
        self._next_consumer = 1
        # STOMP 1.0/1.1 ACK names a message by message-id (+ subscription), not by ack id
        self._legacy_acks: dict[tuple[str, str], str] = {}
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

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        try:
            self.codec.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc, None)
            return
        self._process()

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
        self.flush()

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
        destination = require(frame, "destination")
        address = self._address(destination)
        reply_to = frame.header("reply-to")
        if reply_to is not None:
            # not an address chute knows: pass it on as the client wrote it
            with contextlib.suppress(InvalidAddress):
                reply_to = self._address(reply_to)
        message, ttl = message_from_send(frame, reply_to)
        session = self._tx(frame) or self._session()
        try:
            session.send(address, message, ttl=ttl)
        except WouldBlock as exc:
            self._block_until_room(exc, self._retry_send(frame))
            return
        self._receipt(frame, durable=message.persistent and session.tx is None)

    def _address(self, destination: str) -> str:
        if is_temp_queue(destination):
            name = destination[len(TEMP_QUEUE_PREFIX) :]
            if not name:
                raise InvalidAddress("a temporary queue needs a name: /temp-queue/NAME")
            address = self.temp_queues.get(name)
            if address is None:
                address = self.temp_queues[name] = self._core().temporary_queue()
            return address
        return to_address(destination)

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
        sub = _Subscription(self, options.id, options.destination, options.ack)
        consumer_id = self._next_consumer
        self._next_consumer += 1
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
            for key in [k for k in self._legacy_acks if k[0] == sub_id]:
                del self._legacy_acks[key]
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

    def _acked(self, frame: Frame) -> tuple[_Subscription, Consumer, int]:
        v12 = self.codec.version == "1.2"
        token = require(frame, "id") if v12 else self._legacy_token(frame)
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
        acks = self._legacy_acks
        if sub_id is not None:
            token = acks.get((sub_id, message_id))
        else:
            token = next((t for (_, m), t in acks.items() if m == message_id), None)
        if token is None:
            raise ConsumerError(f"message {message_id[:60]!r} is not awaiting an ack")
        return token

    def _forget_settled(self, sub: _Subscription, consumer: Consumer) -> None:
        if self._legacy_acks:
            inflight = consumer.inflight
            for key, token in list(self._legacy_acks.items()):
                if key[0] == sub.id and AckToken.parse(token)[1] not in inflight:
                    del self._legacy_acks[key]

    def _on_ack(self, frame: Frame) -> None:
        sub, consumer, seq = self._acked(frame)
        session = self._tx(frame) or self._session()
        settled = session.ack(consumer, seq)
        Session.add_credit(consumer, settled)
        self._forget_settled(sub, consumer)
        self._receipt(frame, durable=session.tx is None)

    def _on_nack(self, frame: Frame) -> None:
        sub, consumer, seq = self._acked(frame)
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
        session = self._session()
        for s in seqs:
            session.nack(consumer, s, requeue=requeue)
        self._forget_settled(sub, consumer)
        Session.add_credit(consumer, len(seqs))
        self._receipt(frame, durable=True)

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
        session.commit()  # on failure the transaction stays open: ABORT it or retry
        del self.transactions[name]
        session.close()
        self._receipt(frame, durable=True)

    def _on_abort(self, frame: Frame) -> None:
        name = require(frame, "transaction")
        session = self._named_tx(name)
        del self.transactions[name]
        session.rollback()
        session.close()
        self._receipt(frame)

    def _tx(self, frame: Frame) -> Session | None:
        name = frame.header("transaction")
        return None if name is None else self._named_tx(name)

    def _named_tx(self, name: str) -> Session:
        session = self.transactions.get(name)
        if session is None:
            raise TransactionError(f"no transaction {name!r} has begun on this connection")
        return session

    def _on_disconnect(self, frame: Frame) -> None:
        self._closing = True  # nothing after DISCONNECT is read
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
        if receipt is None:
            return
        if not durable:
            self._write(Frame.receipt(receipt))
            if then_close:
                self._close_after_flush()
            return
        self._after_sync(lambda error: self._receipted(receipt, error, then_close))

    def _receipted(self, receipt: str, error: BaseException | None, then_close: bool) -> None:
        if error is None:
            self._write(Frame.receipt(receipt))
        else:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            self._write(Frame.error("not stored", reason, receipt_id=receipt))
        if then_close:
            self._close_after_flush()
        else:
            self.flush()

    def _write(self, frame: Frame) -> None:
        try:
            self._out.append(self.codec.send(frame))
        except LocalProtocolError as exc:  # a header this version cannot carry
            log.warning("cannot send %s to %s: %s", frame.command, self.peer, exc.reason)

    def _fail(self, frame: Frame, exc: ChuteError) -> None:
        self._write(
            Frame.error(
                exc.reason,
                f"{frame.command} failed: {exc.code}: {exc.reason}",
                receipt_id=frame.header("receipt"),
                headers=[("code", exc.code)],
            )
        )
        log.debug("%s from %s failed: %s: %s", frame.command, self.peer, exc.code, exc.reason)

    def _protocol_error(self, exc: RemoteProtocolError, frame: Frame | None) -> None:
        log.warning(
            "STOMP protocol error from %s: %s (%s); closing", self.peer, exc.reason, exc.error_code
        )
        self._write(
            Frame.error(
                exc.reason,
                f"protocol error ({exc.error_code}): {exc.reason}",
                receipt_id=frame.header("receipt") if frame is not None else None,
                headers=[("code", exc.error_code)],
            )
        )
        self._close_after_flush()

    # -- deliveries -------------------------------------------------------------------------

    def deliver(self, sub: _Subscription, consumer: Consumer, entry: Entry) -> None:
        ack = None if sub.ack is StompAck.AUTO else AckToken.make(consumer.id, entry.seq)
        self._write(
            message_frame(
                entry.message,
                destination=sub.destination,
                subscription=sub.id,
                ack=ack,
                delivery_count=entry.delivery_count,
                redelivered=entry.redelivered or entry.delivery_count > 1,
                version=self.codec.version,
            )
        )
        if ack is not None:
            if self.codec.version != "1.2":
                self._legacy_acks[sub.id, entry.message.id] = ack
        else:
            sub.owed += 1
            self._owing.add(sub)
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
