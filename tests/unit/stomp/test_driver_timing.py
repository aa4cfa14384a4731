"""The STOMP driver's latency duties: no Nagle, and a durable RECEIPT in the sync's callback.

Row c of ``bench.stomp`` (a producer waiting for each persistent SEND's
receipt) is the journal's fsync plus whatever the driver adds; the driver must
add no loop iteration and no timer. The journal calls back from its writer
thread, so a store here does the same.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

from chute.config import ListenSettings, ServerConfig
from chute.server.app import BrokerServer
from chute.server.stomp import StompConnection
from chute.store.memory import MemoryStore
from tests.memory_transport import MemoryTransport

SyncCallback = Callable[[BaseException | None], None]


class ThreadSyncStore(MemoryStore):
    """A memory store whose sync answers later, from another thread, when told to."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[SyncCallback] = []

    def sync(self, callback: SyncCallback) -> None:
        self.waiting.append(callback)

    def fire_from_thread(self) -> None:
        waiting, self.waiting = self.waiting, []
        thread = threading.Thread(target=lambda: [cb(None) for cb in waiting])
        thread.start()
        thread.join()


def test_a_durable_receipt_goes_out_in_the_sync_callbacks_own_iteration(
    loop: asyncio.AbstractEventLoop,
) -> None:
    store = ThreadSyncStore()
    server = BrokerServer(ServerConfig(), store)
    server.loop = loop
    conn = StompConnection(server)
    transport = MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
    transport.written.clear()

    conn.data_received(b"SEND\ndestination:/queue/c\nreceipt:r-1\ncontent-length:1\n\nx\x00")
    loop.run_until_complete(asyncio.sleep(0))
    assert b"RECEIPT" not in b"".join(transport.written)  # not before the sync
    assert len(store.waiting) == 1

    store.fire_from_thread()  # as the journal's writer thread does after its fsync
    loop.run_until_complete(asyncio.sleep(0))  # one iteration: the threadsafe callback runs
    assert b"".join(transport.written) == b"RECEIPT\nreceipt-id:r-1\n\n\x00"
    assert not loop._scheduled  # type: ignore[attr-defined]  # and no timer was involved


def test_the_stomp_listener_sets_tcp_nodelay(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = ServerConfig(ListenSettings(port=0, http_port=0, stomp_port=port))
        server = BrokerServer(config, MemoryStore())
        await server.start()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            deadline = time.monotonic() + 10
            while not any(isinstance(c, StompConnection) for c in server.connections):
                assert time.monotonic() < deadline, "the connection was never accepted"
                await asyncio.sleep(0.01)
            [conn] = [c for c in server.connections if isinstance(c, StompConnection)]
            assert conn.transport is not None
            sock = conn.transport.get_extra_info("socket")
            nodelay = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            return nodelay
        finally:
            await server.stop()

    assert loop.run_until_complete(main()) != 0
