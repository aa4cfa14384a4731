"""An operator closes a client's connection (chute.core.operations.manage.close_connection): the
client is told why, in its protocol, and what it held goes back to its queue.

The broker runs in-process (the management call is the core's, on the broker's
loop); the clients speak over real sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from chute import aio
from chute.config import ListenSettings, ServerConfig
from chute.core.operations import manage
from chute.core.operations.connection import BrokerConnection
from chute.errors import ConnectError
from chute.server.app import BrokerServer
from chute.smq.settings import SmqSettings
from chute.store.memory import MemoryStore

from .conftest import free_port

TIMEOUT = 10.0


def run(body: Callable[[BrokerServer, int, int], Awaitable[None]], *, smq_port: int = 0) -> None:
    async def main() -> None:
        port, stomp_port = free_port(), free_port()
        smq = SmqSettings(source_port=0, sink_port=smq_port) if smq_port else None
        config = ServerConfig(
            ListenSettings(port=port, stomp_port=stomp_port, http_port=0), smq=smq
        )
        server = BrokerServer(config, store=MemoryStore())
        await server.start()
        try:
            await asyncio.wait_for(body(server, port, stomp_port), TIMEOUT)
        finally:
            await server.stop()

    asyncio.run(main())


def client_of(operator: BrokerConnection, protocol: str) -> str:
    [found] = [c["id"] for c in manage.connections(operator) if c["protocol"] == protocol]
    return str(found)


def test_a_native_client_closed_by_an_operator_is_told_why() -> None:
    async def body(server: BrokerServer, port: int, _stomp: int) -> None:
        operator = BrokerConnection(server.broker)
        async with aio.connect(f"chute://127.0.0.1:{port}") as conn:
            session = conn.session(ack="client")
            await session.send("queue:work", b"job")
            consumer = await session.consumer("queue:work")
            received = await consumer.receive(TIMEOUT)
            assert received is not None  # in flight, unacked
            queue = server.broker.queues["queue:work"]
            assert queue.inflight == 1
            manage.close_connection(
                operator, client_of(operator, "native"), "closed by an operator: maintenance"
            )
            assert queue.ready == 1  # the unacked message went back at once
            with pytest.raises(ConnectError, match="maintenance"):
                await session.send("queue:work", b"more")
        assert not [c for c in manage.connections(operator) if c["protocol"] == "native"]

    run(body)


def test_a_stomp_client_closed_by_an_operator_gets_an_error_frame() -> None:
    async def body(server: BrokerServer, _port: int, stomp_port: int) -> None:
        operator = BrokerConnection(server.broker)
        reader, writer = await asyncio.open_connection("127.0.0.1", stomp_port)
        writer.write(b"CONNECT\naccept-version:1.2\nhost:chute\n\n\x00")
        await writer.drain()
        assert (await reader.readuntil(b"\x00")).startswith(b"CONNECTED")
        manage.close_connection(operator, client_of(operator, "STOMP"), "go away please")
        rest = await reader.read()  # until the broker closes
        assert rest.startswith(b"\nERROR\n") or rest.startswith(b"ERROR\n")
        assert b"code:connection-closed" in rest
        assert b"go away please" in rest
        writer.close()
        assert all(c["protocol"] != "STOMP" for c in manage.connections(operator))

    run(body)


def test_a_simple_message_queue_client_closed_by_an_operator_sees_the_socket_close() -> None:
    sink_port = free_port()

    async def body(server: BrokerServer, _port: int, _stomp: int) -> None:
        operator = BrokerConnection(server.broker)
        reader, writer = await asyncio.open_connection("127.0.0.1", sink_port)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not [c for c in manage.connections(operator) if c["protocol"] == "smq sink"]:
            assert loop.time() < deadline, "the sink connection never showed"
            await asyncio.sleep(0.01)
        manage.close_connection(operator, client_of(operator, "smq sink"))
        assert await reader.read() == b""  # the protocol has no error to say: it closes
        writer.close()

    run(body, smq_port=sink_port)
