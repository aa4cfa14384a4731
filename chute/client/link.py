"""The blocking client's I/O: one socket, its ClientProtocol, and the two threads that move bytes.

* a reader thread feeds whatever arrives into the protocol and wakes waiters;
* a writer thread sends the output buffer whenever it is not empty, so that
  one-way sends, acks and credit pile up while it writes and go out together
  (one syscall for many packets);
* a request (a persistent send, commit, ...) sends the buffer itself and then
  waits for its answer; so does a send that finds the buffer past a high-water
  mark, which bounds memory when the broker cannot keep up;
* heartbeats: the writer pings a quiet connection and gives up on a silent
  broker;
* a connection lost (not closed by :meth:`Link.close` or :meth:`Link.abort`)
  runs, on a thread of its own, what :meth:`Link.when_lost` gave.

:func:`open_link` makes the socket (TLS for ``chutes://``, through
:class:`~chute.client.tls.TlsSocket`, so the two threads never share one
OpenSSL connection), or the WebSocket or the plain requests of ``ws://``,
``wss://``, ``http://`` and ``https://`` URLs
(:mod:`chute.client.channels`). A :class:`Link` is the whole interface the blocking API
(:mod:`chute.client.blocking`) has to the connection: every public method
takes the state lock itself, queues what the protocol decides, wakes the
writer when it sleeps, and waits where the API must. One lock guards the
protocol state; a write lock keeps writes in buffer order (always taken
before the state lock). Thread-safe.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from chute.client.channels import Channel, HttpChannel, WebSocketChannel, failure
from chute.client.correlation import held_longer, unanswered
from chute.client.outgoing import SendFields, contents_of
from chute.client.protocol import ClientProtocol
from chute.client.received import LinkAcks, Received
from chute.client.requests import Pending, Request
from chute.client.sessions import ConsumerOptions
from chute.client.tls import TlsSocket
from chute.client.url import HTTP, WEBSOCKET, BrokerUrl
from chute.errors import ConnectError, RequestTimeout
from chute.message import Message
from chute.protocol.packets import Connected, Packet

T = TypeVar("T")

HIGH_WATER: Final = 1 << 20
"""Bytes of queued output past which a sender writes them itself (and so blocks)."""
READ_SIZE: Final = 1 << 16
"""Bytes asked of one ``recv``: under glibc's mmap threshold (128 KiB), so each read's
buffer comes from the heap; a larger one costs an mmap, page faults and an munmap per
read, which a lone producer waiting for each confirmation pays every time."""
CLOSE_TIMEOUT: Final = 5.0


def open_link(target: BrokerUrl, timeout: float, context: ssl.SSLContext | None) -> Link:
    """A connection to ``target`` (TLS with ``context`` for ``chutes://``, ``wss://`` and
    ``https://``) with its threads running; not yet handshaken (:meth:`Link.handshake`).

    Raises:
        ConnectError: cannot reach the broker, or the TLS handshake failed.
    """
    if target.transport == WEBSOCKET:
        return Link(WebSocketChannel(target, timeout, context), timeout)
    if target.transport == HTTP:
        try:
            return Link(HttpChannel(target, timeout, context), timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise failure(target, exc) from None
    try:
        sock = socket.create_connection((target.host, target.port), timeout=timeout)
    except OSError as exc:
        raise ConnectError(f"cannot connect to {target}: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel: Channel = sock
    if context is not None:
        try:
            channel = TlsSocket(sock, context, target.host)
        except BaseException:
            sock.close()
            raise
    sock.settimeout(None)
    return Link(channel, timeout)


def pause(seconds: float) -> None:
    """Wait ``seconds`` (between rounds of connect attempts)."""
    time.sleep(seconds)


class Link:
    """A socket, its protocol state and its two threads. Thread-safe; see the module
    docstring. Use :func:`open_link` to make one."""

    def __init__(self, sock: Channel, timeout: float) -> None:
        self.timeout = timeout
        """Seconds to wait for the answer to a request."""
        self._sock = sock
        self._proto = ClientProtocol()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # results, deliveries, failure
        self._writer_cond = threading.Condition(self._lock)
        self._writer_waiting = False
        self._write_lock = threading.Lock()
        self._closing = False
        self._heartbeat = 0.0
        self._last_received = self._last_sent = time.monotonic()
        self._on_lost: Callable[[], None] | None = None
        self._reader = threading.Thread(target=self._read_loop, name="chute-reader", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="chute-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    @property
    def closed(self) -> bool:
        """The connection failed or was closed: every call raises."""
        return self._proto.failure is not None

    congested: Final = False
    """Never: a send past the high-water mark writes the buffer itself (and so blocks);
    the asyncio link's senders ask, and :meth:`drain`, instead."""

    def drain(self) -> None:
        """Nothing to do: see :attr:`congested`."""

    def handshake(
        self, client_id: str | None, login: str | None, passcode: str | None, heartbeat: float
    ) -> Connected:
        """CONNECT and wait for the broker's answer; start heartbeats if agreed.

        Raises:
            ConnectError, AuthenticationFailed, RequestTimeout: refused or unanswered.
        """
        connected = self.call(
            self._proto.connect(client_id, login, passcode, int(heartbeat * 1000))
        )
        with self._lock:
            self._heartbeat = connected.heartbeat_ms / 1000
            self._writer_cond.notify()
        return connected

    def when_lost(self, then: Callable[[], None]) -> None:
        """Run ``then()`` on a thread of its own once, if the connection is lost (the
        broker went, the network failed, heartbeats stopped), not if it is closed or
        aborted."""
        with self._lock:
            self._on_lost = then

    # -- requests -------------------------------------------------------------------------

    def call(self, request: Request[T], *, session: int = 0) -> T:
        """Send ``request`` and return its parsed answer. With ``session``, an error
        deferred to that session is raised first.

        Raises:
            ChuteError: the broker refused it (the error its code names).
            ConnectError: the connection failed. RequestTimeout: no answer in time.
        """
        with self._lock:
            corr = self._proto.start(request, session)
        return request.parse(self.wait(corr))

    def start(self, request: Request[T]) -> Pending[T]:
        """Queue ``request`` for the writer and return at once; :meth:`result` takes
        its answer (so the broker works on it while the caller does something else)."""
        with self._lock:
            corr = self._proto.start(request)
            self._nudge()
        return Pending(corr, request)

    def result(self, pending: Pending[T]) -> T:
        """The parsed answer to a request :meth:`start` queued. Raises as :meth:`call`."""
        return pending.request.parse(self.wait(pending.corr))

    def forget(self, pending: Pending[Any]) -> None:
        """Give up on a request :meth:`start` queued: its answer is dropped."""
        with self._lock:
            self._proto.forget(pending.corr)

    def wait(self, corr: int, timeout: float | None = None) -> Packet:
        """Send what is queued, then wait for the answer to request ``corr``.

        Raises:
            ChuteError: the broker answered with an error.
            ConnectError: the connection failed. RequestTimeout: no answer in time.
        """
        self.flush()
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + limit
        seen = 0  # the last Held notice counted
        with self._lock:
            while True:
                result = self._proto.result(corr)
                if result is not None:
                    return result
                now = time.monotonic()
                held = self._proto.held(corr)
                if held is not None and held[0] != seen:  # the broker holds it: wait longer
                    seen = held[0]
                    deadline = max(deadline, now + held_longer(limit, held[1]))
                remaining = deadline - now
                if remaining <= 0:
                    self._proto.forget(corr)
                    raise unanswered(round(now - started, 1), held[1] if held else None)
                self._cond.wait(remaining)

    def flush(self) -> None:
        """Write what is queued now, on the caller's thread."""
        with self._write_lock:
            with self._lock:
                data = self._proto.data_to_send()
            if data:
                try:
                    self._sock.sendall(data)
                except OSError as exc:
                    self._lost(exc)
                self._last_sent = time.monotonic()

    # -- sessions -------------------------------------------------------------------------

    def open_session(self, ack: str, transacted: bool, producer: str | None = None) -> int:
        """Open a session (one-way; ``producer`` as :meth:`ClientProtocol.open_session`);
        its id. Raises ValueError, ConnectError."""
        with self._lock:
            session_id = self._proto.open_session(ack, transacted, producer)
            self._nudge()
        return session_id

    def close_session(self, session_id: int) -> None:
        """Close the session and its consumers (waking their receivers); quiet if the
        connection is gone."""
        with self._lock:
            corr = self._proto.close_session(session_id)
            self._cond.notify_all()
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                self.wait(corr)

    def send(
        self,
        session_id: int,
        address: str,
        body: bytes | str,
        options: SendFields,
        windowed: bool,
    ) -> int:
        """Queue a SEND (see :meth:`ClientProtocol.send`); the correlation id to wait for,
        or 0 for a one-way send. One-way output, and a request left in a confirm window
        (``windowed``), goes out by the writer thread, or now if the buffer is past
        :data:`HIGH_WATER`; a request awaited at once is flushed by :meth:`wait`."""
        with self._lock:
            proto = self._proto
            corr = proto.send(session_id, address, body, options)
            unawaited = not corr or windowed
            if unawaited and self._writer_waiting:
                self._nudge()
            full = proto.outbox_size >= HIGH_WATER
        if full and unawaited:
            self.flush()
        return corr

    def send_kept(
        self, session_id: int, address: str, body: bytes | str, options: SendFields
    ) -> tuple[int, bytes]:
        """:meth:`send` of a request left in a confirm window, and its packet (to
        :meth:`resend` if the connection is lost before it is confirmed)."""
        with self._lock:
            proto = self._proto
            corr = proto.send(session_id, address, body, options)
            packet = proto.last_packet
            if self._writer_waiting:
                self._nudge()
            full = proto.outbox_size >= HIGH_WATER
        if full:
            self.flush()
        return corr, packet

    def resend(self, session_id: int, packet: bytes) -> int:
        """Queue ``packet`` again as a new request of ``session_id`` (see
        :meth:`ClientProtocol.resend`); its correlation id."""
        with self._lock:
            corr = self._proto.resend(session_id, packet)
            self._nudge()
        return corr

    def send_many(
        self, session_id: int, address: str, messages: Iterable[bytes | str | Message], ttl: int
    ) -> list[tuple[int, bytes]]:
        """Queue SEND_MANY packets for ``messages`` (see :func:`contents_of`); the
        correlation ids to wait for, each with its packet (none in a transacted
        session). Written out a packet at a time, as one-way sends are."""
        corrs: list[tuple[int, bytes]] = []
        for contents in contents_of(messages):
            with self._lock:
                proto = self._proto
                corr = proto.send_many(session_id, address, contents, ttl)
                if corr:
                    corrs.append((corr, proto.last_packet))
                if self._writer_waiting:
                    self._nudge()
                full = proto.outbox_size >= HIGH_WATER
            if full:
                self.flush()
        return corrs

    def send_many_framed(
        self, session_id: int, address: str, count: int, framed: bytes | memoryview, ttl: int
    ) -> list[tuple[int, bytes]]:
        """Queue one SEND_MANY of ``count`` framed content blocks (see
        :meth:`ClientProtocol.send_many_framed`); as :meth:`send_many`."""
        with self._lock:
            proto = self._proto
            corr = proto.send_many_framed(session_id, address, count, framed, ttl)
            sent = [(corr, proto.last_packet)] if corr else []
            if self._writer_waiting:
                self._nudge()
            full = proto.outbox_size >= HIGH_WATER
        if full:
            self.flush()
        return sent

    def commit(self, session_id: int) -> int:
        """Queue COMMIT; the correlation id to wait for. Raises TransactionError."""
        with self._lock:
            return self._proto.commit(session_id)

    def rollback(self, session_id: int) -> int:
        with self._lock:
            return self._proto.rollback(session_id)

    def prepare(self, session_id: int, xid: str) -> int:
        with self._lock:
            return self._proto.prepare(session_id, xid)

    # -- consumers ------------------------------------------------------------------------

    def open_consumer(self, session_id: int, address: str, options: ConsumerOptions) -> int:
        """Open a consumer (``options`` as :meth:`ClientProtocol.open_consumer`) and wait
        until the broker has it; its id.

        Raises:
            ValueError: bad options. ChuteError: refused by the broker.
        """
        with self._lock:
            consumer_id, corr = self._proto.open_consumer(session_id, address, options)
            self._proto.bind(consumer_id, LinkAcks(self, consumer_id))
        try:
            self.wait(corr)
        except BaseException:
            with self._lock:
                self._proto.close_consumer(consumer_id)
            raise
        return consumer_id

    def close_consumer(self, consumer_id: int) -> None:
        """Close the consumer (waking its receivers); what it had not handed out goes back
        to the broker. Quiet if the connection is gone."""
        with self._lock:
            corr = self._proto.close_consumer(consumer_id)
            self._cond.notify_all()
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                self.wait(corr)

    def consumer_open(self, consumer_id: int) -> bool:
        return self._proto.sessions.is_open(consumer_id)

    def receive(self, consumer_id: int, timeout: float | None) -> Received | None:
        """The consumer's next message, or None after ``timeout`` seconds (None = forever).

        Raises:
            ConsumerError: the consumer is closed. ConnectError: the connection failed.
            ChuteError: the broker reported an error for this consumer or session.
        """
        sessions = self._proto.sessions
        with self._lock:
            received = sessions.take(consumer_id)
            if received is None:
                received = self._wait_delivery(consumer_id, timeout)
            if self._proto.outbox_size and self._writer_waiting:
                self._nudge()
        return received

    def ack(self, consumer_id: int, seq: int) -> None:
        """Queue the ack of delivery ``seq`` (see :meth:`Sessions.ack`) for the writer.

        Raises:
            ConnectError: the connection failed. ConsumerError: the consumer is closed.
        """
        with self._lock:
            self._proto.sessions.ack(consumer_id, seq)
            self._nudge()

    def nack(self, consumer_id: int, seq: int, requeue: bool) -> None:
        """Queue the refusal of delivery ``seq`` for the writer. Raises as :meth:`ack`."""
        with self._lock:
            self._proto.sessions.nack(consumer_id, seq, requeue)
            self._nudge()

    def _wait_delivery(self, consumer_id: int, timeout: float | None) -> Received | None:
        """Lock held: wait for the consumer's next message."""
        sessions = self._proto.sessions
        sessions.before_wait(consumer_id)
        if self._proto.outbox_size and self._writer_waiting:
            self._nudge()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                self._cond.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            received = sessions.take(consumer_id)
            if received is not None:
                return received

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Close gracefully: acks and credit owed, then DISCONNECT, then the socket and
        threads. Never raises for a connection that is already gone."""
        with self._lock:
            self._on_lost = None
        if not self._closing:
            try:
                with self._lock:
                    corr = self._proto.disconnect() if self._proto.failure is None else 0
                if corr:
                    self.wait(corr, min(self.timeout, CLOSE_TIMEOUT))
            except (ConnectError, RequestTimeout):
                pass
        self.abort()

    def abort(self) -> None:
        """Fail what still waits, stop both threads and close the socket at once."""
        with self._lock:
            self._on_lost = None
            if self._proto.failure is None:
                self._proto.fail(ConnectError("the connection is closed"))
            self._closing = True
            self._cond.notify_all()
            self._writer_cond.notify()
        current = threading.current_thread()
        if self._writer is not current:
            self._writer.join(CLOSE_TIMEOUT)
        self._close_socket()
        if self._reader is not current:
            self._reader.join(CLOSE_TIMEOUT)
        self._sock.close()

    # -- the threads ----------------------------------------------------------------------

    def _nudge(self) -> None:
        """Called with the lock held after queuing one-way output: wake the writer if it
        sleeps (once: the flag is cleared here, so a burst of sends notifies once)."""
        if self._writer_waiting:
            self._writer_waiting = False
            self._writer_cond.notify()

    def _read_loop(self) -> None:
        sock, proto = self._sock, self._proto
        while True:
            error: OSError | None = None
            try:
                data = sock.recv(READ_SIZE)
            except OSError as exc:
                data, error = b"", exc
            with self._lock:
                self._last_received = time.monotonic()
                if error is not None:
                    progress = proto.connection_lost(None if self._closing else error)
                else:
                    progress = proto.receive_data(data)
                if progress.completed or progress.consumers or progress.held or progress.failed:
                    self._cond.notify_all()
                if proto.outbox_size:
                    self._nudge()
                if progress.failed or not data:
                    self._closing = True
                    self._writer_cond.notify()
                    then, self._on_lost = self._on_lost, None
                    break
        if then is not None:
            threading.Thread(target=then, name="chute-lost", daemon=True).start()

    def _write_loop(self) -> None:
        proto = self._proto
        while True:
            with self._lock:
                while not proto.outbox_size and not self._closing:
                    self._writer_waiting = True
                    timeout = self._heartbeat / 2 if self._heartbeat else None
                    woken = self._writer_cond.wait(timeout)
                    self._writer_waiting = False
                    if not woken:
                        self._idle()
                if self._closing and (not proto.outbox_size or proto.failure is not None):
                    return
            self.flush()

    def _idle(self) -> None:
        """Heartbeats (lock held): ping when quiet; give up on a silent broker."""
        now = time.monotonic()
        if now - self._last_received > 2 * self._heartbeat:
            self._proto.fail(ConnectError("the broker stopped answering (heartbeat timeout)"))
            self._closing = True
            self._cond.notify_all()
            self._close_socket()
        elif now - self._last_sent >= self._heartbeat / 2:
            self._proto.ping()

    def _lost(self, exc: OSError) -> None:
        with self._lock:
            self._proto.connection_lost(exc)
            self._closing = True
            self._cond.notify_all()
            self._writer_cond.notify()
        self._close_socket()  # the reader sees it too, and ends

    def _close_socket(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
