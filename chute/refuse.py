"""Refusing a connection so that the client reads why: :func:`refuse`.

A client (stomp.py, the native client, pika) sends its first frame (``CONNECT``,
``Connect``, AMQP's header) before it reads. A refusal written at once can reach it
first; its send then fails on the closed connection, or the socket is reset under
its unread bytes, and the client reports a lost connection, not the reason. So a
refusal waits for the client's first bytes (a silent client is answered after
``wait`` seconds), and the connection closes after the client closed it or after
:data:`LINGER_S`, with what it sent read, so it is never reset over the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

LINGER_S: Final = 5.0  # how long a refused client may take to close once refused
READ: Final = 1 << 16


async def refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refusal: bytes, wait: float
) -> None:
    """Answer ``refusal`` once the client spoke (or after ``wait`` seconds), then close."""
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await reader.read(READ)
        writer.write(refusal)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            while await reader.read(READ):  # what the client sends until it closes
                pass
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()
