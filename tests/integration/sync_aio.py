"""The asyncio client behind the blocking API, so one test body drives every client.

An event loop runs on a thread of its own; each call of the facade runs the
asyncio client's method on that loop and waits for its result. Everything the
asyncio client does still happens on its loop (its objects are not
thread-safe): coroutines are created here and run there, plain methods
(``session()``, ``ack()``) are called there. mypy checks that the facade is a
:class:`chute.client.api.Connection`, so the suite's bodies type-check once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import (
    AsyncGenerator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, Self, TypeVar

import pytest
from _pytest.fixtures import FixtureFunctionDefinition

import chute
from chute import aio
from chute.client.api import Page
from chute.client.received import Received
from chute.client.requests import CursorPage
from chute.message import DEFAULT_PRIORITY, BodyKind, Message

T = TypeVar("T")
WAIT = 30.0
"""Seconds any one call may take before the test fails."""


class LoopThread:
    """An event loop on its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop; its result (or its exception) here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` on the loop's thread; its result (or its exception) here."""

        async def on_loop() -> T:
            return fn()

        return self.run(on_loop())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT)
        self.loop.close()


def connect(runner: LoopThread, url: str, **options: Any) -> SyncConnection:
    """``chute.aio.connect(url, **options)`` on the runner's loop, behind the facade."""

    async def make() -> aio.Connection:
        return await aio.connect(url, **options)

    return SyncConnection(runner, runner.run(make()))


Connect = Callable[..., chute.Connection]
"""Opens a connection (``chute.connect``'s arguments) with the client a test is for."""

CLIENTS = ("blocking", "asyncio")


def connect_fixture(*, timeout: float) -> FixtureFunctionDefinition:
    """A ``connect`` fixture (:data:`Connect`) for a test module, which runs each of its
    tests once per client in :data:`CLIENTS`: ``connect = sync_aio.connect_fixture(...)``.
    A connection's ``timeout`` is ``timeout`` unless the test gives one; every
    connection a test opened is closed at its end."""

    @pytest.fixture(params=CLIENTS, name="connect")
    def fixture(request: pytest.FixtureRequest) -> Iterator[Connect]:
        opened: list[chute.Connection] = []
        runner = LoopThread() if request.param == "asyncio" else None

        def open_one(url: str, **options: Any) -> chute.Connection:
            options.setdefault("timeout", timeout)
            conn: chute.Connection = (
                chute.connect(url, **options) if runner is None else connect(runner, url, **options)
            )
            opened.append(conn)
            return conn

        yield open_one
        for conn in opened:
            conn.close()
        if runner is not None:
            runner.close()

    return fixture


class _LoopAcks:
    """Acks of a message the asyncio client received, made on its loop."""

    def __init__(self, runner: LoopThread, received: Received) -> None:
        self._runner = runner
        self._received = received

    def ack(self, seq: int) -> None:
        self._runner.call(self._received.ack)

    def nack(self, seq: int, requeue: bool) -> None:
        self._runner.call(lambda: self._received.nack(requeue))


class SyncConsumer:
    def __init__(self, runner: LoopThread, consumer: aio.Consumer) -> None:
        self._runner = runner
        self._consumer = consumer

    @property
    def id(self) -> int:
        return self._consumer.id

    @property
    def closed(self) -> bool:
        return self._consumer.closed

    def receive(self, timeout: float | None = None) -> Received | None:
        received = self._runner.run(self._consumer.receive(timeout))
        if received is None:
            return None
        return Received(received.message, received.seq, _LoopAcks(self._runner, received))

    def __iter__(self) -> Iterator[Received]:
        while not self.closed:
            message = self.receive(WAIT)
            if message is not None:
                yield message

    def close(self) -> None:
        self._runner.run(self._consumer.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SyncSession:
    def __init__(self, runner: LoopThread, session: aio.Session) -> None:
        self._runner = runner
        self._session = session

    @property
    def id(self) -> int:
        return self._session.id

    @property
    def confirm_window(self) -> int:
        return self._session.confirm_window

    @property
    def unconfirmed(self) -> int:
        return self._session.unconfirmed

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
        key: str | None = None,
    ) -> None:
        self._runner.run(
            self._session.send(
                address,
                body,
                priority=priority,
                ttl=ttl,
                properties=properties,
                persistent=persistent,
                correlation_id=correlation_id,
                reply_to=reply_to,
                type=type,
                id=id,
                kind=kind,
                key=key,
            )
        )

    def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None:
        self._runner.run(self._session.send_many(address, messages, ttl=ttl))

    def flush(self) -> None:
        self._runner.run(self._session.flush())

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
        offset: str | int | None = None,
    ) -> SyncConsumer:
        consumer = self._runner.run(
            self._session.consumer(
                address,
                selector=selector,
                prefetch=prefetch,
                exclusive=exclusive,
                subscription=subscription,
                durable=durable,
                shared=shared,
                offset=offset,
            )
        )
        return SyncConsumer(self._runner, consumer)

    def commit(self) -> None:
        self._runner.run(self._session.commit())

    def rollback(self) -> None:
        self._runner.run(self._session.rollback())

    def prepare(self, xid: str) -> None:
        self._runner.run(self._session.prepare(xid))

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Message]:
        return self._runner.run(self._session.browse(address, selector, limit))

    def iter_browse(
        self,
        address: str,
        selector: str | None = None,
        *,
        page_messages: int = 0,
        page_bytes: int = 0,
    ) -> Iterator[Message]:
        """Each message taken from the asyncio iterator on the loop as this one is
        advanced: the walk streams here as it does there."""
        walk = self._session.iter_browse(
            address, selector, page_messages=page_messages, page_bytes=page_bytes
        )

        async def step() -> Message | None:
            return await anext(walk, None)

        try:
            while (message := self._runner.run(step())) is not None:
                yield message
        finally:
            if isinstance(walk, AsyncGenerator):  # given up: let it forget its request
                self._runner.run(walk.aclose())

    def temporary_queue(self) -> str:
        return self._runner.run(self._session.temporary_queue())

    def unsubscribe(self, name: str) -> None:
        self._runner.run(self._session.unsubscribe(name))

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        self._runner.run(self._session.callback(topic, name, forward_to, selector))

    def close(self) -> None:
        self._runner.run(self._session.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SyncConnection:
    def __init__(self, runner: LoopThread, conn: aio.Connection) -> None:
        self._runner = runner
        self._conn = conn

    @property
    def connection_id(self) -> str:
        return self._conn.connection_id

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def node(self) -> str:
        return self._conn.node

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> SyncSession:
        session = self._runner.call(
            lambda: self._conn.session(ack, transacted, confirm_window=confirm_window)
        )
        return SyncSession(self._runner, session)

    def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]:
        return self._runner.run(self._conn.stat(pattern, page_size=page_size))

    def delete(self, address: str, *, force: bool = False) -> int:
        return self._runner.run(self._conn.delete(address, force=force))

    def purge(self, address: str) -> int:
        return self._runner.run(self._conn.purge(address))

    def create(self, address: str) -> bool:
        return self._runner.run(self._conn.create(address))

    def move(
        self,
        source: str,
        target: str,
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> int:
        return self._runner.run(
            self._conn.move(source, target, selector=selector, seqs=seqs, limit=limit)
        )

    def retry_dead_letters(
        self,
        source: str = "queue:__sys__deadLetter",
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> dict[str, int]:
        return self._runner.run(
            self._conn.retry_dead_letters(source, selector=selector, seqs=seqs, limit=limit)
        )

    def prepared(self) -> list[str]:
        return self._runner.run(self._conn.prepared())

    def commit_prepared(self, xid: str) -> None:
        self._runner.run(self._conn.commit_prepared(xid))

    def rollback_prepared(self, xid: str) -> None:
        self._runner.run(self._conn.rollback_prepared(xid))

    def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool:
        return self._runner.run(self._conn.commit_batch(sink, batch, xids, keep=keep))

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        return self._runner.run(
            self._conn.cursor_open(address, cursor, selector=selector, lease_ms=lease_ms)
        )

    def cursor_fetch(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> CursorPage:
        return self._runner.run(
            self._conn.cursor_fetch(
                address, cursor, start, end, max_messages=max_messages, max_bytes=max_bytes
            )
        )

    def cursor_read(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[Page]:
        async def pages() -> list[Page]:
            read = self._conn.cursor_read(
                address, cursor, start, end, page_messages=page_messages, page_bytes=page_bytes
            )
            return [page async for page in read]

        return iter(self._runner.run(pages()))

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        self._runner.run(self._conn.cursor_ack(address, cursor, end))

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        self._runner.run(self._conn.cursor_close(address, cursor, delete=delete))

    def close(self) -> None:
        self._runner.run(self._conn.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
