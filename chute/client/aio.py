"""The asyncio client: a thin driver of :class:`ClientProtocol` over an asyncio transport.

Output is batched per event-loop iteration: operations queue packets and
schedule one write with ``call_soon``; a request writes at once and awaits a
future completed by ``data_received``. A send that finds a megabyte queued, or
the transport paused, writes and waits for the transport to drain (flow
control). Objects belong to the event loop that made them; they are not
thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Generator, Mapping
from types import TracebackType
from typing import Any, Final, Self

from chute.client.protocol import ClientProtocol, Progress
from chute.client.received import Received
from chute.client.tls import client_context
from chute.client.url import parse_url
from chute.errors import ConnectError, ConsumerError, RequestTimeout
from chute.message import DEFAULT_PRIORITY, BodyKind, Message
from chute.protocol.packets import Packet

HIGH_WATER: Final = 1 << 20
CLOSE_TIMEOUT: Final = 5.0


class _ConnectAttempt:
    """What :func:`connect` returns: await it, or use it as ``async with``."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._conn: Connection | None = None

    def __await__(self) -> Generator[Any, None, Connection]:
        conn: Connection = yield from self._make().__await__()
        return conn

    async def __aenter__(self) -> Connection:
        self._conn = await self._make()
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()


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
) -> _ConnectAttempt:
    """Connect to a broker: ``conn = await connect(...)`` or ``async with connect(...) as conn``.

    Arguments and errors as :func:`chute.connect`.
    """

    async def make() -> Connection:
        target = parse_url(url)
        loop = asyncio.get_running_loop()
        proto = ClientProtocol()
        context = client_context(tls_ca, verify=tls_verify) if target.tls else None
        try:
            async with asyncio.timeout(timeout):
                _, adapter = await loop.create_connection(
                    lambda: _Adapter(proto),
                    target.host,
                    target.port,
                    ssl=context,
                    server_hostname=target.host if context is not None else None,
                )
        except ssl.SSLError as exc:
            raise ConnectError(f"TLS handshake with {target} failed: {exc.reason or exc}") from None
        except (OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {target}: {exc or 'timed out'}") from None
        conn = adapter.connection(timeout)
        try:
            await conn._handshake(client_id, login, passcode, heartbeat)
        except BaseException:
            conn._abort()
            raise
        return conn

    return _ConnectAttempt(make)


class _Adapter(asyncio.Protocol):
    def __init__(self, proto: ClientProtocol) -> None:
        self.proto = proto
        self.conn: Connection | None = None
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] # create_connection: a Transport

    def connection(self, timeout: float) -> Connection:
        if self.transport is None:  # pragma: no cover - asyncio calls connection_made first
            raise ConnectError("no transport")
        self.conn = Connection(self, self.transport, self.proto, timeout)
        return self.conn

    def data_received(self, data: bytes) -> None:
        progress = self.proto.receive_data(data)
        if self.conn is not None:
            self.conn._progress(progress)

    def eof_received(self) -> bool | None:
        self.data_received(b"")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        progress = self.proto.connection_lost(exc)
        if self.conn is not None:
            self.conn._progress(progress)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn._paused = True

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn._resume()


class Connection:
    """A connection to a broker, for one event loop. Use :func:`connect` to make one."""

    def __init__(
        self,
        adapter: _Adapter,
        transport: asyncio.Transport,
        proto: ClientProtocol,
        timeout: float,
    ) -> None:
        self.timeout = timeout
        self.connection_id = ""
        self._adapter = adapter
        self._transport = transport
        self._proto = proto
        self._loop = asyncio.get_running_loop()
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._consumer_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._flush_scheduled = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._heartbeat = 0.0
        self._last_received = self._last_sent = time.monotonic()
        self._heartbeat_timer: asyncio.TimerHandle | None = None

    async def _handshake(
        self, client_id: str | None, login: str | None, passcode: str | None, heartbeat: float
    ) -> None:
        corr = self._proto.connect(client_id, login, passcode, int(heartbeat * 1000))
        connected = self._proto.finish_connect(await self._call(corr))
        self.connection_id = connected.connection_id
        if connected.heartbeat_ms:
            self._heartbeat = connected.heartbeat_ms / 1000
            self._heartbeat_timer = self._loop.call_later(self._heartbeat / 2, self._beat)

    # -- plumbing -------------------------------------------------------------------

    def _progress(self, progress: Progress) -> None:
        self._last_received = time.monotonic()
        for corr in progress.completed:
            fut = self._waiters.pop(corr, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        for consumer_id in progress.consumers:
            self._wake_consumer(consumer_id)
        if progress.failed:
            self._wake_all()
            self._transport.close()
        elif self._proto.outbox_size:
            self._flush_soon()

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

    def _flush(self) -> None:
        self._flush_scheduled = False
        data = self._proto.data_to_send()
        if data and not self._transport.is_closing():
            self._transport.write(data)
            self._last_sent = time.monotonic()

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    async def _drain(self) -> None:
        """Write now; wait while the transport is paused (flow control)."""
        self._flush()
        await asyncio.sleep(0)  # let the loop read what the broker sent meanwhile
        while self._paused and self._proto.failure is None:
            fut = self._loop.create_future()
            self._drain_waiters.append(fut)
            await fut

    async def _call(self, corr: int, limit: float | None = None) -> Packet:
        """Write what is queued, then wait for the answer to request ``corr``."""
        fut = self._loop.create_future()
        self._waiters[corr] = fut
        self._flush()
        limit = self.timeout if limit is None else limit
        try:
            if self._proto.failure is None:
                async with asyncio.timeout(limit):
                    await fut
        except TimeoutError:
            raise RequestTimeout(f"no answer from the broker within {limit:g} s") from None
        finally:
            if self._waiters.pop(corr, None) is not None:
                self._proto.forget(corr)
        result = self._proto.result(corr)
        if result is None:  # pragma: no cover - woken without a result: a driver bug
            raise ConnectError("woken without an answer")
        return result

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
            self._flush()
        self._heartbeat_timer = self._loop.call_later(self._heartbeat / 2, self._beat)

    def _abort(self) -> None:
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
        if self._proto.failure is None:
            self._progress(self._proto.fail(ConnectError("the connection is closed")))
        self._transport.close()

    # -- API ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._proto.failure is not None

    def session(self, ack: str = "auto", transacted: bool = False) -> Session:
        """Open a session (no round trip). See :meth:`chute.Connection.session`."""
        session_id = self._proto.open_session(ack, transacted)
        self._flush_soon()
        return Session(self, session_id)

    async def stat(self) -> dict[str, Any]:
        """The broker's statistics (a JSON document)."""
        packet = await self._call(self._proto.stat())
        result: dict[str, Any] = json.loads(self._proto.stat_result(packet))
        return result

    async def prepared(self) -> list[str]:
        """The xids of every prepared (two-phase) transaction waiting in the broker."""
        return self._proto.prepared_result(await self._call(self._proto.prepared()))

    async def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (from any connection, also after a restart)."""
        await self._call(self._proto.commit_prepared(xid))

    async def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction."""
        await self._call(self._proto.rollback_prepared(xid))

    async def close(self) -> None:
        """Close gracefully (acks and credit owed, then DISCONNECT); never raises for a
        connection already gone."""
        try:
            if self._proto.failure is None:
                corr = self._proto.disconnect()
                with contextlib.suppress(ConnectError, RequestTimeout):
                    await self._call(corr, min(self.timeout, CLOSE_TIMEOUT))
        finally:
            self._abort()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(self._adapter.lost)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Session:
    """An asyncio session. See :class:`chute.client.blocking.Session` for the semantics."""

    def __init__(self, connection: Connection, session_id: int) -> None:
        self.connection = connection
        self.id = session_id

    async def send(
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
        """Send a message; see :meth:`chute.client.blocking.Session.send`."""
        conn = self.connection
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
        if corr:
            await conn._call(corr)
        elif conn._paused or proto.outbox_size >= HIGH_WATER:
            await conn._drain()
        elif not conn._flush_scheduled:
            conn._flush_soon()

    async def consumer(
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
        """Open a consumer; see :meth:`chute.client.blocking.Session.consumer`."""
        conn = self.connection
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
        conn._proto.bind(consumer_id, consumer)
        try:
            await conn._call(corr)
        except BaseException:
            conn._proto.close_consumer(consumer_id)
            conn._flush_soon()
            raise
        return consumer

    async def _request(self, corr: int) -> Packet:
        return await self.connection._call(corr)

    async def commit(self) -> None:
        await self._request(self.connection._proto.commit(self.id))

    async def rollback(self) -> None:
        await self._request(self.connection._proto.rollback(self.id))

    async def prepare(self, xid: str) -> None:
        """Prepare the transaction under ``xid`` (two-phase) and start a new one."""
        await self._request(self.connection._proto.prepare(self.id, xid))

    async def browse(
        self, address: str, selector: str | None = None, limit: int = 0
    ) -> list[Message]:
        proto = self.connection._proto
        proto.check_session(self.id)
        return proto.browse_result(await self._request(proto.browse(address, selector, limit)))

    async def temporary_queue(self) -> str:
        proto = self.connection._proto
        proto.check_session(self.id)
        return proto.temporary_queue_result(await self._request(proto.temporary_queue()))

    async def unsubscribe(self, name: str) -> None:
        proto = self.connection._proto
        proto.check_session(self.id)
        await self._request(proto.unsubscribe(name))

    async def callback(
        self, topic: str, name: str, forward_to: str, selector: str | None = None
    ) -> None:
        proto = self.connection._proto
        proto.check_session(self.id)
        await self._request(proto.callback(topic, name, forward_to, selector))

    async def close(self) -> None:
        conn = self.connection
        consumers = conn._proto.session_consumers(self.id)
        corr = conn._proto.close_session(self.id)
        for consumer_id in consumers:
            conn._wake_consumer(consumer_id)
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                await conn._call(corr)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Consumer:
    """An asyncio consumer; ``async for message in consumer`` receives until closed."""

    def __init__(self, session: Session, consumer_id: int) -> None:
        self.session = session
        self.id = consumer_id
        self._conn = session.connection

    async def receive(self, timeout: float | None = None) -> Received | None:  # noqa: ASYNC109 - the API's shape, as the blocking client's
        """The next message, or None after ``timeout`` seconds (None = wait forever).

        Raises: as :meth:`chute.client.blocking.Consumer.receive`.
        """
        conn = self._conn
        proto = conn._proto
        received = proto.take(self.id)
        if received is None:
            received = await self._wait(None if timeout is None else conn._loop.time() + timeout)
            if received is None:
                return None
        if proto.outbox_size and not conn._flush_scheduled:
            conn._flush_soon()
        return received

    async def _wait(self, deadline: float | None) -> Received | None:
        conn = self._conn
        proto = conn._proto
        proto.before_wait(self.id)
        conn._flush()
        while True:
            fut = conn._loop.create_future()
            conn._consumer_waiters.setdefault(self.id, []).append(fut)
            try:
                async with asyncio.timeout_at(deadline):
                    await fut
            except TimeoutError:
                return None
            finally:
                waiters = conn._consumer_waiters.get(self.id)
                if waiters is not None and fut in waiters:
                    waiters.remove(fut)
            received = proto.take(self.id)
            if received is not None:
                return received

    def __aiter__(self) -> AsyncIterator[Received]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Received]:
        while True:
            try:
                message = await self.receive()
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
        self._conn._proto.ack(self.id, seq)
        self._conn._flush_soon()

    def _nack(self, seq: int, requeue: bool) -> None:
        self._conn._proto.nack(self.id, seq, requeue)
        self._conn._flush_soon()

    async def close(self) -> None:
        conn = self._conn
        corr = conn._proto.close_consumer(self.id)
        conn._wake_consumer(self.id)
        if corr:
            with contextlib.suppress(ConnectError, RequestTimeout):
                await conn._call(corr)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = ["Connection", "Consumer", "Received", "Session", "connect"]
