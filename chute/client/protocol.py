"""The client side of the native protocol as a pure state machine (no sockets, no threads).

Theory of operation
-------------------
:class:`ClientProtocol` is the state of one connection, made of three parts
it owns: the codec and output buffer, the requests awaiting an answer
(:class:`~chute.client.correlation.Correlator`), and the sessions and
consumers with their buffers and credit (:class:`~chute.client.sessions.Sessions`,
public as :attr:`ClientProtocol.sessions` for the consumer hot paths). The
two drivers (:mod:`chute.client.link` for threads, :mod:`chute.client.aio_link`
for asyncio) only move bytes and wait:

* every operation appends packets to the output buffer; the driver sends
  :meth:`~ClientProtocol.data_to_send` when it likes, so many one-way sends
  cost one write;
* an operation that needs an answer returns a correlation id; the driver waits
  until :meth:`~ClientProtocol.result` has it (``receive_data`` reports which
  requests completed and which consumers got something). A request that
  changes no client state is a :class:`~chute.client.requests.Request`, a
  packet with its answer's parser: :meth:`~ClientProtocol.start` queues it;
* one-way failures (a ``Send`` the broker refused) come back as an ``Error``
  targeted at the session and are raised by the next call on that session; a
  connection-level ``Error`` or the loss of the connection fails everything
  with :class:`~chute.errors.ConnectError`.

The output buffer, the requests opened and the send paths are its base,
:class:`~chute.client.output.Output`; this module adds the connection, sessions,
transactions, consumers and what comes in.

Not thread-safe: a driver serialises calls (the blocking driver with a lock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from chute.client.output import Output
from chute.client.received import Acknowledger
from chute.client.requests import Request, expect, unsupported
from chute.client.sessions import ConsumerOptions, Sessions
from chute.core.model.address import canonical
from chute.errors import (
    ChuteError,
    ConnectError,
    RemoteProtocolError,
    TransactionError,
    WrongProtocol,
    error_for_code,
)
from chute.protocol.codec import PacketCodec
from chute.protocol.packets import (
    MIN_PROTOCOL_VERSION,
    PRODUCER_VERSION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Commit,
    Connect,
    Connected,
    ConsumerClose,
    ConsumerOpen,
    Disconnect,
    Error,
    Header,
    Held,
    Packet,
    Ping,
    Pong,
    Rollback,
    SessionAckMode,
    SessionClose,
    SessionOpen,
    StreamConsumerOpen,
    XaPrepare,
)
from chute.protocol.wire import encode_packet

_CONSUMER_DEFAULTS: Final = ConsumerOptions()
"""``consumer``'s defaults: prefetch 100, no selector, not exclusive."""


@dataclass(slots=True)
class Progress:
    """What one :meth:`ClientProtocol.receive_data` call changed, for the driver to wake."""

    completed: list[int] = field(default_factory=list)
    """Correlation ids whose result is now available."""
    consumers: set[int] = field(default_factory=set)
    """Consumers that got a delivery or an error."""
    held: list[int] = field(default_factory=list)
    """Correlation ids the broker said it holds (:meth:`ClientProtocol.held`): their
    waiters wait longer."""
    failed: bool = False
    """The connection failed: wake everybody."""

    def absorb(self, other: Progress) -> None:
        self.completed.extend(other.completed)
        self.consumers.update(other.consumers)
        self.held.extend(other.held)
        self.failed = self.failed or other.failed


class _DirectAcks:
    """The acknowledger of a consumer no driver has bound: acks go straight to the state."""

    __slots__ = ("consumer_id", "sessions")

    def __init__(self, sessions: Sessions, consumer_id: int) -> None:
        self.sessions = sessions
        self.consumer_id = consumer_id

    def ack(self, seq: int) -> None:
        self.sessions.ack(self.consumer_id, seq)

    def nack(self, seq: int, requeue: bool) -> None:
        self.sessions.nack(self.consumer_id, seq, requeue)


class ClientProtocol(Output):
    """All client state of one connection; see the module docstring. Not thread-safe."""

    def __init__(self, *, max_packet_size: int = 16 << 20) -> None:
        # pages stay bytes until the caller's parser reads them (requests.cursor_fetch*)
        super().__init__(PacketCodec(max_packet_size=max_packet_size, raw_pages=True))
        self.connected: Connected | None = None
        self._first: bytes | None = None  # the first bytes the server sent (for errors)

    @property
    def failure(self) -> ChuteError | None:
        """Set once the connection failed; every later call raises it."""
        return self._requests.failure

    @property
    def in_flight(self) -> int:
        """How many requests await their answer."""
        return len(self._requests)

    # -- requests and results ---------------------------------------------------------

    def start(self, request: Request[Any], session_id: int = 0) -> int:
        """Queue ``request``; returns the correlation id whose answer ``request.parse``
        reads. With ``session_id``, an error deferred to that session is raised first.

        Raises:
            ConnectError: the connection failed.
            ChuteError: an error deferred to the session (a failed one-way send).
        """
        if session_id:
            self.sessions.session(session_id)
        return self._request(request.packet)

    def result(self, corr: int) -> Packet | None:
        """The answer to request ``corr``, or None while it has not arrived.

        Raises:
            ChuteError: the broker answered with an error (rebuilt by its code).
            ConnectError: the connection failed before the answer came.
        """
        return self._requests.result(corr)

    def held(self, corr: int) -> tuple[int, Held] | None:
        """The latest notice that the broker holds request ``corr`` (see
        :meth:`Correlator.held <chute.client.correlation.Correlator.held>`)."""
        return self._requests.held(corr)

    def forget(self, corr: int) -> None:
        """Stop waiting for ``corr`` (timed out): a late answer is dropped."""
        self._requests.forget(corr)

    # -- connection -----------------------------------------------------------------

    def connect(
        self,
        client_id: str | None = None,
        login: str | None = None,
        passcode: str | None = None,
        heartbeat_ms: int = 0,
    ) -> Request[Connected]:
        """The CONNECT request; its parser adopts the negotiated version.

        A refusal comes back as :class:`~chute.errors.ConnectError` (or the error its
        code names, such as :class:`~chute.errors.AuthenticationFailed`).
        """
        packet = Connect(
            MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, client_id, login, passcode, heartbeat_ms
        )
        return Request(packet, self._connected)

    def _connected(self, packet: Packet) -> Connected:
        connected = expect(packet, Connected)
        if connected.version not in SUPPORTED_VERSIONS:
            error = ConnectError(f"broker chose unsupported protocol version {connected.version}")
            self.fail(error)
            raise error
        self.codec.version = connected.version
        self.connected = connected
        return connected

    def disconnect(self) -> int:
        """Return the credit and acks still owed, then queue DISCONNECT (a request)."""
        self.sessions.settle_all()
        return self._request(Disconnect())

    def ping(self) -> None:
        self._oneway(Ping())

    def fail(self, error: ChuteError) -> Progress:
        """The connection is gone: fail every waiter and every later call with ``error``."""
        completed = self._requests.fail(error)
        self.sessions.failure = self._requests.failure
        return Progress(completed, set(self.sessions.consumer_ids()), failed=True)

    def connection_lost(self, exc: BaseException | None = None) -> Progress:
        if self.failure is not None:
            return self.fail(self.failure)
        reason = f": {exc}" if exc is not None else ""
        return self.fail(ConnectError(f"connection to the broker lost{reason}"))

    # -- sessions -------------------------------------------------------------------

    def open_session(
        self, ack_mode: str = "auto", transacted: bool = False, producer: str | None = None
    ) -> int:
        """Queue SESSION_OPEN (one-way: the client chooses the id). Returns the session id.
        ``producer`` names the session's producer for the broker's duplicate detection
        (sent to a broker of protocol 4 on; an older one is not told).

        Raises:
            ValueError: unknown ack mode.
            ConnectError: the connection failed.
        """
        if self.failure is not None:
            raise self.failure
        session = self.sessions.open_session(SessionAckMode(ack_mode), bool(transacted))
        if self.codec.version < PRODUCER_VERSION:
            producer = None
        self._oneway(SessionOpen(session.id, session.ack_mode, session.transacted, producer))
        return session.id

    def close_session(self, session_id: int) -> int | None:
        """Close the session's consumers and queue SESSION_CLOSE (a request); None if closed."""
        if not self.sessions.close_session(session_id):
            return None
        return self._request(SessionClose(session_id))

    def commit(self, session_id: int) -> int:
        """Queue COMMIT (a request), after acking what the session's consumers took."""
        return self._transaction(session_id, Commit(session_id))

    def rollback(self, session_id: int) -> int:
        return self._transaction(session_id, Rollback(session_id))

    def prepare(self, session_id: int, xid: str) -> int:
        return self._transaction(session_id, XaPrepare(session_id, xid))

    def _transaction(self, session_id: int, packet: Commit | Rollback | XaPrepare) -> int:
        """Raises TransactionError for a session that is not transacted."""
        session = self.sessions.session(session_id)
        if not session.transacted:
            raise TransactionError(f"session {session_id} is not transacted")
        self.sessions.settle_session(session)
        return self._request(packet)

    # -- consumers ------------------------------------------------------------------

    def open_consumer(
        self, session_id: int, address: str, options: ConsumerOptions = _CONSUMER_DEFAULTS
    ) -> tuple[int, int]:
        """Queue CONSUMER_OPEN (a request), or STREAM_CONSUMER_OPEN with an ``offset``
        (streams). Returns ``(consumer id, correlation id)``.

        Until :meth:`bind`, the consumer's messages ack straight through this state.

        Raises:
            ValueError: prefetch below 1; durable without a subscription name.
        """
        session = self.sessions.session(session_id)
        selector, prefetch, exclusive, subscription, durable, shared, offset = options
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if durable and not subscription:
            raise ValueError("a durable subscription needs a name (subscription=...)")
        consumer_id = self.sessions.add_consumer(
            session, prefetch, lambda cid: _DirectAcks(self.sessions, cid)
        )
        if offset is not None:
            corr = self._request(
                StreamConsumerOpen(
                    session_id, consumer_id, canonical(address), str(offset), selector, prefetch
                )
            )
            return consumer_id, corr
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
        return consumer_id, corr

    def bind(self, consumer_id: int, owner: Acknowledger) -> None:
        """Make ``owner`` (the driver's acknowledger) what the consumer's messages ack
        through from now on."""
        self.sessions.bind(consumer_id, owner)

    def close_consumer(self, consumer_id: int) -> int | None:
        """Return owed credit/acks, queue CONSUMER_CLOSE (a request); None if already closed.

        Messages still in the buffer were never handed out: the broker redelivers them.
        """
        if not self.sessions.drop_consumer(consumer_id) or self.failure is not None:
            return None
        return self._request(ConsumerClose(consumer_id))

    # -- input ----------------------------------------------------------------------

    def receive_data(self, data: bytes) -> Progress:
        """Feed bytes from the broker (``b""`` = closed); returns whom to wake."""
        progress = Progress()
        if self.failure is not None:
            return progress
        if self.connected is None and self._first is None:
            self._first = data[:80]
        self.codec.receive_data(data)
        sessions = self.sessions
        try:
            items = self.codec.next_packets(sessions.deliver)
        except RemoteProtocolError as exc:
            sessions.woken.clear()  # fail() wakes every consumer
            self._oneway(Error(exc.error_code, exc.reason))
            return self.fail(self._broken(exc))
        if sessions.woken:
            progress.consumers, sessions.woken = sessions.woken, set()
        for header, packet in items:
            self._handle(header, packet, progress)
            if progress.failed:
                return progress
        if not data:
            progress.absorb(self.connection_lost())
        return progress

    def _broken(self, exc: RemoteProtocolError) -> ConnectError:
        """What to tell the user of a protocol error: before the broker answered the
        Connect, text where a packet should start means the port speaks another
        protocol (STOMP's ERROR frame, an HTTP response) and says so."""
        first = self._first
        if self.connected is None and first and _looks_like_text(first):
            line = first.split(b"\n", 1)[0].decode("ascii", "replace").strip()
            return WrongProtocol(
                f"the server does not speak chute's native protocol: it answered {line!r} "
                "(is this the STOMP or HTTP port? chute's native port is 5445 by default)"
            )
        return ConnectError(f"the broker broke the protocol ({exc.error_code}): {exc.reason}")

    def _handle(self, header: Header, packet: Packet, progress: Progress) -> None:
        corr = header.correlation_id
        if isinstance(packet, Ping):
            self._write(encode_packet(Pong(), corr, version=self.codec.version))
        elif isinstance(packet, Pong):
            pass
        elif isinstance(packet, Disconnect):
            progress.absorb(self.fail(ConnectError("the broker closed the connection")))
        elif isinstance(packet, Error):
            self._handle_error(header, packet, progress)
        elif isinstance(packet, Held):
            if self._requests.hold(corr, packet):
                progress.held.append(corr)
        elif self._requests.answer(corr, packet):
            progress.completed.append(corr)
        # else: an answer nobody waits for (a timed-out request): dropped.

    def _handle_error(self, header: Header, packet: Error, progress: Progress) -> None:
        corr = header.correlation_id
        error = error_for_code(packet.code, packet.reason)
        if corr:
            if self.connected is None and type(error) is ChuteError:
                error = _connect_error(packet)  # CONNECT refused for a reason of its own
            if self._requests.answer(corr, error):
                progress.completed.append(corr)
            return
        target = header.target_id
        consumers = self.sessions.fail_session(target, error)
        if consumers is not None:
            progress.consumers.update(consumers)
        elif self.sessions.fail_consumer(target, error):
            progress.consumers.add(target)
        elif target == 0:
            progress.absorb(self.fail(_connect_error(packet)))


def _connect_error(packet: Error) -> ConnectError:
    feature = unsupported(packet.reason) if packet.code == "unknown-packet-type" else None
    if feature is not None:  # a broker older than the request: say so
        return ConnectError(f"this broker does not support {feature}; upgrade it")
    return ConnectError(f"{packet.reason} ({packet.code})")


def _looks_like_text(data: bytes) -> bool:
    """The first four bytes are printable ASCII: a text protocol's answer, not the
    length of a packet (which would be over 500 MiB)."""
    head = data[:4]
    return len(head) == 4 and all(32 <= b < 127 for b in head)
