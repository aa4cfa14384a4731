"""STOMP 1.0/1.1 ACKs name a message by ``message-id``: the driver's bookkeeping of them.

Each ACK or NACK forgets exactly what it settled (no scan of everything in
flight, which made a 1.1 client-individual consumer quadratic), cumulative
ACKs included, and nothing settled can be acknowledged twice. Driven through a
real :class:`StompConnection` over a fake transport, in process.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from chute.config import ServerConfig
from chute.server.app import BrokerServer
from chute.server.stomp import StompConnection
from chute.store.memory import MemoryStore
from tests.memory_transport import MemoryTransport, settle

MESSAGE_ID = re.compile(rb"\nmessage-id:([^\n]*)\n")


class Client:
    def __init__(self, server: BrokerServer, loop: asyncio.AbstractEventLoop, version: str):
        self.loop = loop
        self.conn = StompConnection(server)
        self.out = MemoryTransport()
        self.conn.connection_made(self.out)  # type: ignore[arg-type]
        connected = self.send_bytes(
            b"CONNECT\naccept-version:%s\nhost:h\n\n\x00" % version.encode()
        )
        assert connected.startswith(b"CONNECTED\n")

    def send_bytes(self, data: bytes) -> bytes:
        self.conn.data_received(data)
        settle(self.loop, self.conn)
        return self.out.take()


def setup(
    loop: asyncio.AbstractEventLoop, version: str, ack: str, count: int
) -> tuple[Client, list[bytes]]:
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    consumer = Client(server, loop, version)
    producer = Client(server, loop, version)
    consumer.send_bytes(
        b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:%s\nprefetch-count:1000\n\n\x00" % ack.encode()
    )
    producer.send_bytes(b"SEND\ndestination:/queue/q\n\nm\x00" * count)
    ids = MESSAGE_ID.findall(consumer.out.take())
    assert len(ids) == count
    return consumer, ids


def inflight(client: Client) -> int:
    assert client.conn.stomp is not None
    [sub] = client.conn.stomp.subscriptions.values()
    assert sub.consumer is not None
    assert sub.legacy is not None
    assert len(sub.legacy) == len(sub.consumer.inflight)
    return len(sub.consumer.inflight)


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_individual_acks_in_any_order_settle_one_each(
    loop: asyncio.AbstractEventLoop, version: str
) -> None:
    client, ids = setup(loop, version, "client-individual", 300)
    order = ids[::2] + ids[1::2][::-1]
    for n, message_id in enumerate(order, 1):
        reply = client.send_bytes(b"ACK\nmessage-id:%s\nsubscription:s\n\n\x00" % message_id)
        assert reply == b""
        assert inflight(client) == 300 - n
    again = client.send_bytes(b"ACK\nmessage-id:%s\nsubscription:s\n\n\x00" % ids[0])
    assert again.startswith(b"ERROR\n")
    assert b"is not awaiting an ack" in again


def test_a_cumulative_ack_without_subscription_settles_everything_before_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    client, ids = setup(loop, "1.0", "client", 100)
    assert client.send_bytes(b"ACK\nmessage-id:%s\n\n\x00" % ids[29]) == b""
    assert inflight(client) == 70
    assert client.send_bytes(b"ACK\nmessage-id:%s\n\n\x00" % ids[99]) == b""
    assert inflight(client) == 0


def test_a_nacked_message_comes_back_and_is_acked_by_its_id(
    loop: asyncio.AbstractEventLoop,
) -> None:
    client, ids = setup(loop, "1.1", "client-individual", 5)
    back = client.send_bytes(b"NACK\nmessage-id:%s\nsubscription:s\n\n\x00" % ids[2])
    assert MESSAGE_ID.findall(back) == [ids[2]]  # redelivered at once: the window has room
    assert b"\nredelivered:true\n" in back
    assert inflight(client) == 5
    for message_id in ids:
        client.send_bytes(b"ACK\nmessage-id:%s\nsubscription:s\n\n\x00" % message_id)
    assert inflight(client) == 0
