"""The native protocol over a stream: one :class:`NativeConnection` per client.

A thin driver: bytes go into the sans-IO :class:`~chute.protocol.PacketCodec`,
packets become calls on the core, and what the core pushes back (deliveries,
responses) is encoded and written. Everything one read produces is written
with one ``transport.write`` at the end of the read (and deliveries caused by
*other* connections are flushed once per loop iteration), since a write per
message would cost a syscall per message.

Ordering: packets of one connection are handled strictly in order. A send
under the ``block`` overflow policy holds the connection: reading pauses and
later packets wait until the send gets room or times out.

Any :class:`~chute.errors.ChuteError` from the core becomes an ``Error``
packet for that request (or, for a one-way send, an unsolicited ``Error``
targeted at the session). A protocol violation becomes a connection-level
``Error`` and a close; nothing a client sends can stop the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chute.content import encode_content
from chute.core.broker import WouldBlock
from chute.core.consumer import AckMode, Consumer, Entry
from chute.core.session import Connection, Session
from chute.errors import (
    AuthenticationFailed,
    ChuteError,
    ConsumerError,
    NotFound,
    RemoteProtocolError,
)
from chute.message import new_message_id
from chute.protocol import packets as p
from chute.protocol.codec import NeedData, PacketCodec
from chute.protocol.splice import encode_deliver, encode_ok
from chute.protocol.wire import encode_packet
from chute.server.stream import Retry, StreamConnection

if TYPE_CHECKING:
    from chute.server.app import BrokerServer

log = logging.getLogger("chute.server")

# A session's "auto" mode: the client acks cumulatively as the application takes
# messages (batched with its credit), so the core runs it as cumulative acks and
# nothing in a dead client's prefetch buffer is lost.
_CORE_ACK_MODES = {
    p.AckMode.AUTO: AckMode.CLIENT,
    p.AckMode.CLIENT: AckMode.CLIENT,
    p.AckMode.INDIVIDUAL: AckMode.INDIVIDUAL,
}


class NativeConnection(StreamConnection):
    """One client connection. Lives on the server's event loop only."""

    def __init__(self, server: BrokerServer) -> None:
        super().__init__(server)
        config = server.config
        self.codec = PacketCodec(
            max_packet_size=config.max_packet_size, max_properties=config.max_properties
        )
        self.sessions: dict[int, Session] = {}
        self.consumers: dict[int, Consumer] = {}
        self._heartbeat_s = 0.0
        self._handlers: dict[type, Callable[[p.Header, Any], None]] = {
            p.Send: self._on_send,
            p.Ack: self._on_ack,
            p.Credit: self._on_credit,
            p.Nack: self._on_nack,
            p.ConsumerOpen: self._on_consumer_open,
            p.ConsumerClose: self._on_consumer_close,
            p.SessionOpen: self._on_session_open,
            p.SessionClose: self._on_session_close,
            p.Commit: self._on_commit,
            p.Rollback: self._on_rollback,
            p.XaPrepare: self._on_xa_prepare,
            p.XaCommit: self._on_xa_commit,
            p.XaRollback: self._on_xa_rollback,
            p.XaRecover: self._on_xa_recover,
            p.XaCommitBatch: self._on_xa_commit_batch,
            p.CursorOpen: self._on_cursor_open,
            p.CursorFetch: self._on_cursor_fetch,
            p.CursorAck: self._on_cursor_ack,
            p.CursorClose: self._on_cursor_close,
            p.Browse: self._on_browse,
            p.Stat: self._on_stat,
            p.Unsubscribe: self._on_unsubscribe,
            p.TempQueue: self._on_temp_queue,
            p.CallbackCreate: self._on_callback_create,
            p.Ping: self._on_ping,
            p.Pong: self._on_pong,
            p.Disconnect: self._on_disconnect,
        }

    # -- asyncio.Protocol -------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        try:
            self.codec.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
            return
        self._process()
        self._check_flow()

    # -- packets ----------------------------------------------------------------------

    def _process(self) -> None:
        """Handle every whole packet buffered, in order, unless a blocked send holds us."""
        codec = self.codec
        handlers = self._handlers
        try:
            while not self._blocked and not self._closing:
                item = codec.next_packet()
                if isinstance(item, NeedData):
                    break
                header, packet = item
                if self.core is None:
                    self._on_connect(header, packet)
                    continue
                handler = handlers.get(type(packet))
                if handler is None:
                    raise RemoteProtocolError(
                        f"a client may not send {type(packet).__name__}", "unexpected-packet"
                    )
                try:
                    handler(header, packet)
                except ChuteError as exc:
                    self._fail(header, exc)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
        self.flush()

    def _on_connect(self, header: p.Header, packet: Any) -> None:
        if not isinstance(packet, p.Connect):
            raise RemoteProtocolError("the first packet must be Connect", "not-connected")
        version = p.negotiate_version(packet.min_version, packet.max_version)
        if version is None:
            raise RemoteProtocolError(
                f"protocol versions {packet.min_version}..{packet.max_version} are not "
                f"supported (this broker speaks {sorted(p.SUPPORTED_VERSIONS)})",
                "unsupported-version",
            )
        users = self.server.config.users
        if users and (packet.login is None or users.get(packet.login) != packet.passcode):
            log.warning("authentication failed for %r from %s", packet.login, self.peer)
            self._respond(header, p.Error(AuthenticationFailed.code, "login or passcode rejected"))
            self._close_after_flush()
            return
        self.codec.version = version
        self.core = Connection(self.broker, login=packet.login, client_id=packet.client_id)
        heartbeat = 0
        if packet.heartbeat_ms and self.server.config.heartbeat_ms:
            heartbeat = max(packet.heartbeat_ms, 1000)
            self._start_heartbeat(heartbeat / 1000)
        self._respond(
            header, p.Connected(version, self.core.id, heartbeat, self.codec.max_packet_size)
        )
        log.info(
            "client %s connected from %s (login=%s, client_id=%s)",
            self.core.id,
            self.peer,
            packet.login,
            packet.client_id,
        )

    def _on_send(self, header: p.Header, packet: p.Send) -> None:
        session = self._session(header.target_id)
        message = packet.message
        if not message.id:
            message.id = new_message_id()
            message.encoded = None
        elif message.encoded is None and packet.content is not None:
            message.encoded = packet.content
        try:
            session.send(packet.address, message, ttl=packet.ttl_ms)
        except WouldBlock as exc:
            self._block_until_room(exc, self._retry_send(header, packet))
            return
        if header.correlation_id:
            self._confirm(header, durable=message.persistent and session.tx is None)

    def _confirm(self, header: p.Header, *, durable: bool) -> None:
        """Answer a request with Ok, once the store made it durable if ``durable``."""
        if durable:
            self._after_sync(lambda error: self._confirmed(header, error))
        else:
            self._respond(header, p.Ok())

    def _confirmed(
        self, header: p.Header, error: BaseException | None, value: str | None = None
    ) -> None:
        if error is None:
            if value is None and header.correlation_id:
                self._out.append(encode_ok(header.correlation_id, self.codec.version))
            else:
                self._respond(header, p.Ok(value))
        else:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            self._respond(header, p.Error("store-error", f"not stored: {reason}"))

    def _retry_send(self, header: p.Header, packet: p.Send) -> Retry:
        def retry(error: ChuteError | None) -> None:
            if error is not None:
                self._fail(header, error)
                return
            try:
                self._on_send(header, packet)
            except ChuteError as exc:
                self._fail(header, exc)

        return retry

    def _on_ack(self, header: p.Header, packet: p.Ack) -> None:
        consumer = self._consumer(header.target_id)
        session = _session_of(consumer)
        if packet.seq:  # seq 0: no ack, only credit
            session.ack(consumer, packet.seq, cumulative=packet.cumulative)
        if packet.credit:
            session.add_credit(consumer, packet.credit)
        if header.correlation_id:
            self._confirm(header, durable=True)

    def _on_credit(self, header: p.Header, packet: p.Credit) -> None:
        Session.add_credit(self._consumer(header.target_id), packet.credit)

    def _on_nack(self, header: p.Header, packet: p.Nack) -> None:
        consumer = self._consumer(header.target_id)
        session = _session_of(consumer)
        session.nack(consumer, packet.seq, requeue=packet.requeue)
        if header.correlation_id:
            self._confirm(header, durable=True)

    def _on_consumer_open(self, header: p.Header, packet: p.ConsumerOpen) -> None:
        session = self._session(header.target_id)
        if packet.consumer_id in self.consumers:
            raise ConsumerError(f"consumer id {packet.consumer_id} is already in use")
        consumer = session.consumer(
            packet.consumer_id,
            packet.address,
            self,
            prefetch=packet.prefetch,
            selector=packet.selector,
            exclusive=packet.exclusive,
            subscription=packet.subscription,
            durable=packet.durable,
            shared=packet.shared,
        )
        self.consumers[packet.consumer_id] = consumer
        self._respond(header, p.Ok())

    def _on_consumer_close(self, header: p.Header, packet: p.ConsumerClose) -> None:
        consumer = self.consumers.pop(header.target_id, None)
        if consumer is not None:
            _session_of(consumer).close_consumer(consumer)
        if header.correlation_id:
            self._respond(header, p.Ok())

    def _on_session_open(self, header: p.Header, packet: p.SessionOpen) -> None:
        sid = header.callback_id or packet.session_id
        if sid in self.sessions:
            raise ConsumerError(f"session id {sid} is already in use")
        mode = _CORE_ACK_MODES[p.AckMode(packet.ack_mode)]
        self.sessions[sid] = self._core().session(mode, transacted=packet.transacted)
        if header.correlation_id:
            self._respond(header, p.Ok())

    def _on_session_close(self, header: p.Header, packet: p.SessionClose) -> None:
        session = self.sessions.pop(header.target_id, None)
        if session is not None:
            for cid in [cid for cid, c in self.consumers.items() if c.owner is session]:
                del self.consumers[cid]
            session.close()
        if header.correlation_id:
            self._respond(header, p.Ok())

    def _on_commit(self, header: p.Header, packet: p.Commit) -> None:
        self._session(header.target_id).commit()
        self._confirm(header, durable=True)

    def _on_rollback(self, header: p.Header, packet: p.Rollback) -> None:
        self._session(header.target_id).rollback()
        self._respond(header, p.Ok())

    def _on_xa_prepare(self, header: p.Header, packet: p.XaPrepare) -> None:
        self._session(header.target_id).prepare(packet.xid)
        self._confirm(header, durable=True)

    def _on_xa_commit(self, header: p.Header, packet: p.XaCommit) -> None:
        self.broker.xa.commit(packet.xid)
        self._confirm(header, durable=True)

    def _on_xa_rollback(self, header: p.Header, packet: p.XaRollback) -> None:
        self.broker.xa.rollback(packet.xid)
        self._confirm(header, durable=True)

    def _on_xa_recover(self, header: p.Header, packet: p.XaRecover) -> None:
        import json  # noqa: PLC0415 - management path only

        self._respond(header, p.Ok(json.dumps(self.broker.xa.xids())))

    def _on_xa_commit_batch(self, header: p.Header, packet: p.XaCommitBatch) -> None:
        committed = self.broker.batches.commit(
            packet.sink, packet.batch, packet.xids, keep=packet.keep
        )
        value = "committed" if committed else "duplicate"
        self._after_sync(lambda error: self._confirmed(header, error, value))

    # -- cursors (the Spark connector, docs/spark.md) ------------------------------------

    def _on_cursor_open(self, header: p.Header, packet: p.CursorOpen) -> None:
        cursors = self.broker.cursors
        if packet.cursor is None:
            earliest, head = cursors.info(packet.address)
        else:
            earliest, head = cursors.open(
                packet.address,
                packet.cursor,
                selector=packet.selector,
                lease_ms=packet.lease_ms,
                owner=self._core().id,
            )
        self._respond(header, p.CursorInfo(earliest, head))

    def _on_cursor_fetch(self, header: p.Header, packet: p.CursorFetch) -> None:
        next_start, entries = self.broker.cursors.fetch(
            packet.address,
            packet.cursor,
            packet.start,
            packet.end,
            max_messages=packet.max_messages,
            max_bytes=packet.max_bytes or self.codec.max_packet_size // 2,
        )
        messages = tuple((e.seq, _delivered_view(e)) for e in entries)
        self._respond(header, p.CursorBatch(next_start, messages))

    def _on_cursor_ack(self, header: p.Header, packet: p.CursorAck) -> None:
        self.broker.cursors.ack(packet.address, packet.cursor, packet.end)
        self._confirm(header, durable=True)

    def _on_cursor_close(self, header: p.Header, packet: p.CursorClose) -> None:
        self.broker.cursors.close(packet.address, packet.cursor, delete=packet.delete)
        self._confirm(header, durable=packet.delete)

    def _on_browse(self, header: p.Header, packet: p.Browse) -> None:
        entries = self.broker.browse(packet.address, packet.selector, packet.limit)
        messages = tuple((e.seq, _delivered_view(e)) for e in entries)
        self._respond(header, p.BrowseResult(messages))

    def _on_stat(self, header: p.Header, packet: p.Stat) -> None:
        import json  # noqa: PLC0415 - management path only

        self._respond(header, p.StatResult(json.dumps(self.server.stats())))

    def _on_unsubscribe(self, header: p.Header, packet: p.Unsubscribe) -> None:
        session = self._any_session()
        session.unsubscribe(packet.subscription, client_id=packet.client_id)
        self._confirm(header, durable=True)

    def _on_temp_queue(self, header: p.Header, packet: p.TempQueue) -> None:
        self._respond(header, p.TempQueueCreated(self._core().temporary_queue()))

    def _on_callback_create(self, header: p.Header, packet: p.CallbackCreate) -> None:
        self._any_session().callback(
            packet.topic, packet.subscription, packet.forward_to, packet.selector
        )
        self._confirm(header, durable=True)

    def _on_ping(self, header: p.Header, packet: p.Ping) -> None:
        self._respond(header, p.Pong())

    def _on_pong(self, header: p.Header, packet: p.Pong) -> None:
        return None

    def _on_disconnect(self, header: p.Header, packet: p.Disconnect) -> None:
        if header.correlation_id:
            self._respond(header, p.Ok())
        self._close_after_flush()

    # -- helpers ------------------------------------------------------------------------

    def _session(self, session_id: int) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"session {session_id} is not open on this connection")
        return session

    def _any_session(self) -> Session:
        """Management requests act for the connection; any session (or a fresh one) does."""
        core = self._core()
        return core.sessions[0] if core.sessions else core.session()

    def _core(self) -> Connection:
        if self.core is None:
            raise RemoteProtocolError("the first packet must be Connect", "not-connected")
        return self.core

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise NotFound(f"consumer {consumer_id} is not open on this connection")
        return consumer

    def _respond(self, header: p.Header, packet: p.Packet) -> None:
        if header.correlation_id or isinstance(packet, p.Error | p.Connected):
            self._out.append(encode_packet(packet, header.correlation_id, 0, 0, self.codec.version))

    def _fail(self, header: p.Header, exc: ChuteError) -> None:
        """Report a failed request: to its waiter, or (one-way) to its session."""
        error = p.Error(exc.code, exc.reason)
        if header.correlation_id:
            self._respond(header, error)
        else:
            self._out.append(encode_packet(error, 0, header.target_id, 0, self.codec.version))
        log.debug("request from %s failed: %s: %s", self.peer, exc.code, exc.reason)

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        log.warning(
            "protocol error from %s: %s (%s); closing", self.peer, exc.reason, exc.error_code
        )
        self._out.append(
            encode_packet(p.Error(exc.error_code, exc.reason), 0, 0, 0, self.codec.version)
        )
        self._close_after_flush()

    # -- Receiver: the core pushes deliveries here ----------------------------------------

    def handle(self, consumer: Consumer, entry: Entry) -> None:
        message = entry.message
        content = message.encoded
        if content is None:
            content = message.encoded = encode_content(message)
        self._out.append(
            encode_deliver(
                consumer.id,
                entry.seq,
                entry.delivery_count,
                entry.redelivered or entry.delivery_count > 1,
                message.timestamp,
                message.expiration,
                content,
                0,
                self.codec.version,
            )
        )
        if consumer.queue.marked(consumer, entry):
            self.mark_delivery()
        self._schedule_flush()

    # -- heartbeats ---------------------------------------------------------------------

    def _start_heartbeat(self, interval: float) -> None:
        self._heartbeat_s = interval
        self._heartbeat = self.server.loop.call_later(interval, self._beat)

    def _beat(self) -> None:
        if self._closing or self.transport is None:
            return
        silent = time.monotonic() - self._last_read
        if silent > 3 * self._heartbeat_s:
            log.warning(
                "client %s sent nothing for %.1f s; closing",
                self.core.id if self.core else self.peer,
                silent,
            )
            self.transport.abort()
            return
        self._out.append(encode_packet(p.Ping(), 0, 0, 0, self.codec.version))
        self.flush()
        self._heartbeat = self.server.loop.call_later(self._heartbeat_s, self._beat)


def _session_of(consumer: Consumer) -> Session:
    session = consumer.owner
    if not isinstance(session, Session):  # only the forwarder of a callback queue has none
        raise ConsumerError(f"consumer {consumer.id} belongs to no session")
    return session


def _delivered_view(entry: Entry) -> Any:
    """The message as a browser sees it: with this queue's delivery fields."""
    message = entry.message
    if entry.delivery_count == message.delivery_count and not entry.redelivered:
        return message
    return message.replace(delivery_count=entry.delivery_count, redelivered=entry.redelivered)
