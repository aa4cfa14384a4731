"""An in-memory transport: drive a connection driver without a socket.

A test double, for the unit tests and the CPU benchmarks (``bench/server_path.py``,
``bench/stomp_path.py``): feed a driver bytes with ``data_received`` and read
what it wrote from :attr:`MemoryTransport.written`. Just enough of
:class:`asyncio.Transport` for :class:`~chute.server.stream.StreamConnection`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chute.server.stream import StreamConnection


def settle(loop: asyncio.AbstractEventLoop, conn: StreamConnection, iterations: int = 3) -> None:
    """Run ``loop`` until ``conn`` acted on all the input fed to it (it acts in turns,
    :mod:`chute.server.stream`), then ``iterations`` times more for what that
    scheduled (flushes, credit given back, the flushes that causes)."""
    while conn.between_turns:
        loop.run_until_complete(asyncio.sleep(0))
    for _ in range(iterations):
        loop.run_until_complete(asyncio.sleep(0))


class MemoryTransport:
    """Keeps what is written; never closes, never pushes back."""

    def __init__(self, peer: tuple[str, int] = ("127.0.0.1", 1)) -> None:
        self.written: list[bytes] = []
        self.peer = peer

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def take(self) -> bytes:
        """Everything written since the last take."""
        data = b"".join(self.written)
        self.written.clear()
        return data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
