"""The asyncio client's I/O: one transport, its ClientProtocol, and the futures that wait.

:class:`AsyncLink` is the asyncio protocol of the connection (``data_received``
feeds the state machine and completes the futures of whoever waits) and the
whole interface the asyncio API (:mod:`chute.client.aio_client`) has to it:

* output is batched per event-loop iteration: operations queue packets and
  schedule one write with ``call_soon``; a request writes at once and awaits a
  future completed when its answer arrives;
* flow control: a send that finds a megabyte queued, or the transport paused
  (``pause_writing``), writes and waits for the transport to drain
  (:attr:`AsyncLink.congested`, :meth:`AsyncLink.drain`);
* heartbeats: a timer pings a quiet connection and gives up on a silent
  broker;
* a connection lost (not closed by :meth:`AsyncLink.close` or
  :meth:`AsyncLink.abort`) runs, as a task, what :meth:`AsyncLink.when_lost` gave.

Everything belongs to the event loop that made it: not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final, TypeVar

from chute.client.aio_channels import open_transport
from chute.client.correlation import held_longer, unanswered
from chute.client.outgoing import SendFields, contents_of
from chute.client.protocol import ClientProtocol, Progress
from chute.client.received import LinkAcks, Received
from chute.client.requests import Pending, Request
from chute.client.sessions import ConsumerOptions
from chute.client.tls import describe
from chute.client.url import TCP, BrokerUrl
from chute.errors import ConnectError, RequestTimeout
from chute.message import Message
from chute.protocol.packets import Connected, Packet

T = TypeVar("T")

HIGH_WATER: Final = 1 << 20
"""Bytes of queued output past which a sender writes and waits for the transport."""
CLOSE_TIMEOUT: Final = 5.0


async def pause(seconds: float) -> None:
    """Wait ``seconds`` (between rounds of connect attempts)."""
    await asyncio.sleep(seconds)


async def open_link(target: BrokerUrl, limit: float, context: ssl.SSLContext | None) -> AsyncLink:
    """A connection to ``target`` (TLS with ``context`` for ``chutes://``, ``wss://`` and
    ``https://``; a WebSocket or plain requests
    for ``ws(s)://`` and ``http(s)://``: :mod:`chute.client.aio_channels`), not yet
    handshaken; ``limit`` seconds for connecting, and
    for every request later.

    Raises:
        ConnectError: cannot reach the broker, or the TLS handshake failed.
    """
    loop = asyncio.get_running_loop()
    link = AsyncLink(limit)
    if target.transport != TCP:
        await open_transport(target, link, limit, context)
        return link
    try:
        async with asyncio.timeout(limit):
            await loop.create_connection(
                lambda: link,
                target.host,
                target.port,
                ssl=context,
                server_hostname=target.host if context is not None else None,
            )
    except ssl.SSLError as exc:
        raise ConnectError(f"TLS handshake with {target} failed: {describe(exc)}") from None
    except (OSError, TimeoutError) as exc:
        raise ConnectError(f"cannot connect to {target}: {exc or 'timed out'}") from None
    return link


class AsyncLink(asyncio.Protocol):
    """A transport, its protocol state and its waiters, for one event loop."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        """Seconds to wait for the answer to a request."""
        self._proto = ClientProtocol()
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._timers: dict[int, tuple[asyncio.Timeout, float]] = {}  # corr -> (its timer, limit)
        self._consumer_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._flush_scheduled = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._heartbeat = 0.0
        self._last_received = self._last_sent = time.monotonic()
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self._on_lost: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._on_lost_task: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        """The connection failed or was closed: every call raises."""
        return self._proto.failure is not None

    @property
    def congested(self) -> bool:
        """The transport is paused, or a megabyte waits: a sender should :meth:`drain`."""
        return self._paused or self._proto.outbox_size >= HIGH_WATER

    async def handshake(
        self, client_id: str | None, login: str | None, passcode: str | None, heartbeat: float
    ) -> Connected:
        """CONNECT and await the broker's answer; start heartbeats if agreed.

        Raises:
            ConnectError, AuthenticationFailed, RequestTimeout: refused or unanswered.
        """
        request = self._proto.connect(client_id, login, passcode, int(heartbeat * 1000))
        connected = await self.call(request)
        if connected.heartbeat_ms:
            self._heartbeat = connected.heartbeat_ms / 1000
            self._heartbeat_timer = self._loop.call_later(self._heartbeat / 2, self._beat)
        return connected

    def when_lost(self, then: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``then()`` as a task once, if the connection is lost (the broker went,
        the network failed, heartbeats stopped), not if it is closed or aborted."""
        self._on_lost = then

    # -- requests -------------------------------------------------------------------------

    async def call(self, request: Request[T], *, session: int = 0) -> T:
        """Send ``request`` and return its parsed answer. With ``session``, an error
        deferred to that session is raised first.

        Raises:
            ChuteError: the broker refused it (the error its code names).
            ConnectError: the connection failed. RequestTimeout: no answer in time.
        """
        corr = self._proto.start(request, session)
        return request.parse(await self.wait(corr))

    def start(self, request: Request[T]) -> Pending[T]:
        """Queue ``request`` (written at the end of this loop iteration); :meth:`result`
        takes its answer."""
        corr = self._proto.start(request)
        self._flush_soon()
        return Pending(corr, request)

    async def result(self, pending: Pending[T]) -> T:
        """The parsed answer to a request :meth:`start` queued. Raises as :meth:`call`."""
        return pending.request.parse(await self.wait(pending.corr))

    def forget(self, pending: Pending[Any]) -> None:
        """Give up on a request :meth:`start` queued: its answer is dropped."""
        self._proto.forget(pending.corr)

    async def wait(self, corr: int, limit: float | None = None) -> Packet:
        """Write what is queued, then wait for the answer to request ``corr`` (at most
        ``limit`` seconds, the link's timeout by default).

        Raises:
            ChuteError: the broker answered with an error.
            ConnectError: the connection failed. RequestTimeout: no answer in time.
        """
        result = self._proto.result(corr)
        if result is not None:  # answered already (a request left in a confirm window)
            return result
        fut = self._loop.create_future()
        self._waiters[corr] = fut
        self.flush()
        limit = self.timeout if limit is None else limit
        started = self._loop.time()
        try:
            if self._proto.failure is None:
                async with asyncio.timeout(limit) as timer:
                    self._timers[corr] = (timer, limit)
                    self._held(corr)  # the broker may have said so before this wait
                    await fut
        except TimeoutError:
            held = self._proto.held(corr)
            waited = round(self._loop.time() - started, 1)
            raise unanswered(waited, held[1] if held else None) from None
        finally:
            self._timers.pop(corr, None)
            if self._waiters.pop(corr, None) is not None:
                self._proto.forget(corr)
        result = self._proto.result(corr)
        if result is None:  # pragma: no cover - woken without a result: a driver bug
            raise ConnectError("woken without an answer")
        return result

    def flush(self) -> None:
        """Write what is queued now."""
        self._flush_scheduled = False
        data = self._proto.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)
            self._last_sent = time.monotonic()

    async def drain(self) -> None:
        """Write now; wait while the transport is paused (flow control)."""
        self.flush()
        await asyncio.sleep(0)  # let the loop read what the broker sent meanwhile
        while self._paused and self._proto.failure is None:
            fut = self._loop.create_future()
            self._drain_waiters.append(fut)
            await fut

    # -- sessions -------------------------------------------------------------------------

    def open_session(self, ack: str, transacted: bool, producer: str | None = None) -> int:
        """Open a session (one-way; ``producer`` as :meth:`ClientProtocol.open_session`);
        its id. Raises ValueError, ConnectError."""
        session_id = self._proto.open_session(ack, transacted, producer)
        self._flush_soon()
        return session_id

    async def close_session(self, session_id: int) -> None:
        """Close the session and its consumers (waking their receivers); quiet if the
        connection is gone."""
        consumers = self._proto.sessions.session_consumers(session_id)
        corr = self._proto.close_session(session_id)
        for consumer_id in consumers:
            self._wake_consumer(consumer_id)
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                await self.wait(corr)

    def send(
        self,
        session_id: int,
        address: str,
        body: bytes | str,
        options: SendFields,
        windowed: bool,
    ) -> int:
        """Queue a SEND (see :meth:`ClientProtocol.send`); the correlation id to wait for,
        or 0 for a one-way send. What is not awaited at once (one-way, or left in a
        confirm window) is written at the end of this loop iteration."""
        corr = self._proto.send(session_id, address, body, options)
        if (not corr or windowed) and not self._flush_scheduled:
            self._flush_soon()
        return corr

    def send_kept(
        self, session_id: int, address: str, body: bytes | str, options: SendFields
    ) -> tuple[int, bytes]:
        """:meth:`send` of a request left in a confirm window, and its packet (to
        :meth:`resend` if the connection is lost before it is confirmed)."""
        corr = self._proto.send(session_id, address, body, options)
        if not self._flush_scheduled:
            self._flush_soon()
        return corr, self._proto.last_packet

    def resend(self, session_id: int, packet: bytes) -> int:
        """Queue ``packet`` again as a new request of ``session_id`` (see
        :meth:`ClientProtocol.resend`); its correlation id."""
        corr = self._proto.resend(session_id, packet)
        if not self._flush_scheduled:
            self._flush_soon()
        return corr

    async def send_many(
        self, session_id: int, address: str, messages: Iterable[bytes | str | Message], ttl: int
    ) -> list[tuple[int, bytes]]:
        """Queue SEND_MANY packets for ``messages`` (see :func:`contents_of`); the
        correlation ids to wait for, each with its packet (none in a transacted
        session). Each packet is written as it is made, waiting while the transport is
        congested."""
        corrs: list[tuple[int, bytes]] = []
        for contents in contents_of(messages):
            corr = self._proto.send_many(session_id, address, contents, ttl)
            if corr:
                corrs.append((corr, self._proto.last_packet))
            if not self._flush_scheduled:
                self._flush_soon()
            if self.congested:
                await self.drain()
        return corrs

    async def send_many_framed(
        self, session_id: int, address: str, count: int, framed: bytes | memoryview, ttl: int
    ) -> list[tuple[int, bytes]]:
        """Queue one SEND_MANY of ``count`` framed content blocks (see
        :meth:`ClientProtocol.send_many_framed`); as :meth:`send_many`."""
        corr = self._proto.send_many_framed(session_id, address, count, framed, ttl)
        sent = [(corr, self._proto.last_packet)] if corr else []
        if not self._flush_scheduled:
            self._flush_soon()
        if self.congested:
            await self.drain()
        return sent

    def commit(self, session_id: int) -> int:
        """Queue COMMIT; the correlation id to wait for. Raises TransactionError."""
        return self._proto.commit(session_id)

    def rollback(self, session_id: int) -> int:
        return self._proto.rollback(session_id)

    def prepare(self, session_id: int, xid: str) -> int:
        return self._proto.prepare(session_id, xid)

    # -- consumers ------------------------------------------------------------------------

    async def open_consumer(self, session_id: int, address: str, options: ConsumerOptions) -> int:
        """Open a consumer (``options`` as :meth:`ClientProtocol.open_consumer`) and wait
        until the broker has it; its id.

        Raises:
            ValueError: bad options. ChuteError: refused by the broker.
        """
        consumer_id, corr = self._proto.open_consumer(session_id, address, options)
        self._proto.bind(consumer_id, LinkAcks(self, consumer_id))
        try:
            await self.wait(corr)
        except BaseException:
            self._proto.close_consumer(consumer_id)
            self._flush_soon()
            raise
        return consumer_id

    async def close_consumer(self, consumer_id: int) -> None:
        """Close the consumer (waking its receivers); quiet if the connection is gone."""
        corr = self._proto.close_consumer(consumer_id)
        self._wake_consumer(consumer_id)
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                await self.wait(corr)

    def consumer_open(self, consumer_id: int) -> bool:
        return self._proto.sessions.is_open(consumer_id)

    async def receive(self, consumer_id: int, within: float | None) -> Received | None:
        """The consumer's next message, or None after ``within`` seconds (None = forever).

        Raises:
            ConsumerError: the consumer is closed. ConnectError: the connection failed.
            ChuteError: the broker reported an error for this consumer or session.
        """
        received = self._proto.sessions.take(consumer_id)
        if received is None:
            deadline = None if within is None else self._loop.time() + within
            received = await self._wait_delivery(consumer_id, deadline)
            if received is None:
                return None
        if self._proto.outbox_size and not self._flush_scheduled:
            self._flush_soon()
        return received

    async def _wait_delivery(self, consumer_id: int, deadline: float | None) -> Received | None:
        sessions = self._proto.sessions
        sessions.before_wait(consumer_id)
        self.flush()
        while True:
            fut = self._loop.create_future()
            self._consumer_waiters.setdefault(consumer_id, []).append(fut)
            try:
                async with asyncio.timeout_at(deadline):
                    await fut
            except TimeoutError:
                return None
            finally:
                waiters = self._consumer_waiters.get(consumer_id)
                if waiters is not None and fut in waiters:
                    waiters.remove(fut)
            received = sessions.take(consumer_id)
            if received is not None:
                return received

    def ack(self, consumer_id: int, seq: int) -> None:
        """Queue the ack of delivery ``seq`` (written at the end of this loop iteration).

        Raises:
            ConnectError: the connection failed. ConsumerError: the consumer is closed.
        """
        self._proto.sessions.ack(consumer_id, seq)
        self._flush_soon()

    def nack(self, consumer_id: int, seq: int, requeue: bool) -> None:
        """Queue the refusal of delivery ``seq``. Raises as :meth:`ack`."""
        self._proto.sessions.nack(consumer_id, seq, requeue)
        self._flush_soon()

    # -- closing --------------------------------------------------------------------------

    async def close(self) -> None:
        """Close gracefully (acks and credit owed, then DISCONNECT); never raises for a
        connection already gone."""
        self._on_lost = None
        try:
            if self._proto.failure is None:
                corr = self._proto.disconnect()
                with contextlib.suppress(ConnectError, RequestTimeout):
                    await self.wait(corr, min(self.timeout, CLOSE_TIMEOUT))
        finally:
            self.abort()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(self._lost)

    def abort(self) -> None:
        """Fail what still waits and close the transport at once."""
        self._on_lost = None
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
        if self._proto.failure is None:
            self._progress(self._proto.fail(ConnectError("the connection is closed")))
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment] # create_connection: a Transport

    def data_received(self, data: bytes) -> None:
        self._progress(self._proto.receive_data(data))

    def eof_received(self) -> bool | None:
        self.data_received(b"")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError):  # e.g. the broker's alert after a TLS 1.3 handshake
            exc = OSError(describe(exc))
        self._progress(self._proto.connection_lost(exc))
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._resume()

    # -- plumbing -------------------------------------------------------------------------

    def _progress(self, progress: Progress) -> None:
        self._last_received = time.monotonic()
        for corr in progress.completed:
            fut = self._waiters.pop(corr, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        for consumer_id in progress.consumers:
            self._wake_consumer(consumer_id)
        for corr in progress.held:
            self._held(corr)
        if progress.failed:
            self._wake_all()
            if self._transport is not None:
                self._transport.close()
            then, self._on_lost = self._on_lost, None
            if then is not None:
                self._on_lost_task = self._loop.create_task(then())
        elif self._proto.outbox_size:
            self._flush_soon()

    def _held(self, corr: int) -> None:
        """The broker holds request ``corr``: its waiter waits as long as the broker may
        hold it, then its own timeout (:func:`held_longer`), from now."""
        timer = self._timers.get(corr)
        held = self._proto.held(corr)
        if timer is None or held is None:
            return
        when = self._loop.time() + held_longer(timer[1], held[1])
        current = timer[0].when()
        if current is not None and current < when:
            timer[0].reschedule(when)

    def _wake_consumer(self, consumer_id: int) -> None:
        for fut in self._consumer_waiters.pop(consumer_id, ()):
            if not fut.done():
                fut.set_result(None)

    def _wake_all(self) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()
        for consumer_id in list(self._consumer_waiters):
            self._wake_consumer(consumer_id)
        self._resume()

    def _resume(self) -> None:
        self._paused = False
        for fut in self._drain_waiters:
            if not fut.done():
                fut.set_result(None)
        self._drain_waiters.clear()

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def _beat(self) -> None:
        now = time.monotonic()
        if self._proto.failure is not None:
            return
        if now - self._last_received > 2 * self._heartbeat:
            self._progress(
                self._proto.fail(ConnectError("the broker stopped answering (heartbeat timeout)"))
            )
            return
        if now - self._last_sent >= self._heartbeat / 2:
            self._proto.ping()
            self.flush()
        self._heartbeat_timer = self._loop.call_later(self._heartbeat / 2, self._beat)
