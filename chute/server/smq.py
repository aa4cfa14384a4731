"""Simple-message-queue's source and sink listeners: thin drivers over :mod:`chute.smq`.

Both are bound to one chute queue (``[smq] queue``) and run on the broker's
loop beside the native and STOMP listeners (``docs/smq.md``).

Source (:class:`SmqSource`): each message is sent to the queue as a
persistent message (its 16-byte id as 32 hex characters, or a generated id)
and answered ``'Y'`` only once the journal's fsync covers it, the same
barrier a native persistent send waits for. A message the queue refuses
(``overflow = reject``, a failing disk) gets no ``'Y'``: the connection closes
after the ``'Y'`` of every earlier message, and the source's writer reports
the failure. Under ``overflow = block`` the source waits for room.

Sink (:class:`SmqSink`): an exclusive consumer with a window of one message,
so one sink at a time receives and a second one waits, connected, until the
first leaves. Before a message is written to the sink, the store's delivery
mark for it is synced: after a crash, any message a sink may have seen comes
back as a possible replay (``'R'``), as Simple-message-queue promises. ``'Y'`` acks it;
any other byte or a closed connection ends the session and the message goes
back, marked redelivered, for the next sink.

Bad input (an unknown frame type, an oversized or negative length, a stream
cut mid-frame) is logged and closes that connection only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.access import peer_host
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError, RemoteProtocolError
from chute.message import Message, new_message_id
from chute.server.host import Retry, ServerHost
from chute.server.stream import Hold, StreamConnection
from chute.smq import (
    CLOSED,
    NEED_DATA,
    Ack,
    Deliver,
    EndOfSession,
    Publish,
    SinkCodec,
    SmqSettings,
    SourceCodec,
    to_message_id,
    to_wire_id,
)

log = logging.getLogger("chute.smq")


def listeners(
    server: ServerHost, settings: SmqSettings
) -> list[tuple[str, int, Callable[[], asyncio.Protocol]]]:
    """The source and sink listeners the settings ask for: (name, port, protocol factory)."""
    queue = settings.queue
    kinds: list[tuple[str, int, type[SmqSource | SmqSink]]] = [
        ("smq-source", settings.source_port, SmqSource),
        ("smq-sink", settings.sink_port, SmqSink),
    ]
    return [
        (name, port, functools.partial(kind, server, queue)) for name, port, kind in kinds if port
    ]


class _SmqConnection(StreamConnection):
    """What a source and a sink share: a core connection and a closing rule."""

    codec: SourceCodec | SinkCodec

    def __init__(self, server: ServerHost, address: str) -> None:
        super().__init__(server)
        self.address = address
        self.session: BrokerSession | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        settings = self.server.config.smq or SmqSettings()
        host = peer_host(self.peer)
        if not settings.allows(host):
            log.warning(
                "%s connection from %s refused: not in smq.allowed_clients",
                self.protocol_name,
                self.peer,
            )
            self._holds |= Hold.CLOSING
            self.transport = None
            transport.close()
            return
        # The protocol has no login: each listener acts as the configured user.
        principal = self.broker.access.as_user(settings.user)
        self.core = BrokerConnection(
            self.broker, principal, protocol=self.protocol_name, peer=self.peer
        )
        self.core.on_closed_by_broker = self.closed_by_broker  # no error to say: it closes
        self.session = self.core.session(AckMode.INDIVIDUAL)
        self._past_login()  # no login to wait for; server.idle_timeout_ms applies
        log.info("%s %s connected from %s", self.protocol_name, self.core.id, self.peer)

    def eof_received(self) -> bool | None:
        self._feed(b"")
        return None

    def data_received(self, data: bytes) -> None:
        self.liveness.last_read = time.monotonic()
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        raise NotImplementedError

    def _buffered(self) -> int:
        return self.codec.buffered

    def _protocol_error(self, exc: RemoteProtocolError) -> None:
        log.warning(
            "%s protocol error from %s: %s (%s); closing",
            self.protocol_name,
            self.peer,
            exc.reason,
            exc.error_code,
        )


class SmqSource(_SmqConnection):
    """One Simple-message-queue source. Lives on the server's event loop only."""

    codec: SourceCodec

    protocol_name = "smq source"

    def __init__(self, server: ServerHost, address: str) -> None:
        super().__init__(server, address)
        self.codec = SourceCodec(max_body_size=server.config.limits.max_packet_size)
        self._unanswered = 0  # sent to the queue, waiting for the sync before 'Y'
        self._ending = False  # close once every earlier message is answered
        self._failed = False  # a message was not stored: no later one may be answered

    def eof_received(self) -> bool | None:
        super().eof_received()
        return True  # keep our side open for the answers still owed; _end closes it

    def _feed(self, data: bytes) -> None:
        if self.closing:
            return
        self.codec.receive_data(data)
        self._act()

    def _process(self) -> None:
        turn = self._turn()
        try:
            while self._may_act(turn):
                event = self.codec.next_event()
                if event is NEED_DATA:
                    break
                if event is CLOSED or isinstance(event, EndOfSession):
                    log.debug("smq source %s closes", self.peer)
                    self._end()
                    break
                assert isinstance(event, Publish)  # noqa: S101 - for mypy
                self._asked()  # its 'Y' is awaited
                self._publish(event.body, to_message_id(event.id) if event.id else None)
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
            self._end()
        self.flush()

    def _publish(self, body: bytes, message_id: str | None) -> None:
        message = Message(body, id=message_id or new_message_id(), persistent=True)
        try:
            if self.session is None:
                raise ChuteError("the source's session is not open")
            self.session.send(self.address, message)
        except WouldBlock as exc:
            self._block_until_room(exc, self._retry(body, message.id))
            return
        except ChuteError as exc:
            log.warning(
                "smq source %s: message %s refused: %s; closing without 'Y'",
                self.peer,
                message.id,
                exc.reason,
            )
            self._end()
            return
        self._unanswered += 1
        self._after_sync(self._stored)

    def _retry(self, body: bytes, message_id: str) -> Retry:
        def retry(error: ChuteError | None) -> None:
            if error is None:
                self._publish(body, message_id)
                return
            log.warning("smq source %s: %s; closing without 'Y'", self.peer, error.reason)
            self._end()

        return retry

    def _stored(self, error: BaseException | None) -> None:
        self._unanswered -= 1
        if self._failed:
            pass  # a 'Y' now would answer the message that failed
        elif error is None:
            self.queue_bytes(self.codec.stored())
        else:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            log.error("smq source %s: message not stored: %s; closing", self.peer, reason)
            self._failed = True
            self._end()
            return
        if self._ending and not self._unanswered:
            self._close_after_flush()

    def _end(self) -> None:
        """Read no more; close once every message already sent is answered."""
        self._holds |= Hold.CLOSING
        self._ending = True
        if not self._unanswered:
            self._close_after_flush()


class SmqSink(_SmqConnection):
    """One Simple-message-queue sink: an exclusive consumer with a window of one message.

    It is the consumer's receiver. Lives on the server's event loop only.
    """

    codec: SinkCodec

    protocol_name = "smq sink"

    def __init__(self, server: ServerHost, address: str) -> None:
        super().__init__(server, address)
        self.codec = SinkCodec()
        self.consumer: BrokerConsumer | None = None
        self._entry: Entry | None = None  # pushed to us, not yet acked

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.session is None:  # refused: not an allowed client
            return
        queue = self.broker.destination(self.address)
        waiting = isinstance(queue, QueueChannel) and any(
            c.exclusive for c in queue.router.consumers
        )
        try:
            self.consumer = self.session.consumer(1, self.address, self, prefetch=1, exclusive=True)
        except ChuteError as exc:
            log.error("smq sink %s: cannot consume %s: %s", self.peer, self.address, exc.reason)
            self._close_after_flush()
            return
        if waiting:
            log.info("smq sink %s waits: another sink is connected to %s", self.peer, self.address)

    # -- the core pushes -------------------------------------------------------------

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        """Write ``entry`` once its delivery mark is durable (a crash then makes it 'R')."""
        self._entry = entry
        self._after_sync(lambda error: self._write_delivery(entry, error))

    def _write_delivery(self, entry: Entry, error: BaseException | None) -> None:
        if self._entry is not entry or self.closing:
            return
        if error is not None:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            log.error("smq sink %s: delivery mark not stored: %s; closing", self.peer, reason)
            self._close_after_flush()  # the message goes back
            return
        message = entry.message
        replay = entry.redelivered or entry.delivery_count > 1
        data = self.codec.send(Deliver(to_wire_id(message.id), message.body, replay))
        self.queue_bytes(data)
        self.note_delivery(len(data))

    # -- the sink answers --------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self.closing:
            return
        self.codec.receive_data(data)
        self._act()

    def _process(self) -> None:
        turn = self._turn()
        try:
            while self._may_act(turn):
                event = self.codec.next_event()
                if event is NEED_DATA or event is CLOSED:
                    break
                if isinstance(event, Ack):
                    self._acked()
                    continue
                log.info(
                    "smq sink %s answered %r, not 'Y': the session ends, its message goes back",
                    self.peer,
                    bytes([event.answer]),
                )
                self._close_after_flush()
        except RemoteProtocolError as exc:
            self._protocol_error(exc)
            self._close_after_flush()
        self.flush()

    def _acked(self) -> None:
        entry, self._entry = self._entry, None
        consumer, session = self.consumer, self.session
        if entry is None or consumer is None or session is None:
            return  # the codec only yields an Ack for a written delivery
        session.ack(consumer, entry.seq)
        BrokerSession.add_credit(consumer, 1)
