"""Seed-002 listeners when the store fails its sync: an in-process broker on real sockets.

A failing fsync cannot be caused from outside ``chute serve``, so this file runs
:class:`~chute.server.app.BrokerServer` in the test's event loop over a store
whose sync reports an error on demand (the store's own fault seam).
"""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from chute.config import ListenSettings, ServerConfig
from chute.core.model.store import SyncCallback
from chute.errors import StoreError
from chute.server.app import BrokerServer
from chute.smq.settings import SmqSettings
from chute.store.memory import MemoryStore

from .conftest import free_port

TIMEOUT = 10.0
HOST = "127.0.0.1"


class FailingSyncStore(MemoryStore):
    """A MemoryStore whose sync fails while ``failing`` is set, like a full or broken disk."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def sync(self, callback: SyncCallback) -> None:
        if self.failing:
            callback(StoreError("fdatasync failed: EIO (injected)"))
        else:
            super().sync(callback)


def frame(body: bytes) -> bytes:
    return b"M" + struct.pack(">i", len(body)) + body


async def run_broker(store: FailingSyncStore) -> tuple[BrokerServer, int, int]:
    source, sink = free_port(), free_port()
    config = ServerConfig(
        ListenSettings(port=0, stomp_port=0, http_port=0),
        smq=SmqSettings("queue:faults", source, sink),
    )
    server = BrokerServer(config, store=store)
    await server.start()
    return server, source, sink


def test_a_failed_sync_gets_no_y_and_closes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chute.smq")

    async def main() -> None:
        store = FailingSyncStore()
        server, source_port, sink_port = await run_broker(store)
        try:
            reader, writer = await asyncio.open_connection(HOST, source_port)
            writer.write(frame(b"stored"))
            assert await asyncio.wait_for(reader.readexactly(1), TIMEOUT) == b"Y"
            store.failing = True
            writer.write(frame(b"not stored") + frame(b"after"))
            assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed, no 'Y'
            writer.close()
            store.failing = False
            # the sink still gets what was answered 'Y', first
            sink_reader, sink_writer = await asyncio.open_connection(HOST, sink_port)
            head = await asyncio.wait_for(sink_reader.readexactly(21), TIMEOUT)
            assert head[:1] == b"M"
            (length,) = struct.unpack(">i", head[17:21])
            assert await sink_reader.readexactly(length) == b"stored"
            sink_writer.write(b"Y")
            await sink_writer.drain()
            sink_writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
    assert "message not stored: fdatasync failed" in caplog.text


def test_a_failed_delivery_mark_sync_keeps_the_message(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chute.smq")

    async def main() -> None:
        store = FailingSyncStore()
        server, source_port, sink_port = await run_broker(store)
        try:
            reader, writer = await asyncio.open_connection(HOST, source_port)
            writer.write(frame(b"kept"))
            assert await asyncio.wait_for(reader.readexactly(1), TIMEOUT) == b"Y"
            writer.close()
            store.failing = True
            sink_reader, sink_writer = await asyncio.open_connection(HOST, sink_port)
            assert await asyncio.wait_for(sink_reader.read(), TIMEOUT) == b""  # nothing sent
            sink_writer.close()
            store.failing = False
            sink_reader, sink_writer = await asyncio.open_connection(HOST, sink_port)
            head = await asyncio.wait_for(sink_reader.readexactly(21), TIMEOUT)
            assert head[:1] == b"R"  # it went out to the first sink's connection
            (length,) = struct.unpack(">i", head[17:21])
            assert await sink_reader.readexactly(length) == b"kept"
            sink_writer.close()
        finally:
            await server.stop()

    asyncio.run(main())
    assert "delivery mark not stored" in caplog.text
