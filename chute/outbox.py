"""The writes of a transport made of messages, queued until they go out, with flow control.

A socket's transport writes at once; a WebSocket (aiohttp, either side) and the
native protocol's plain HTTP requests send whole messages, from a task, or when
the peer asks (a poll). :class:`Outbox` is what their ``asyncio.Transport``
faces share: ``write`` queues, the sender takes (:meth:`Outbox.take`) or drains
(:meth:`Outbox.drain`), and the protocol hears ``pause_writing`` past
:data:`HIGH_WATER` bytes queued and ``resume_writing`` once they are under
:data:`LOW_WATER`, as asyncio's own transports tell it.

Used by :mod:`chute.server.websocket`, :mod:`chute.server.tunnel` and
:mod:`chute.client.aio_channels`. One event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

HIGH_WATER: Final = 1 << 20
LOW_WATER: Final = 256 << 10


class Outbox:
    """Bytes written and not yet sent, for one protocol; see the module docstring."""

    __slots__ = ("_paused", "_protocol", "_queue", "closing", "queued", "wake")

    def __init__(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._queue: deque[bytes] = deque()
        self._paused = False
        self.queued = 0
        """Bytes queued."""
        self.closing = False
        """Nothing more is queued; the sender ends once the queue is empty."""
        self.wake = asyncio.Event()
        """Set when there is something to send (or the end to send)."""

    def __bool__(self) -> bool:
        return bool(self._queue)

    def put(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` (a transport's ``write``); nothing once closing."""
        if self.closing or not data:
            return
        chunk = bytes(data)
        self._queue.append(chunk)
        self.queued += len(chunk)
        self.wake.set()
        if not self._paused and self.queued > HIGH_WATER:
            self._paused = True
            self._protocol.pause_writing()

    def close(self) -> None:
        """No more writes: the sender sends what is queued, then ends."""
        self.closing = True
        self.wake.set()

    def clear(self) -> None:
        """Drop what is queued (an abort)."""
        self._queue.clear()
        self.queued = 0

    def take(self, limit: int = 0) -> bytes:
        """What is queued, joined (at most ``limit`` bytes if given, but at least the
        first write whole); tells the protocol when it may write again."""
        queue = self._queue
        if limit <= 0 or len(queue) == 1:
            data = queue[0] if len(queue) == 1 else b"".join(queue)
            queue.clear()
        else:
            parts = [queue.popleft()]
            size = len(parts[0])
            while queue and size + len(queue[0]) <= limit:
                parts.append(queue.popleft())
                size += len(parts[-1])
            data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.sent(len(data))
        return data

    def take_one(self) -> bytes:
        """The oldest write as it was written (where each write is one message)."""
        data = self._queue.popleft()
        self.sent(len(data))
        return data

    def sent(self, size: int) -> None:
        self.queued -= size
        if self._paused and self.queued < LOW_WATER:
            self._paused = False
            self._protocol.resume_writing()

    async def drain(self, send: Callable[[bytes], Awaitable[None]], *, whole: bool) -> None:
        """Send with ``send`` until closed and empty: everything queued in one go
        (``whole``), or each write as its own message."""
        while True:
            while self._queue:
                await send(self.take() if whole else self.take_one())
            if self.closing:
                return
            self.wake.clear()
            await self.wake.wait()
