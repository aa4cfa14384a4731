"""Turns: a connection acts on its input for a bounded time, then the others get the
loop; what it had buffered is acted on in its next turns, in order, and it stops
reading while it buffers much. Driven through real STOMP drivers over in-memory
transports, in process."""

from __future__ import annotations

import asyncio
import re

import pytest

from chute.config import ServerConfig
from chute.server import stream
from chute.server.app import BrokerServer
from chute.server.memory_transport import MemoryTransport, settle
from chute.server.stomp import StompConnection
from chute.store.memory import MemoryStore

BODY = re.compile(rb"\n\n(m\d+)\x00")


class ReadingTransport(MemoryTransport):
    """Remembers whether the driver wants to read."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def client(
    server: BrokerServer, loop: asyncio.AbstractEventLoop
) -> tuple[StompConnection, ReadingTransport]:
    conn = StompConnection(server)
    out = ReadingTransport()
    conn.connection_made(out)  # type: ignore[arg-type]
    conn.data_received(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
    settle(loop, conn)
    assert out.take().startswith(b"CONNECTED\n")
    return conn, out


def sends(first: int, count: int) -> bytes:
    return b"".join(
        b"SEND\ndestination:/queue/q\n\nm%d\x00" % i for i in range(first, first + count)
    )


def test_a_flood_yields_the_loop_and_a_bystander_is_answered_before_it_ends(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "TURN_S", 0.0)  # a turn is one frame
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    consumer, consumed = client(server, loop)
    consumer.data_received(b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:auto\n\n\x00")
    flood, _ = client(server, loop)
    bystander, answers = client(server, loop)

    flood.data_received(sends(0, 50))
    assert flood.between_turns  # it acted on one frame and yielded
    bystander.data_received(b"SEND\ndestination:/queue/mine\nreceipt:r1\n\nx\x00")
    loop.run_until_complete(asyncio.sleep(0))
    assert b"RECEIPT\nreceipt-id:r1" in answers.take()  # answered while the flood waits
    assert flood.between_turns

    settle(loop, flood)
    assert not flood.between_turns
    assert BODY.findall(consumed.take()) == [b"m%d" % i for i in range(50)]  # all, in order


def test_between_turns_it_reads_on_only_while_it_buffers_little(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "TURN_S", 0.0)
    monkeypatch.setattr(stream, "TURN_BUFFER", 4096)
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    flood, transport = client(server, loop)
    flood.data_received(sends(0, 10))  # ~300 bytes: under the buffer bound
    assert flood.between_turns
    assert transport.reading
    flood.data_received(sends(10, 400))  # ~12 KiB more, read while it waits its turn
    assert not transport.reading  # so the socket's data stays in the network
    settle(loop, flood)
    assert transport.reading
    [queue] = [d for d in server.broker.stats()["destinations"] if d["address"] == "queue:q"]
    assert queue["depth"] == 410
