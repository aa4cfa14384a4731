"""chute's asyncio client: the same API as :mod:`chute`, with ``await``.

async with chute.aio.connect("chute://127.0.0.1:5445") as conn:
    async with conn.session(ack="client") as s:
        await s.send("queue:orders", b"...")
        c = await s.consumer("queue:orders")
        m = await c.receive(timeout=1.0)
        m.ack()

``Connection``, ``Session`` and ``Consumer`` here are the asyncio client's
classes (:class:`~chute.client.aio_client.AioConnection` and its siblings); the
API they implement is :class:`chute.client.api.AsyncConnection` and its siblings.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any

from chute.client.aio_client import AioConnection, AioConsumer, AioSession, open_connection
from chute.client.received import Received

Connection = AioConnection
Session = AioSession
Consumer = AioConsumer


class _ConnectAttempt:
    """What :func:`connect` returns: await it, or use it as ``async with``."""

    def __init__(self, make: Callable[[], Coroutine[Any, Any, AioConnection]]) -> None:
        self._make = make
        self._conn: AioConnection | None = None

    def __await__(self) -> Generator[Any, None, AioConnection]:
        return self._make().__await__()

    async def __aenter__(self) -> AioConnection:
        self._conn = await self._make()
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.__aexit__(exc_type, exc, tb)


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
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> _ConnectAttempt:
    """Connect to a broker: ``conn = await connect(...)`` or ``async with connect(...) as conn``.

    Arguments and errors as :func:`chute.connect` (a broker URL only).
    """
    return _ConnectAttempt(
        lambda: open_connection(
            url,
            client_id=client_id,
            login=login,
            passcode=passcode,
            timeout=timeout,
            heartbeat=heartbeat,
            tls_ca=tls_ca,
            tls_verify=tls_verify,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
    )


__all__ = ["Connection", "Consumer", "Received", "Session", "connect"]
