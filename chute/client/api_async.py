"""The client API's asyncio mirror: :class:`AsyncConnection`, :class:`AsyncSession`
and :class:`AsyncConsumer`, which :mod:`chute.client.aio_client` implements.

The same methods as :mod:`chute.client.api`'s blocking protocols, those that
talk to the broker as coroutines; their arguments, results and errors are
documented there once. :mod:`chute.client.api` re-exports these three.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from chute.client.received import Received
from chute.client.requests import CursorPage, Page
from chute.message import DEFAULT_PRIORITY, BodyKind, Message


@runtime_checkable
class AsyncConsumer(Protocol):
    """:class:`Consumer` for asyncio: ``await receive()``, ``async for``."""

    @property
    def id(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    async def receive(self, timeout: float | None = None) -> Received | None:  # noqa: ASYNC109 - the API's shape
        """As :meth:`Consumer.receive`."""
        ...

    def __aiter__(self) -> AsyncIterator[Received]: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class AsyncSession(Protocol):
    """:class:`Session` for asyncio; see it for every method."""

    @property
    def id(self) -> int: ...

    @property
    def confirm_window(self) -> int: ...

    @property
    def unconfirmed(self) -> int: ...

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
    ) -> None: ...

    async def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None: ...

    async def flush(self) -> None: ...

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
        offset: str | int | None = None,
    ) -> AsyncConsumer: ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...

    async def prepare(self, xid: str) -> None: ...

    async def browse(
        self, address: str, selector: str | None = None, limit: int = 0
    ) -> list[Message]: ...

    def iter_browse(
        self,
        address: str,
        selector: str | None = None,
        *,
        page_messages: int = 0,
        page_bytes: int = 0,
    ) -> AsyncIterator[Message]: ...

    async def temporary_queue(self) -> str: ...

    async def unsubscribe(self, name: str) -> None: ...

    async def callback(
        self, topic: str, name: str, forward_to: str, selector: str | None = None
    ) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class AsyncConnection(Protocol):
    """:class:`Connection` for asyncio; see it for every method."""

    @property
    def connection_id(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> AsyncSession: ...

    async def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]: ...

    async def delete(self, address: str, *, force: bool = False) -> int: ...

    async def purge(self, address: str) -> int: ...

    async def create(self, address: str) -> bool: ...

    async def move(
        self,
        source: str,
        target: str,
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> int: ...

    async def retry_dead_letters(
        self,
        source: str = "queue:__sys__deadLetter",
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> dict[str, int]: ...

    async def prepared(self) -> list[str]: ...

    async def commit_prepared(self, xid: str) -> None: ...

    async def rollback_prepared(self, xid: str) -> None: ...

    async def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool: ...

    async def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]: ...

    async def cursor_fetch(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> CursorPage: ...

    def cursor_read(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> AsyncIterator[Page]: ...

    async def cursor_ack(self, address: str, cursor: str, end: int) -> None: ...

    async def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


__all__ = ["AsyncConnection", "AsyncConsumer", "AsyncSession"]
