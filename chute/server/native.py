"""The native protocol over a stream: one :class:`NativeConnection` per client.

A thin driver: bytes go into the sans-IO :class:`~chute.protocol.PacketCodec`,
packets become calls on the core, and what the core pushes back (deliveries,
responses) is encoded and written. Everything one read produces is written
with one ``transport.write`` at the end of the read (and deliveries caused by
*other* connections are flushed once per loop iteration), since a write per
message would cost a syscall per message.

Ordering: packets of one connection are handled strictly in order. A send
under the ``block`` overflow policy holds the connection: reading pauses and
later packets wait until the send gets room or times out. A browse is acted on
in steps (``_work``, a generator a step per ``next()``: a few messages of the
page), each a unit of the connection's turn like a packet, so a page read from
the journal does not hold the loop for milliseconds; later packets wait for it.
The management requests (browse, statistics, delete, purge, moving messages)
are in :mod:`chute.server.native_manage`; a move is acted on in steps the same way.
The cursors' requests (the Spark connector's reads) are in
:mod:`chute.server.native_cursors`.

Any :class:`~chute.errors.ChuteError` from the core becomes an ``Error``
packet for that request (or, for a one-way send, an unsolicited ``Error``
targeted at the session). A protocol violation becomes a connection-level
``Error`` and a close; nothing a client sends can stop the broker.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from chute.content import encode_content
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.access import Action
from chute.core.rules.routing import WouldBlock
from chute.errors import (
    ChuteError,
    ConsumerError,
    NotFound,
    RemoteProtocolError,
)
from chute.message import new_message_id
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.splice import encode_deliver, encode_ok
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server.host import Retry, ServerHost
from chute.server.native_cursors import CursorRequests
from chute.server.native_manage import ManagementRequests
from chute.server.native_runs import SendRuns, sent_message
from chute.server.partial import REFUSE_FROM
from chute.server.peers import PEER_PACKETS, PeerLink
from chute.server.stream import Hold, StreamConnection

log = logging.getLogger("chute.server")


# A session's "auto" mode: the client acks cumulatively as the application takes
# messages (batched with its credit), so the core runs it as cumulative acks and
# nothing in a dead client's prefetch buffer is lost.
_CORE_ACK_MODES = {
    p.SessionAckMode.AUTO: AckMode.CLIENT,
    p.SessionAckMode.CLIENT: AckMode.CLIENT,
    p.SessionAckMode.INDIVIDUAL: AckMode.INDIVIDUAL,
}


class NativeConnection(SendRuns, ManagementRequests, CursorRequests, StreamConnection):
    """One client connection. Lives on the server's event loop only."""

    def __init__(self, server: ServerHost) -> None:
        super().__init__(server)
        config = server.config
        self.codec = PacketCodec(  # max_packet_size once the client logged in
            max_packet_size=config.limits.login_frame_size,
            max_properties=config.limits.max_properties,
        )
        self.sessions: dict[int, BrokerSession] = {}
        self.consumers: dict[int, tuple[BrokerConsumer, BrokerSession]] = {}
        self._work: Generator[None, None, None] | None = None  # a request acted on in steps
        self._run: list[tuple[p.Header, p.Send]] = []  # sends to one stream, taken together
        self._checked: str | None = None  # the address a packet in progress was allowed
        self._handlers: dict[type, Callable[[p.Header, Any], None]] = {
            p.Send: self._on_send,
            p.SendMany: self._on_send_many,
            p.Ack: self._on_ack,
            p.Credit: self._on_credit,
            p.Nack: self._on_nack,
            p.ConsumerOpen: self._on_consumer_open,
            p.StreamConsumerOpen: self._on_stream_consumer_open,
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
            p.BrowseFetch: self._on_browse_fetch,
            p.StatFetch: self._on_stat_fetch,
            p.Browse: self._on_browse,
            p.Stat: self._on_stat,
            p.Unsubscribe: self._on_unsubscribe,
            p.TempQueue: self._on_temp_queue,
            p.CallbackCreate: self._on_callback_create,
            p.DestinationCreate: self._on_destination_create,
            p.DestinationDelete: self._on_destination_delete,
            p.DestinationPurge: self._on_destination_purge,
            p.Move: self._on_move,
            p.DeadLetterRetry: self._on_dead_letter_retry,
            p.Ping: self._on_ping,
            p.Pong: self._on_pong,
            p.Disconnect: self._on_disconnect,
            p.PeerOpen: self._on_peer_open,
        }
        for peer_packet in PEER_PACKETS:
            self._handlers[peer_packet] = self._on_peer_packet
        self._link: PeerLink | None = None  # this connection is a cluster node's link

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        link, self._link = self._link, None
        peers = self.server.peers
        if link is not None and peers is not None:
            peers.lost(link)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.liveness.last_read = time.monotonic()
        try:
            self.codec.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
            return
        self._act()
        if self.core is not None and not self.closing:
            self._check_unfinished()

    def drop_unfinished(self) -> None:
        self.codec.discard()

    def _buffered(self) -> int:
        return self.codec.buffered

    def _check_unfinished(self) -> None:
        """What is left of the reads is a packet in progress (:mod:`chute.server.partial`):
        a large Send to an address this client may not send to is refused from its
        header, before its body arrives; else its bytes count against the bounds."""
        core = self.core
        assert core is not None  # noqa: S101 (the caller checked)
        size = self.codec.buffered
        if size >= REFUSE_FROM and not self.broker.access.allows_all:
            address = self.codec.unfinished_send()
            if address is not None and address != self._checked:
                self._checked = address
                try:
                    core.authorize(Action.SEND, address)
                except ChuteError as exc:
                    self.server.limits.partial.refused(self, address, size, exc.reason)
                    self.close_with_error(exc.code, exc.reason)
                    self.drop_unfinished()
                    return
        self.server.limits.partial.update(self, core.login, size, self.broker.memory)

    # -- packets ----------------------------------------------------------------------

    def _process(self) -> None:
        """Handle every whole packet buffered, in order, unless a blocked send holds us."""
        codec = self.codec
        streams = self.broker.streams
        turn = self._turn()
        asked = False
        try:
            while self._may_act(turn):
                work = self._work
                if work is not None:  # a request acted on in steps comes first
                    try:
                        next(work)
                    except StopIteration:
                        self._work = None
                    continue
                item = codec.next_packet()
                if isinstance(item, NeedData):
                    break
                header, packet = item
                if header.correlation_id:
                    asked = True  # the client waits for the answer
                if self.core is None:
                    self._on_connect(header, packet)
                    continue
                if (self._run or (type(packet) is p.Send and packet.address in streams)) and (
                    self._gather(header, packet)  # a send to a stream waits in a run
                ):
                    continue
                self._act_on(header, packet)
        except RemoteProtocolError as exc:
            self._end_run()  # what came before the violation is acted on
            self._protocol_error(exc)
        self._end_run()
        if asked:
            self._asked()
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
        core = self._login.attempt(
            packet.login,
            packet.passcode,
            packet.client_id,
            lambda: self._on_connect(header, packet),
        )
        if core is None:
            return  # the password is verified off the loop; this packet is handled again
        if isinstance(core, ChuteError):
            self._respond(header, p.Error(core.code, core.reason))
            self._close_after_flush()
            return
        self.codec.version = version
        heartbeat = 0
        if packet.heartbeat_ms and self.server.config.sessions.heartbeat_ms:
            heartbeat = max(packet.heartbeat_ms, 1000)
            self.liveness.start_heartbeat(heartbeat / 1000, 3 * heartbeat / 1000)
        self._respond(header, p.Connected(version, core.id, heartbeat, self.codec.max_packet_size))

    def _on_send(self, header: p.Header, packet: p.Send) -> None:
        session = self._session(header.target_id)
        message = sent_message(packet)
        try:
            session.send(packet.address, message, ttl=packet.ttl_ms)
        except WouldBlock as exc:
            self._tell_held(header, exc)
            self._block_until_room(exc, self._retry(header, lambda: self._on_send(header, packet)))
            return
        if header.correlation_id:
            self._confirm(header, durable=message.persistent and session.tx is None)

    def _act_on(self, header: p.Header, packet: Any) -> None:
        handler = self._handlers.get(type(packet))
        if handler is None:
            raise RemoteProtocolError(
                f"a client may not send {type(packet).__name__}", "unexpected-packet"
            )
        try:
            handler(header, packet)
        except ChuteError as exc:
            self._fail(header, exc)

    def _on_send_many(self, header: p.Header, packet: p.SendMany) -> None:
        session = self._session(header.target_id)
        messages = packet.messages
        for message in messages:
            if not message.id:
                message.id = new_message_id()
                message.encoded = None
        try:
            session.send_many(packet.address, messages, ttl=packet.ttl_ms)
        except WouldBlock as exc:
            self._tell_held(header, exc)
            self._block_until_room(
                exc, self._retry(header, lambda: self._on_send_many(header, packet))
            )
            return
        if header.correlation_id:
            durable = session.tx is None and any(m.persistent for m in messages)
            self._confirm(header, durable=durable)

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

    def _tell_held(self, header: p.Header, exc: WouldBlock) -> None:
        """Tell a client that waits for this request's answer why it waits and for how
        long at most (``Held``, version 2 on): it then waits as long as the broker may
        hold the request, not only its own timeout."""
        if header.correlation_id and self.codec.version >= p.HELD_VERSION:
            self._respond(header, p.Held(exc.reason, exc.timeout_ms))

    def _retry(self, header: p.Header, again: Callable[[], None]) -> Retry:
        """Do ``again`` once there is room (or fail the request with the reason)."""

        def retry(error: ChuteError | None) -> None:
            if error is not None:
                self._fail(header, error)
                return
            try:
                again()
            except ChuteError as exc:
                self._fail(header, exc)

        return retry

    def _on_ack(self, header: p.Header, packet: p.Ack) -> None:
        consumer, session = self._consumer(header.target_id)
        if packet.seq:  # seq 0: no ack, only credit
            session.ack(consumer, packet.seq, cumulative=packet.cumulative)
        if packet.credit:
            session.add_credit(consumer, packet.credit)
        if header.correlation_id:
            self._confirm(header, durable=True)

    def _on_credit(self, header: p.Header, packet: p.Credit) -> None:
        BrokerSession.add_credit(self._consumer(header.target_id)[0], packet.credit)

    def _on_nack(self, header: p.Header, packet: p.Nack) -> None:
        consumer, session = self._consumer(header.target_id)
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
        self.consumers[packet.consumer_id] = (consumer, session)
        self._respond(header, p.Ok())

    def _on_stream_consumer_open(self, header: p.Header, packet: p.StreamConsumerOpen) -> None:
        session = self._session(header.target_id)
        if packet.consumer_id in self.consumers:
            raise ConsumerError(f"consumer id {packet.consumer_id} is already in use")
        consumer = session.consumer(
            packet.consumer_id,
            packet.address,
            self,
            prefetch=packet.prefetch,
            selector=packet.selector,
            offset=packet.offset,
        )
        self.consumers[packet.consumer_id] = (consumer, session)
        self._respond(header, p.Ok())

    def _on_consumer_close(self, header: p.Header, packet: p.ConsumerClose) -> None:
        found = self.consumers.pop(header.target_id, None)
        if found is not None:
            consumer, session = found
            session.close_consumer(consumer)
        if header.correlation_id:
            self._respond(header, p.Ok())

    def _on_session_open(self, header: p.Header, packet: p.SessionOpen) -> None:
        sid = header.callback_id or packet.session_id
        if sid in self.sessions:
            raise ConsumerError(f"session id {sid} is already in use")
        mode = _CORE_ACK_MODES[p.SessionAckMode(packet.ack_mode)]
        session = self.sessions[sid] = self._core().session(mode, transacted=packet.transacted)
        if packet.producer is not None:
            session.name_producer(packet.producer)
        if header.correlation_id:
            self._respond(header, p.Ok())

    def _on_session_close(self, header: p.Header, packet: p.SessionClose) -> None:
        session = self.sessions.pop(header.target_id, None)
        if session is not None:
            for cid in [cid for cid, (_, s) in self.consumers.items() if s is session]:
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
        self._core().commit_prepared(packet.xid)
        self._confirm(header, durable=True)

    def _on_xa_rollback(self, header: p.Header, packet: p.XaRollback) -> None:
        self._core().rollback_prepared(packet.xid)
        self._confirm(header, durable=True)

    def _on_xa_recover(self, header: p.Header, packet: p.XaRecover) -> None:
        self._respond(header, p.Ok(json.dumps(self._core().prepared())))

    def _on_xa_commit_batch(self, header: p.Header, packet: p.XaCommitBatch) -> None:
        committed = self._core().commit_batch(
            packet.sink, packet.batch, packet.xids, keep=packet.keep
        )
        value = "committed" if committed else "duplicate"
        self._after_sync(lambda error: self._confirmed(header, error, value))

    def _on_unsubscribe(self, header: p.Header, packet: p.Unsubscribe) -> None:
        self._core().unsubscribe(packet.subscription, client_id=packet.client_id)
        self._confirm(header, durable=True)

    def _on_temp_queue(self, header: p.Header, packet: p.TempQueue) -> None:
        self._respond(header, p.TempQueueCreated(self._core().temporary_queue()))

    def _on_callback_create(self, header: p.Header, packet: p.CallbackCreate) -> None:
        self._core().callback(packet.topic, packet.subscription, packet.forward_to, packet.selector)
        self._confirm(header, durable=True)

    def _on_peer_open(self, header: p.Header, packet: p.PeerOpen) -> None:
        """Another node of the cluster dialed this one: the connection becomes its link."""
        peers = self.server.peers
        if peers is None:
            raise NotFound("this broker is not a node of a cluster")
        if self.codec.version < p.PEER_VERSION or self._link is not None:
            raise RemoteProtocolError(
                "PeerOpen needs protocol version 3, once", "unexpected-packet"
            )
        peers.accept(packet.cluster, packet.node, self._core().principal.clusters_all)
        self._respond(header, p.Ok(peers.node))
        self._link = peers.up(
            packet.node, self.queue_bytes, self._close_after_flush, self._link_reading
        )

    def _link_reading(self, reading: bool) -> None:
        """The link's writes wait on the store past its bound: stop reading, or resume."""
        if reading:
            self._release(Hold.LINK_BACKLOG)
        else:
            self._hold(Hold.LINK_BACKLOG)

    def _on_peer_packet(self, header: p.Header, packet: p.Packet) -> None:
        peers = self.server.peers
        if self._link is None or peers is None:
            raise RemoteProtocolError("a node's packet before PeerOpen", "unexpected-packet")
        peers.received(self._link, packet)

    def _on_ping(self, header: p.Header, packet: p.Ping) -> None:
        self._respond(header, p.Pong())

    def _on_pong(self, header: p.Header, packet: p.Pong) -> None:
        return None

    def _on_disconnect(self, header: p.Header, packet: p.Disconnect) -> None:
        if header.correlation_id:
            self._respond(header, p.Ok())
        self._close_after_flush()

    # -- helpers ------------------------------------------------------------------------

    def _session(self, session_id: int) -> BrokerSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"session {session_id} is not open on this connection")
        return session

    def _core(self) -> BrokerConnection:
        if self.core is None:
            raise RemoteProtocolError("the first packet must be Connect", "not-connected")
        return self.core

    def _consumer(self, consumer_id: int) -> tuple[BrokerConsumer, BrokerSession]:
        found = self.consumers.get(consumer_id)
        if found is None:
            raise NotFound(f"consumer {consumer_id} is not open on this connection")
        return found

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
        self._log_protocol_error(exc.reason, exc.error_code)
        self._out.append(self._error_bytes(exc.error_code, exc.reason))
        self._close_after_flush()

    def _error_bytes(self, code: str, reason: str) -> bytes:
        return encode_packet(p.Error(code, reason), 0, 0, 0, self.codec.version)

    def _lift_login_limit(self) -> None:
        self.codec.max_packet_size = self.server.config.limits.max_packet_size

    # -- Receiver: the core pushes deliveries here ----------------------------------------

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        message = entry.message
        content = message.encoded
        if content is None:
            content = message.encoded = encode_content(message)
        data = encode_deliver(
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
        self._out.append(data)
        self.note_delivery(len(data))
        if consumer.queue.marked(consumer, entry):
            self.mark_delivery(consumer, entry)
        self._schedule_flush()

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """The broker closed ``consumer`` (its destination was deleted): forget it and tell
        the client, whose next receive on it raises ``error``."""
        found = self.consumers.get(consumer.id)
        if found is None or found[0] is not consumer:
            return
        del self.consumers[consumer.id]
        found[1].close_consumer(consumer)
        error_packet = p.Error(error.code, error.reason)
        self._out.append(encode_packet(error_packet, 0, consumer.id, 0, self.codec.version))
        self._schedule_flush()

    def _heartbeat_bytes(self) -> bytes:
        return encode_packet(p.Ping(), 0, 0, 0, self.codec.version)


def native_refusal(code: str, reason: str) -> bytes:
    """A connection refused before a word (a connection limit): a connection-level Error,
    which a client reads as the answer to its Connect."""
    return encode_packet(p.Error(code, reason), 0, 0, 0, p.PROTOCOL_VERSION)
