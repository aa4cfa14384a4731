"""The client side of the native protocol as a pure state machine (no sockets, no threads).

Theory of operation
-------------------
:class:`ClientProtocol` holds every piece of client state: the codec, the
output buffer, the requests waiting for a response (by correlation id), the
open sessions and consumers (ids allocated from one counter, so a target id
is never ambiguous), each consumer's buffer of deliveries and its credit, and
the errors to raise later. The two drivers (:mod:`chute.client.blocking`,
:mod:`chute.client.aio`) only move bytes and wait:

* every operation appends packets to the output buffer; the driver sends
  :meth:`~ClientProtocol.data_to_send` when it likes, so many one-way sends
  cost one write;
* an operation that needs an answer returns a correlation id; the driver waits
  until :meth:`~ClientProtocol.result` has it (``receive_data`` reports which
  requests completed and which consumers got something);
* one-way failures (a ``Send`` the broker refused) come back as an ``Error``
  targeted at the session and are raised by the next call on that session; a
  connection-level ``Error`` or the loss of the connection fails everything
  with :class:`~chute.errors.ConnectError`.

Credit: a consumer opens with ``prefetch`` credits. As the application takes
messages, the credit to return accumulates; it goes back with the next ack
(one ``Ack`` packet acks and refills the window), or on its own once half the
window is used, or before the application blocks waiting for more. In ``auto``
mode (and in transacted sessions) that same packet is a cumulative ack of the
messages taken so far.

Not thread-safe: a driver serialises calls (the blocking driver with a lock).
"""

from __future__ import annotations

import itertools
import json
import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from chute.client.received import Acknowledger, Received
from chute.content import encode_fields
from chute.core.address import canonical
from chute.errors import (
    ChuteError,
    ConnectError,
    ConsumerError,
    InvalidMessage,
    LocalProtocolError,
    RemoteProtocolError,
    TransactionError,
    error_for_code,
)
from chute.message import (
    DEFAULT_PRIORITY,
    BodyKind,
    Message,
    check_id,
    check_priority,
    check_properties,
    new_message_id,
)
from chute.protocol.codec import PacketCodec
from chute.protocol.packets import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Ack,
    AckMode,
    Browse,
    BrowseResult,
    CallbackCreate,
    Commit,
    Connect,
    Connected,
    ConsumerClose,
    ConsumerOpen,
    Credit,
    CursorAck,
    CursorBatch,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    Disconnect,
    Error,
    Header,
    Nack,
    Ok,
    Packet,
    Ping,
    Pong,
    Rollback,
    SessionClose,
    SessionOpen,
    Stat,
    StatResult,
    TempQueue,
    TempQueueCreated,
    Unsubscribe,
    XaCommit,
    XaCommitBatch,
    XaPrepare,
    XaRecover,
    XaRollback,
)
from chute.protocol.splice import PlainSend, encode_send, plain_send_encoder
from chute.protocol.wire import encode_packet

_ADDRESS_CACHE_SIZE: Final = 1024
_next_id: Final = new_message_id.next_bytes


@dataclass(slots=True)
class Progress:
    """What one :meth:`ClientProtocol.receive_data` call changed, for the driver to wake."""

    completed: list[int] = field(default_factory=list)
    """Correlation ids whose result is now available."""
    consumers: set[int] = field(default_factory=set)
    """Consumers that got a delivery or an error."""
    failed: bool = False
    """The connection failed: wake everybody."""


@dataclass(slots=True)
class SessionState:
    id: int
    ack_mode: AckMode
    transacted: bool
    consumers: set[int] = field(default_factory=set)
    error: ChuteError | None = None
    closed: bool = False


class _DirectAcks:
    """The acknowledger of a consumer no driver has bound: acks go straight to the protocol."""

    __slots__ = ("consumer_id", "proto")

    def __init__(self, proto: ClientProtocol, consumer_id: int) -> None:
        self.proto = proto
        self.consumer_id = consumer_id

    def _ack(self, seq: int) -> None:
        self.proto.ack(self.consumer_id, seq)

    def _nack(self, seq: int, requeue: bool) -> None:
        self.proto.nack(self.consumer_id, seq, requeue)


@dataclass(slots=True)
class ConsumerState:
    id: int
    session: SessionState
    prefetch: int
    owner: Acknowledger
    """What the consumer's messages ack through (the driver's consumer)."""
    buffer: deque[Received] = field(default_factory=deque)
    pending_credit: int = 0
    """Messages taken since credit was last returned."""
    last_taken: int = -1
    """seq of the last message taken (auto mode acks up to it)."""
    acked: int = -1
    """seq up to which auto mode has acked."""
    error: ChuteError | None = None
    closed: bool = False
    batch: int = field(init=False)
    """Credit is returned once this many messages are taken (half the window)."""
    acks_by_taking: bool = field(init=False)
    """Taking a message acks it (auto mode, transacted sessions)."""

    def __post_init__(self) -> None:
        self.batch = max(1, self.prefetch // 2)
        self.acks_by_taking = self.session.ack_mode is AckMode.AUTO or self.session.transacted


def _expect(packet: Packet, cls: type[Any]) -> Any:
    if not isinstance(packet, cls):
        raise LocalProtocolError(
            f"broker answered {type(packet).__name__} where {cls.__name__} was expected"
        )
    return packet


class ClientProtocol:
    """All client state of one connection; see the module docstring. Not thread-safe."""

    def __init__(self, *, max_packet_size: int = 16 << 20) -> None:
        self.codec = PacketCodec(max_packet_size=max_packet_size)
        self._out: list[bytes] = []
        self.outbox_size = 0
        """Bytes waiting in the output buffer."""
        self._correlation = itertools.count(1)
        self._ids = itertools.count(1)
        self._pending: set[int] = set()
        self._results: dict[int, Packet | ChuteError] = {}
        self._sessions: dict[int, SessionState] = {}
        self._consumers: dict[int, ConsumerState] = {}
        self._addresses: dict[str, tuple[bytes, PlainSend]] = {}
        self.failure: ChuteError | None = None
        """Set once the connection failed; every later call raises it."""
        self.connected: Connected | None = None
        self._connect_corr = 0

    # -- output ---------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Everything queued for the broker (and empty the queue)."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.outbox_size = 0
        return data

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self.outbox_size += len(data)

    def _oneway(self, packet: Packet) -> None:
        self._write(encode_packet(packet, version=self.codec.version))

    def _request(self, packet: Packet) -> int:
        self._check()
        corr = next(self._correlation) & 0xFFFF_FFFF or next(self._correlation)
        self._write(encode_packet(packet, corr, version=self.codec.version))
        self._pending.add(corr)
        return corr

    # -- results --------------------------------------------------------------------

    def result(self, corr: int) -> Packet | None:
        """The response to request ``corr``, or None while it has not arrived.

        Raises:
            ChuteError: the broker answered with an error (rebuilt by its code).
            ConnectError: the connection failed before the answer came.
        """
        result = self._results.pop(corr, None)
        if result is None:
            if self.failure is not None:
                self._pending.discard(corr)
                raise self.failure
            return None
        if isinstance(result, ChuteError):
            raise result
        return result

    def forget(self, corr: int) -> None:
        """Stop waiting for ``corr`` (timed out): a late answer is dropped."""
        self._pending.discard(corr)
        self._results.pop(corr, None)

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def check_session(self, session_id: int) -> SessionState:
        """The session, after raising any error deferred to it.

        Raises:
            ConnectError: the connection failed.
            ChuteError: a one-way send of this session failed earlier.
        """
        self._check()
        session = self._sessions.get(session_id)
        if session is None or session.closed:
            raise ConsumerError(f"session {session_id} is closed")
        if session.error is not None:
            error, session.error = session.error, None
            raise error
        return session

    # -- connection -----------------------------------------------------------------

    def connect(
        self,
        client_id: str | None = None,
        login: str | None = None,
        passcode: str | None = None,
        heartbeat_ms: int = 0,
    ) -> int:
        """Queue CONNECT; returns its correlation id (finish with :meth:`finish_connect`)."""
        self._connect_corr = self._request(
            Connect(
                MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, client_id, login, passcode, heartbeat_ms
            )
        )
        return self._connect_corr

    def finish_connect(self, packet: Packet) -> Connected:
        connected: Connected = _expect(packet, Connected)
        if connected.version not in SUPPORTED_VERSIONS:
            self.fail(
                ConnectError(f"broker chose unsupported protocol version {connected.version}")
            )
            self._check()
        self.codec.version = connected.version
        self.connected = connected
        return connected

    def disconnect(self) -> int:
        """Return the credit and acks still owed, then queue DISCONNECT (a request)."""
        for consumer in list(self._consumers.values()):
            self._return_credit(consumer)
        return self._request(Disconnect())

    def ping(self) -> None:
        self._oneway(Ping())

    def fail(self, error: ChuteError) -> Progress:
        """The connection is gone: fail every waiter and every later call with ``error``."""
        progress = Progress(failed=True)
        if self.failure is None:
            self.failure = error
        progress.completed.extend(self._pending)
        self._pending.clear()
        progress.consumers.update(self._consumers)
        return progress

    def connection_lost(self, exc: BaseException | None = None) -> Progress:
        if self.failure is not None:
            return self.fail(self.failure)
        reason = f": {exc}" if exc is not None else ""
        return self.fail(ConnectError(f"connection to the broker lost{reason}"))

    # -- sessions -------------------------------------------------------------------

    def open_session(self, ack_mode: str = "auto", transacted: bool = False) -> int:
        """Queue SESSION_OPEN (one-way: the client chooses the id). Returns the session id.

        Raises:
            ValueError: unknown ack mode.
        """
        self._check()
        mode = AckMode(ack_mode)
        session_id = next(self._ids)
        self._sessions[session_id] = SessionState(session_id, mode, bool(transacted))
        self._oneway(SessionOpen(session_id, mode, bool(transacted)))
        return session_id

    def close_session(self, session_id: int) -> int | None:
        """Close the session's consumers and queue SESSION_CLOSE (a request); None if closed."""
        session = self._sessions.get(session_id)
        if session is None or session.closed or self.failure is not None:
            self._sessions.pop(session_id, None)
            return None
        for consumer_id in list(session.consumers):
            self._drop_consumer(consumer_id)
        session.closed = True
        corr = self._request(SessionClose(session_id))
        del self._sessions[session_id]
        return corr

    def send(  # noqa: PLR0917 - drivers call it positionally (hot path)
        self,
        session_id: int,
        address: str,
        body: bytes | str,
        priority: int = DEFAULT_PRIORITY,
        ttl: int = 0,
        properties: Mapping[str, Any] | None = None,
        persistent: bool = True,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
        id: str | None = None,
        kind: BodyKind | None = None,
    ) -> int:
        """Queue a SEND. Returns the correlation id to wait for, or 0 for a one-way send.

        Persistent sends outside a transaction are requests (the broker answers once
        the message is on disk); the rest are one-way and pipelined. The arguments
        after ``body`` may be given by keyword; the drivers pass them positionally,
        which is cheaper, in this order.

        Raises:
            InvalidAddress, InvalidMessage: bad address or message field.
            ChuteError: an error deferred to this session (a failed earlier send).
        """
        session = self._sessions.get(session_id)
        if session is None or session.error is not None or self.failure is not None:
            session = self.check_session(session_id)  # raises
        cached = self._addresses.get(address)
        if cached is None:
            cached = self._address(address)
        address_bytes, encode_plain = cached
        if (
            body.__class__ is bytes
            and id is None
            and kind is None
            and not properties
            and correlation_id is None
            and reply_to is None
            and type is None
            and priority.__class__ is int
            and 0 <= priority <= 9
        ):
            # The common message: its whole packet in one pack (no Message, no join).
            if ttl < 0:
                raise ValueError("ttl must not be negative")
            corr = self._correlate(persistent and not session.transacted)
            try:
                packet = encode_plain(
                    body,
                    self.codec.version,
                    corr,
                    session_id,
                    ttl,
                    priority,
                    persistent,
                    _next_id(),
                )
            except struct.error as exc:  # ttl or session id out of range
                self._pending.discard(corr)
                raise InvalidMessage(f"message cannot be encoded: {exc}") from None
            self._out.append(packet)
            self.outbox_size += len(packet)
            return corr
        return self._send_general(
            session,
            address_bytes,
            body,
            priority,
            ttl,
            properties,
            persistent,
            correlation_id,
            reply_to,
            type,
            id,
            kind,
        )

    def _send_general(  # noqa: PLR0917 - internal, called once, positionally
        self,
        session: SessionState,
        address_bytes: bytes,
        body: bytes | str,
        priority: int,
        ttl: int,
        properties: Mapping[str, Any] | None,
        persistent: bool,
        correlation_id: str | None,
        reply_to: str | None,
        type: str | None,
        id: str | None,
        kind: BodyKind | None,
    ) -> int:
        data: bytes
        if body.__class__ is bytes:
            data = body
            kind = kind or BodyKind.BYTES
        elif isinstance(body, str):
            data = body.encode()
            kind = kind or BodyKind.TEXT
        elif isinstance(body, bytearray | memoryview):
            data = bytes(body)
            kind = kind or BodyKind.BYTES
        else:
            raise InvalidMessage(f"body must be bytes or str, not {body.__class__.__name__}")
        if priority.__class__ is not int or not 0 <= priority <= 9:
            check_priority(priority)
        try:
            content = encode_fields(
                data,
                new_message_id() if id is None else check_id(id),
                priority,
                persistent,
                kind,
                correlation_id,
                reply_to,
                type,
                check_properties(properties) if properties else None,
            )
        except LocalProtocolError as exc:
            raise InvalidMessage(exc.reason) from exc
        if ttl < 0:
            raise ValueError("ttl must not be negative")
        corr = self._correlate(persistent and not session.transacted)
        try:
            packet = encode_send(session.id, address_bytes, content, ttl, corr, self.codec.version)
        except struct.error as exc:
            self._pending.discard(corr)
            raise InvalidMessage(f"message cannot be encoded: {exc}") from None
        self._out.append(packet)
        self.outbox_size += len(packet)
        return corr

    def _correlate(self, request: bool) -> int:
        """A correlation id to wait for (0 for a one-way packet)."""
        if not request:
            return 0
        corr = next(self._correlation) & 0xFFFF_FFFF or next(self._correlation)
        self._pending.add(corr)
        return corr

    def _address(self, address: str) -> tuple[bytes, PlainSend]:
        encoded = canonical(address).encode()
        if len(self._addresses) >= _ADDRESS_CACHE_SIZE:
            self._addresses.clear()
        cached = self._addresses[address] = (encoded, plain_send_encoder(encoded))
        return cached

    def commit(self, session_id: int) -> int:
        return self._transaction(session_id, Commit(session_id))

    def rollback(self, session_id: int) -> int:
        return self._transaction(session_id, Rollback(session_id))

    def prepare(self, session_id: int, xid: str) -> int:
        return self._transaction(session_id, XaPrepare(session_id, xid))

    def commit_prepared(self, xid: str) -> int:
        return self._request(XaCommit(xid))

    def rollback_prepared(self, xid: str) -> int:
        return self._request(XaRollback(xid))

    def prepared(self) -> int:
        return self._request(XaRecover())

    def commit_batch(self, sink: str, batch: int, xids: tuple[str, ...], keep: bool) -> int:
        return self._request(XaCommitBatch(sink, batch, tuple(xids), keep))

    @staticmethod
    def commit_batch_result(packet: Packet) -> bool:
        """True if the batch was committed now, False if it had been before (a duplicate)."""
        result: Ok = _expect(packet, Ok)
        return result.value != "duplicate"

    # -- cursors (docs/spark.md) -----------------------------------------------------

    def cursor_open(
        self, address: str, cursor: str | None, selector: str | None, lease_ms: int
    ) -> int:
        return self._request(CursorOpen(canonical(address), cursor, selector, lease_ms))

    @staticmethod
    def cursor_info(packet: Packet) -> tuple[int, int]:
        info: CursorInfo = _expect(packet, CursorInfo)
        return info.earliest, info.head

    def cursor_fetch(  # noqa: PLR0917 - mirrors the packet
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        max_messages: int,
        max_bytes: int,
    ) -> int:
        return self._request(
            CursorFetch(canonical(address), cursor, start, end, max_messages, max_bytes)
        )

    @staticmethod
    def cursor_batch(packet: Packet) -> tuple[int, tuple[tuple[int, Message], ...]]:
        batch: CursorBatch = _expect(packet, CursorBatch)
        return batch.next, batch.messages

    def cursor_ack(self, address: str, cursor: str, end: int) -> int:
        return self._request(CursorAck(canonical(address), cursor, end))

    def cursor_close(self, address: str, cursor: str, delete: bool) -> int:
        return self._request(CursorClose(canonical(address), cursor, delete))

    @staticmethod
    def prepared_result(packet: Packet) -> list[str]:
        result: Ok = _expect(packet, Ok)
        xids: list[str] = json.loads(result.value or "[]")
        return xids

    def _transaction(self, session_id: int, packet: Commit | Rollback | XaPrepare) -> int:
        session = self.check_session(session_id)
        if not session.transacted:
            raise TransactionError(f"session {session_id} is not transacted")
        for consumer_id in session.consumers:
            self._return_credit(self._consumers[consumer_id])
        return self._request(packet)

    # -- consumers ------------------------------------------------------------------

    def open_consumer(
        self,
        session_id: int,
        address: str,
        *,
        selector: str | None = None,
        prefetch: int = 100,
        exclusive: bool = False,
        subscription: str | None = None,
        durable: bool = False,
        shared: bool = False,
    ) -> tuple[int, int]:
        """Queue CONSUMER_OPEN (a request). Returns ``(consumer id, correlation id)``.

        Raises:
            ValueError: prefetch below 1; durable without a subscription name.
        """
        session = self.check_session(session_id)
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if durable and not subscription:
            raise ValueError("a durable subscription needs a name (subscription=...)")
        consumer_id = next(self._ids)
        corr = self._request(
            ConsumerOpen(
                session_id,
                consumer_id,
                canonical(address),
                selector,
                prefetch,
                exclusive,
                subscription,
                durable,
                shared,
            )
        )
        self._consumers[consumer_id] = ConsumerState(
            consumer_id, session, prefetch, _DirectAcks(self, consumer_id)
        )
        session.consumers.add(consumer_id)
        return consumer_id, corr

    def close_consumer(self, consumer_id: int) -> int | None:
        """Return owed credit/acks, queue CONSUMER_CLOSE (a request); None if already closed.

        Messages still in the buffer were never handed out: the broker redelivers them.
        """
        if consumer_id not in self._consumers or self.failure is not None:
            self._drop_consumer(consumer_id)
            return None
        self._drop_consumer(consumer_id)
        return self._request(ConsumerClose(consumer_id))

    def _drop_consumer(self, consumer_id: int) -> None:
        consumer = self._consumers.pop(consumer_id, None)
        if consumer is None:
            return
        if self.failure is None:
            self._return_credit(consumer)
        consumer.closed = True
        consumer.buffer.clear()
        consumer.session.consumers.discard(consumer_id)

    def session_consumers(self, session_id: int) -> list[int]:
        """Ids of the session's open consumers (to wake their waiters on close)."""
        session = self._sessions.get(session_id)
        return list(session.consumers) if session is not None else []

    def consumer(self, consumer_id: int) -> ConsumerState | None:
        return self._consumers.get(consumer_id)

    def bind(self, consumer_id: int, owner: Acknowledger) -> None:
        """Make ``owner`` (the driver's consumer) what the consumer's messages ack through.

        Until then they ack straight through this protocol.
        """
        consumer = self._consumers.get(consumer_id)
        if consumer is not None:
            consumer.owner = owner

    def take(self, consumer_id: int) -> Received | None:
        """The next message of the consumer, or None if its buffer is empty.

        Raises:
            ConnectError: the connection failed.
            ChuteError: an error the broker reported for this consumer.
            ConsumerError: the consumer is closed.
        """
        consumer = self._consumers.get(consumer_id)
        if consumer is None or self.failure is not None:
            self._check()
            raise ConsumerError(f"consumer {consumer_id} is closed")
        if consumer.error is not None:
            error, consumer.error = consumer.error, None
            raise error
        if not consumer.buffer:
            return None
        received = consumer.buffer.popleft()
        consumer.last_taken = received.seq
        consumer.pending_credit += 1
        if consumer.pending_credit >= consumer.batch:
            self._return_credit(consumer)
        return received

    def before_wait(self, consumer_id: int) -> None:
        """The application is about to block on an empty buffer: give back all credit."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None and not consumer.buffer:
            self._return_credit(consumer)

    def _return_credit(self, consumer: ConsumerState) -> None:
        credit = consumer.pending_credit
        if consumer.acks_by_taking:
            if consumer.last_taken > consumer.acked:
                consumer.acked = consumer.last_taken
                consumer.pending_credit = 0
                self._oneway(Ack(consumer.id, consumer.last_taken, True, credit))
        elif credit:
            consumer.pending_credit = 0
            self._oneway(Credit(consumer.id, credit))

    def ack(self, consumer_id: int, seq: int) -> None:
        """Ack delivery ``seq``: cumulative in ``client`` mode, just it in ``individual``
        mode; a no-op in ``auto`` mode and in transacted sessions (taking or commit acks).

        Raises:
            ConnectError: the connection failed.
            ConsumerError: the consumer is closed.
        """
        self._check()
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise ConsumerError(f"cannot ack: consumer {consumer_id} is closed")
        if consumer.acks_by_taking:
            return
        credit, consumer.pending_credit = consumer.pending_credit, 0
        cumulative = consumer.session.ack_mode is AckMode.CLIENT
        self._oneway(Ack(consumer_id, seq, cumulative, credit))

    def nack(self, consumer_id: int, seq: int, requeue: bool = True) -> None:
        """Refuse delivery ``seq``: requeue it, or reject it to the dead-letter queue.

        Raises:
            ConnectError: the connection failed.
            ConsumerError: the consumer is closed.
        """
        self._check()
        if consumer_id not in self._consumers:
            raise ConsumerError(f"cannot nack: consumer {consumer_id} is closed")
        self._oneway(Nack(consumer_id, seq, requeue))

    # -- management -----------------------------------------------------------------

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> int:
        return self._request(Browse(canonical(address), selector, limit))

    @staticmethod
    def browse_result(packet: Packet) -> list[Message]:
        result: BrowseResult = _expect(packet, BrowseResult)
        return [message for _seq, message in result.messages]

    def stat(self) -> int:
        return self._request(Stat())

    @staticmethod
    def stat_result(packet: Packet) -> str:
        result: StatResult = _expect(packet, StatResult)
        return result.json_text

    def temporary_queue(self) -> int:
        return self._request(TempQueue())

    @staticmethod
    def temporary_queue_result(packet: Packet) -> str:
        result: TempQueueCreated = _expect(packet, TempQueueCreated)
        return result.address

    def unsubscribe(self, subscription: str, client_id: str | None = None) -> int:
        return self._request(Unsubscribe(subscription, client_id))

    def callback(
        self, topic: str, subscription: str, forward_to: str, selector: str | None = None
    ) -> int:
        return self._request(
            CallbackCreate(canonical(topic), subscription, canonical(forward_to), selector)
        )

    # -- input ----------------------------------------------------------------------

    def receive_data(self, data: bytes) -> Progress:
        """Feed bytes from the broker (``b""`` = closed); returns whom to wake."""
        progress = Progress()
        if self.failure is not None:
            return progress
        self.codec.receive_data(data)
        consumers = self._consumers
        woken = progress.consumers

        def deliver(consumer_id: int, seq: int, message: Message) -> None:
            consumer = consumers.get(consumer_id)
            if consumer is not None:  # else closed meanwhile: the broker redelivers
                consumer.buffer.append(Received(message, seq, consumer.owner))
                woken.add(consumer_id)

        try:
            items = self.codec.next_packets(deliver)
        except RemoteProtocolError as exc:
            self._oneway(Error(exc.error_code, exc.reason))
            return self.fail(
                ConnectError(f"the broker broke the protocol ({exc.error_code}): {exc.reason}")
            )
        for header, packet in items:
            self._handle(header, packet, progress)
            if progress.failed:
                return progress
        if not data:
            _absorb(progress, self.connection_lost())
        return progress

    def _handle(self, header: Header, packet: Packet, progress: Progress) -> None:
        corr = header.correlation_id
        if isinstance(packet, Ping):
            self._write(encode_packet(Pong(), corr, version=self.codec.version))
            return
        if isinstance(packet, Pong):
            return
        if isinstance(packet, Disconnect):
            _absorb(progress, self.fail(ConnectError("the broker closed the connection")))
            return
        if isinstance(packet, Error):
            self._handle_error(header, packet, progress)
            return
        if corr in self._pending:
            self._pending.discard(corr)
            self._results[corr] = packet
            progress.completed.append(corr)
        # An answer nobody waits for (a timed-out request): dropped.

    def _handle_error(self, header: Header, packet: Error, progress: Progress) -> None:
        corr = header.correlation_id
        error = error_for_code(packet.code, packet.reason)
        if corr:
            if corr in self._pending:
                self._pending.discard(corr)
                if corr == self._connect_corr and type(error) is ChuteError:
                    error = _connect_error(packet)  # refused for a reason of its own
                self._results[corr] = error
                progress.completed.append(corr)
            return
        target = header.target_id
        session = self._sessions.get(target)
        if session is not None:
            session.error = error
            progress.consumers.update(session.consumers)
            return
        consumer = self._consumers.get(target)
        if consumer is not None:
            consumer.error = error
            progress.consumers.add(target)
            return
        if target == 0:
            _absorb(progress, self.fail(_connect_error(packet)))


def _absorb(progress: Progress, other: Progress) -> None:
    progress.completed.extend(other.completed)
    progress.consumers.update(other.consumers)
    progress.failed = progress.failed or other.failed


def _connect_error(packet: Error) -> ConnectError:
    return ConnectError(f"{packet.reason} ({packet.code})")
