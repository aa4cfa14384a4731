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

import functools
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, ParamSpec

from chute.client.aio_client import AioConnection, AioConsumer, AioSession, open_connection
from chute.client.received import Received

P = ParamSpec("P")
ExcInfo = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
"""What ``__aexit__`` is given: the exception on its way out of the block, if any."""

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

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        if self._conn is not None:
            await self._conn.__aexit__(*exc_info)


def _attempted(
    open_connection: Callable[P, Coroutine[Any, Any, AioConnection]],
) -> Callable[P, _ConnectAttempt]:
    """:func:`open_connection`, its arguments taken as they are (and shown: its
    signature is this one's), made to return a :class:`_ConnectAttempt` instead of a
    coroutine."""

    @functools.wraps(open_connection)
    def connect(*args: P.args, **kwargs: P.kwargs) -> _ConnectAttempt:
        return _ConnectAttempt(lambda: open_connection(*args, **kwargs))

    connect.__name__ = connect.__qualname__ = "connect"
    connect.__doc__ = """Connect to a broker: ``conn = await connect(...)`` or ``async with
    connect(...) as conn``. Arguments and errors as :func:`chute.connect` (a broker URL
    only)."""
    return connect


connect = _attempted(open_connection)

__all__ = ["Connection", "Consumer", "Received", "Session", "connect"]
