"""The blocking client: a thin driver of :class:`ClientProtocol` over a socket and two threads.

* a reader thread feeds whatever arrives into the protocol and wakes waiters;
* a writer thread sends the output buffer whenever it is not empty, so that
  one-way sends, acks and credit pile up while it writes and go out together
  (one syscall for many packets);
* a request (a persistent send, commit, ...) sends the buffer itself and then
  waits for its answer; so does a send that finds the buffer past a high-water
  mark, which bounds memory when the broker cannot keep up.

One lock guards the protocol state; ``_write_lock`` keeps writes in buffer
order (always taken before the state lock). Connections, sessions and
consumers may be shared between threads.
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self

from chute.client.protocol import ClientProtocol
from chute.client.received import Received
from chute.client.tls import TlsSocket, client_context
from chute.client.url import parse_url
from chute.errors import ChuteError, ConnectError, ConsumerError, RequestTimeout
from chute.message import DEFAULT_PRIORITY, BodyKind, Message
from chute.protocol.packets import Packet

HIGH_WATER: Final = 1 << 20
"""Bytes of queued output past which a sender writes them itself (and so blocks)."""
READ_SIZE: Final = 1 << 16
"""Bytes asked of one ``recv``: under glibc's mmap threshold (128 KiB), so each read's
buffer comes from the heap; a larger one costs an mmap, page faults and an munmap per
read, which a lone producer waiting for each confirmation pays every time."""
CLOSE_TIMEOUT: Final = 5.0


def connect(
    url: str = "chute://127.0.0.1:5445",
    *,
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 10.0,
    heartbeat: float = 0.0,
    tls_ca: str | None = None,
    tls_verify: bool = True,
) -> Connection:
    """Connect to a broker and return a :class:`Connection` (also a context manager).

    Args:
        url: ``chute://host[:port]`` (port 5445 by default).
        client_id: names the client for durable subscriptions.
        login, passcode: credentials, if the broker requires them.
        timeout: seconds to wait for the connection and for every request's answer.
        heartbeat: seconds; if > 0, ask the broker to check liveness that often.
        tls_ca: for ``chutes://``: a CA file to trust (default: the system's).
        tls_verify: for ``chutes://``: False skips the certificate check (testing only).

    Raises:
        ConnectError: cannot reach the broker, or it refused the connection.
        AuthenticationFailed: the broker rejected the credentials.
        RequestTimeout: the broker did not answer in time.
    """
    target = parse_url(url)
    try:
        sock = socket.create_connection((target.host, target.port), timeout=timeout)
    except OSError as exc:
        raise ConnectError(f"cannot connect to {target}: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel: socket.socket | TlsSocket = sock
    if target.tls:
        try:
            channel = TlsSocket(sock, client_context(tls_ca, verify=tls_verify), target.host)
        except BaseException:
            sock.close()
            raise
    sock.settimeout(None)
    conn = Connection(channel, ClientProtocol(), timeout)
    try:
        conn._handshake(client_id, login, passcode, heartbeat)
    except BaseException:
        conn._shutdown()
        raise
    return conn


class Connection:
    """A connection to a broker. Thread-safe. Use :func:`connect` to make one."""

    def __init__(
        self, sock: socket.socket | TlsSocket, protocol: ClientProtocol, timeout: float
    ) -> None:
        self.timeout = timeout
        self.connection_id = ""
        self._sock = sock
        self._proto = protocol
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # results, deliveries, failure
        self._writer_cond = threading.Condition(self._lock)
        self._writer_waiting = False
        self._write_lock = threading.Lock()
        self._closing = False
        self._heartbeat = 0.0
        self._last_received = self._last_sent = time.monotonic()
        self._windowed: weakref.WeakSet[Session] = weakref.WeakSet()  # close awaits them
        self._reader = threading.Thread(target=self._read_loop, name="chute-reader", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="chute-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def _handshake(
        self, client_id: str | None, login: str | None, passcode: str | None, heartbeat: float
    ) -> None:
        with self._lock:
            corr = self._proto.connect(client_id, login, passcode, int(heartbeat * 1000))
        connected = self._proto.finish_connect(self._call(corr))
        self.connection_id = connected.connection_id
        with self._lock:
            self._heartbeat = connected.heartbeat_ms / 1000
            self._writer_cond.notify()

    # -- plumbing -------------------------------------------------------------------

    def _flush(self) -> None:
        with self._write_lock:
            with self._lock:
                data = self._proto.data_to_send()
            if data:
                try:
                    self._sock.sendall(data)
                except OSError as exc:
                    self._lost(exc)
                self._last_sent = time.monotonic()

    def _nudge(self) -> None:
        """Called with the lock held after queuing one-way output: wake the writer if it
        sleeps (once: the flag is cleared here, so a burst of sends notifies once)."""
        if self._writer_waiting:
            self._writer_waiting = False
            self._writer_cond.notify()

    def _call(self, corr: int, timeout: float | None = None) -> Packet:
        """Send what is queued, then wait for the answer to request ``corr``."""
        self._flush()
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._lock:
            while True:
                result = self._proto.result(corr)
                if result is not None:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._proto.forget(corr)
                    raise RequestTimeout(f"no answer from the broker within {limit:g} s")
                self._cond.wait(remaining)

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
                if progress.completed or progress.consumers or progress.failed:
                    self._cond.notify_all()
                if proto.outbox_size:
                    self._nudge()
                if progress.failed or not data:
                    self._closing = True
                    self._writer_cond.notify()
                    return

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
            self._flush()

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

    def _close_socket(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _shutdown(self) -> None:
        with self._lock:
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

    # -- API ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._proto.failure is not None

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> Session:
        """Open a session (no round trip: errors surface on its first request).

        Args:
            ack: ``auto``, ``client`` (cumulative ``ack()``) or ``individual``.
            transacted: sends and acks take effect on :meth:`Session.commit`.
            confirm_window: how many persistent sends (in a transacted session:
                commits) may await the broker's confirmation (its fsync) while the
                application goes on; 0, the default, makes each wait for its own.
                See :meth:`Session.send`, :meth:`Session.commit` and
                :meth:`Session.flush`.

        Raises:
            ValueError: unknown ack mode, or a negative window.
            ConnectError: the connection is gone.
        """
        if confirm_window < 0:
            raise ValueError("confirm_window must not be negative")
        with self._lock:
            session_id = self._proto.open_session(ack, transacted)
            self._nudge()
        session = Session(self, session_id, confirm_window)
        if confirm_window:
            self._windowed.add(session)
        return session

    def stat(self) -> dict[str, Any]:
        """The broker's statistics (a JSON document)."""
        with self._lock:
            corr = self._proto.stat()
        result: dict[str, Any] = json.loads(self._proto.stat_result(self._call(corr)))
        return result

    def prepared(self) -> list[str]:
        """The xids of every prepared (two-phase) transaction waiting in the broker."""
        with self._lock:
            corr = self._proto.prepared()
        return self._proto.prepared_result(self._call(corr))

    def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (prepared by any connection, also before a restart)."""
        with self._lock:
            corr = self._proto.commit_prepared(xid)
        self._call(corr)

    def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction: its sends are dropped, its acks undone."""
        with self._lock:
            corr = self._proto.rollback_prepared(xid)
        self._call(corr)

    def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool:
        """Commit the prepared transactions ``xids`` all together, once per (sink, batch).

        Returns False when the broker had committed this batch (or a later one) of
        ``sink`` before: the xids were rolled back instead (a retried batch). With
        ``keep=False`` no batch is remembered (a one-off job): the commit is only atomic.

        Raises:
            NotFound: an xid is not prepared; nothing was committed.
            TransactionError: a bad sink name, batch or xid.
        """
        with self._lock:
            corr = self._proto.commit_batch(sink, batch, tuple(xids), keep)
        return self._proto.commit_batch_result(self._call(corr))

    # -- cursors: reading a destination by sequence number (docs/spark.md) -------------

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        """Open (or refresh) the named cursor; returns ``(earliest, head)`` sequence numbers.

        ``head`` is the first sequence not readable yet. Without ``cursor``, nothing
        is opened: the numbers describe a queue for a snapshot read.

        Raises:
            ConsumerError: the queue is held by another exclusive consumer or has
                messages in flight; a topic cursor exists with another selector.
            InvalidAddress, InvalidSelector: refused by the broker.
        """
        with self._lock:
            corr = self._proto.cursor_open(address, cursor, selector, lease_ms)
        return self._proto.cursor_info(self._call(corr))

    def cursor_fetch(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> tuple[int, tuple[tuple[int, Message], ...]]:
        """One page of the messages with ``start <= seq < end``, not consumed: returns
        ``(next start, ((seq, message), ...))``; the range is done when next == end."""
        with self._lock:
            corr = self._proto.cursor_fetch(address, cursor, start, end, max_messages, max_bytes)
        return self._proto.cursor_batch(self._call(corr))

    def cursor_read(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[tuple[tuple[int, Message], ...]]:
        """Every message with ``start <= seq < end``, page by page, in sequence order.

        The next page is requested before this one is handed out, so the broker
        works while the caller does.
        """
        proto = self._proto
        if start >= end:
            return
        with self._lock:
            corr = proto.cursor_fetch(address, cursor, start, end, page_messages, page_bytes)
        while True:
            next_start, messages = proto.cursor_batch(self._call(corr))
            more = start < next_start < end
            if more:
                with self._lock:
                    corr = proto.cursor_fetch(
                        address, cursor, next_start, end, page_messages, page_bytes
                    )
                    self._nudge()  # the writer sends it while the caller works
            if messages:
                yield messages
            if not more:
                return
            start = next_start

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        """Consume every message the cursor holds below ``end``; returns once durable."""
        with self._lock:
            corr = self._proto.cursor_ack(address, cursor, end)
        self._call(corr)

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        """Release the cursor's lease; ``delete`` also forgets it (and a topic cursor's
        messages)."""
        with self._lock:
            corr = self._proto.cursor_close(address, cursor, delete)
        self._call(corr)

    def close(self) -> None:
        """Close gracefully: sessions' unconfirmed sends are awaited, acks and credit
        owed are sent, then DISCONNECT; never raises for a connection that is already
        gone.

        Raises:
            ChuteError: a session's unconfirmed send was refused or not stored (the
                connection is closed all the same).
        """
        if self._closing:
            self._shutdown()
            return
        failure: ChuteError | None = None
        for session in list(self._windowed):
            try:
                session._settle_all()
            except ChuteError as exc:
                failure = failure or exc
        try:
            with self._lock:
                corr = self._proto.disconnect() if self._proto.failure is None else 0
            if corr:
                self._call(corr, min(self.timeout, CLOSE_TIMEOUT))
        except (ConnectError, RequestTimeout):
            pass
        finally:
            self._shutdown()
        if failure is not None:
            raise failure

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _close_at_exit(self.close, exc, "the connection")

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<chute.Connection {self.connection_id or '?'} {state}>"


class Session:
    """A session: an ack mode, maybe a transaction, and its consumers. Thread-safe."""

    def __init__(self, connection: Connection, session_id: int, confirm_window: int = 0) -> None:
        self.connection = connection
        self.id = session_id
        self.confirm_window = confirm_window
        self._unconfirmed: collections.deque[int] = collections.deque()  # request ids, oldest first
        self._confirming = threading.Lock()  # one thread at a time waits for confirmations

    def send(
        self,
        address: str,
        body: bytes | str = b"",
        *,
        priority: int = DEFAULT_PRIORITY,
        ttl: int = 0,
        properties: Mapping[str, Any] | None = None,
        persistent: bool = True,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
        id: str | None = None,
        kind: BodyKind | None = None,
    ) -> None:
        """Send a message to ``address`` (``queue:NAME``, ``topic:NAME`` or ``NAME``).

        A persistent send (the default) returns once the broker has the message on
        disk; a non-persistent one returns at once (errors surface on a later call).
        In a transacted session nothing waits: :meth:`commit` does. A ``str`` body
        is sent as UTF-8 ``text``; ``ttl`` is in milliseconds (0 = never expires).

        With a ``confirm_window`` of N (see :meth:`Connection.session`), a persistent
        send returns as soon as at most N sends of this session await their
        confirmation, so the producer pipelines instead of waiting for each fsync.
        A send the broker then refuses, or could not store, is raised by a later
        :meth:`send`, :meth:`flush` or :meth:`close` (the exception's note says so);
        every other message of the session stays confirmed or pending as it was.

        Raises:
            InvalidAddress, InvalidMessage: a bad address or field.
            DestinationFull: the destination refused the message (now or, for a
                one-way send, an earlier one).
            ConnectError, RequestTimeout: the connection failed or the broker is slow.
        """
        conn = self.connection
        with conn._lock:
            proto = conn._proto
            corr = proto.send(
                self.id,
                address,
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
            # A request waited for at once is flushed by _call below; anything else
            # (one-way, or left in the confirm window) goes out by the writer thread.
            if conn._writer_waiting and (not corr or self.confirm_window):
                conn._nudge()
            full = proto.outbox_size >= HIGH_WATER
        if not corr:
            if full:
                conn._flush()
        elif self.confirm_window:
            unconfirmed = self._unconfirmed
            unconfirmed.append(corr)
            if len(unconfirmed) > self.confirm_window:
                self._await_confirmations(self.confirm_window)
            elif full:
                conn._flush()
        else:
            conn._call(corr)

    def flush(self) -> None:
        """Wait until every persistent send (or commit) of this session is confirmed
        (with a ``confirm_window``; otherwise there is nothing to wait for).

        Raises:
            ChuteError: a send was refused or not stored (the others are still awaited
                by the next call), or the connection failed.
            RequestTimeout: no confirmation within the connection's timeout.
        """
        self._await_confirmations(0)

    def _await_confirmations(self, most: int) -> None:
        """Wait until at most ``most`` sends are unconfirmed, oldest first."""
        unconfirmed = self._unconfirmed
        with self._confirming:
            if len(unconfirmed) <= most:
                return
            self.connection._flush()  # what is queued goes out before we wait on it
            while len(unconfirmed) > most:
                corr = unconfirmed.popleft()
                try:
                    self.connection._call(corr)
                except ChuteError as exc:
                    exc.add_note(
                        f"raised for an earlier persistent send or commit of session "
                        f"{self.id}, which awaited its confirmation (confirm_window)"
                    )
                    raise

    def consumer(
        self,
        address: str,
        *,
        selector: str | None = None,
        prefetch: int = 100,
        exclusive: bool = False,
        subscription: str | None = None,
        durable: bool = False,
        shared: bool = False,
    ) -> Consumer:
        """Open a consumer on ``address``; for a topic, ``subscription`` names the
        subscription (``durable`` outlives the connection, ``shared`` competes).

        Raises:
            InvalidAddress, InvalidSelector, NotFound, AccessDenied: refused by the broker.
            ValueError: prefetch below 1, or durable without a name.
        """
        conn = self.connection
        with conn._lock:
            consumer_id, corr = conn._proto.open_consumer(
                self.id,
                address,
                selector=selector,
                prefetch=prefetch,
                exclusive=exclusive,
                subscription=subscription,
                durable=durable,
                shared=shared,
            )
        consumer = Consumer(self, consumer_id)
        with conn._lock:
            conn._proto.bind(consumer_id, consumer)
        try:
            conn._call(corr)
        except BaseException:
            with conn._lock:
                conn._proto.close_consumer(consumer_id)
            raise
        return consumer

    def _request(self, corr: int) -> Packet:
        return self.connection._call(corr)

    def commit(self) -> None:
        """Commit the transaction: its sends are delivered, its acks take effect.

        With a ``confirm_window`` of N it returns as soon as at most N commits of
        this session await the broker's answer (pipelined transactions: the
        producer fills the next while the broker stores the last). A commit the
        broker then refused is raised by a later call, as for windowed sends (see
        :meth:`send`); as with a refused commit waited for, nothing of it was
        applied and its transaction stays open, now with whatever was sent since:
        roll it back and send again from the last commit :meth:`flush` confirmed.
        """
        conn = self.connection
        with conn._lock:
            corr = conn._proto.commit(self.id)
        if self.confirm_window:
            self._unconfirmed.append(corr)
            if len(self._unconfirmed) > self.confirm_window:
                self._await_confirmations(self.confirm_window)
            else:
                conn._flush()
        else:
            conn._call(corr)

    def prepare(self, xid: str) -> None:
        """Prepare the transaction under ``xid`` (two-phase) and start a new one; returns
        once the broker has it on disk. Finish it with ``Connection.commit_prepared``."""
        conn = self.connection
        with conn._lock:
            corr = conn._proto.prepare(self.id, xid)
        conn._call(corr)

    def rollback(self) -> None:
        """Roll back: sends are dropped, messages taken are redelivered."""
        conn = self.connection
        with conn._lock:
            corr = conn._proto.rollback(self.id)
        conn._call(corr)

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Message]:
        """A snapshot of a queue in delivery order, without consuming (``limit`` 0 = all)."""
        conn = self.connection
        with conn._lock:
            conn._proto.check_session(self.id)
            corr = conn._proto.browse(address, selector, limit)
        return conn._proto.browse_result(conn._call(corr))

    def temporary_queue(self) -> str:
        """Create a queue that lives as long as the connection; returns its address."""
        conn = self.connection
        with conn._lock:
            conn._proto.check_session(self.id)
            corr = conn._proto.temporary_queue()
        return conn._proto.temporary_queue_result(conn._call(corr))

    def unsubscribe(self, name: str) -> None:
        """Delete the durable subscription ``name`` of this connection's client id."""
        conn = self.connection
        with conn._lock:
            conn._proto.check_session(self.id)
            corr = conn._proto.unsubscribe(name)
        conn._call(corr)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create a callback queue: durable subscription ``name`` on ``topic`` that
        forwards every (selected) message to ``forward_to``."""
        conn = self.connection
        with conn._lock:
            conn._proto.check_session(self.id)
            corr = conn._proto.callback(topic, name, forward_to, selector)
        conn._call(corr)

    def close(self) -> None:
        """Wait for every unconfirmed send (:meth:`flush`), then close the session and
        its consumers (never raises for a lost connection).

        Raises:
            ChuteError: an unconfirmed send was refused or not stored (the first such;
                the others were awaited all the same, and the session is closed).
        """
        try:
            self._settle_all()
        finally:
            self._close()

    def _settle_all(self) -> None:
        """Await every unconfirmed send, past failures; raise the first failure (not a lost
        connection or a timeout: what is unconfirmed then stays unknown)."""
        first: ChuteError | None = None
        while self._unconfirmed:
            try:
                self.flush()
            except (ConnectError, RequestTimeout):
                break
            except ChuteError as exc:
                first = first or exc
        if first is not None:
            raise first

    def _close(self) -> None:
        conn = self.connection
        conn._windowed.discard(self)
        with conn._lock:
            corr = conn._proto.close_session(self.id)
            conn._cond.notify_all()
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                conn._call(corr)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _close_at_exit(self.close, exc, f"session {self.id}")


class Consumer:
    """Receives messages from one address. Thread-safe; iterate it to receive forever."""

    def __init__(self, session: Session, consumer_id: int) -> None:
        self.session = session
        self.id = consumer_id
        self._conn = session.connection

    def receive(self, timeout: float | None = None) -> Received | None:
        """The next message, or None after ``timeout`` seconds (None = wait forever).

        Raises:
            ConsumerError: the consumer is closed.
            ConnectError: the connection failed.
            ChuteError: the broker reported an error for this consumer or session.
        """
        conn = self._conn
        proto = conn._proto
        with conn._lock:
            received = proto.take(self.id)
            if received is None:
                received = self._wait(timeout)
            if proto.outbox_size and conn._writer_waiting:
                conn._nudge()
        return received

    def _wait(self, timeout: float | None) -> Received | None:
        conn = self._conn
        proto = conn._proto
        proto.before_wait(self.id)
        if proto.outbox_size and conn._writer_waiting:
            conn._nudge()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if deadline is None:
                conn._cond.wait()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                conn._cond.wait(remaining)
            received = proto.take(self.id)
            if received is not None:
                return received

    def __iter__(self) -> Iterator[Received]:
        """Receive until the consumer is closed."""
        while True:
            try:
                message = self.receive()
            except ConsumerError:
                if self.closed:
                    return
                raise
            if message is not None:
                yield message

    @property
    def closed(self) -> bool:
        return self._conn._proto.consumer(self.id) is None

    def _ack(self, seq: int) -> None:
        conn = self._conn
        with conn._lock:
            conn._proto.ack(self.id, seq)
            conn._nudge()

    def _nack(self, seq: int, requeue: bool) -> None:
        conn = self._conn
        with conn._lock:
            conn._proto.nack(self.id, seq, requeue)
            conn._nudge()

    def close(self) -> None:
        """Close the consumer; messages not yet received go back to the broker."""
        conn = self._conn
        with conn._lock:
            corr = conn._proto.close_consumer(self.id)
            conn._cond.notify_all()
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                conn._call(corr)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["ChuteError", "Connection", "Consumer", "Received", "Session", "connect"]


def _close_at_exit(close: Callable[[], None], exc: BaseException | None, what: str) -> None:
    """``close()`` at the end of a ``with`` block. With an exception on its way out, a
    failure to close (an unconfirmed send refused) becomes a note on that exception
    instead of replacing it."""
    if exc is None:
        close()
        return
    try:
        close()
    except ChuteError as failure:
        exc.add_note(f"closing {what} also failed: {failure}")
