"""A link pushes back: it stops reading while what it must write waits on a slow store
past its bound, and (the dialing side, as every accepted connection) while its write
buffer is full. What it holds stays bounded however much the other node sends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from chute.config.sections import ClusterSettings
from chute.core.model.cluster import Demand, HandoverKey
from chute.core.model.settings import SettingsResolver
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server.peers import PeerLinks
from chute.server.peers_dial import _Dialed
from chute.store.memory import MemoryStore

from .test_peers import Host, Wire

BOUND = 4096


@pytest.fixture
def host() -> Iterator[Host]:
    made = Host()
    yield made
    made.loop.close()


def test_a_link_whose_store_lags_stops_reading_and_holds_a_bounded_backlog(host: Host) -> None:
    links = PeerLinks(host, ClusterSettings(node="a"), "c", backlog=BOUND)
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    links.cluster = Cluster(broker, links, node="a", run="r")
    reading: list[bool] = []
    wire = Wire()
    link = links.up("b", wire.write, wire.close, reading.append)
    incoming = [
        p.PeerHandover("s", n, "queue:q", 0, False, Message.create(b"x" * 100))
        for n in range(1, 2001)
    ]
    most = 0
    while incoming:
        # the transport reads while the link lets it; the store syncs only when it stops
        while incoming and not (reading and reading[-1] is False):
            links.received(link, incoming.pop(0))
            most = max(most, link.backlog)
        if not incoming and reading[-1] is True:
            break  # the last few fit under the bound
        assert reading[-1] is False, "the link never stopped reading"
        while reading[-1] is False:  # the store catches up, a sync at a time
            assert len(host.waiting) == 1
            host.sync()
    while host.waiting:
        host.sync()
    assert most <= BOUND + 64  # past the bound by one confirm at most
    assert link.backlog == 0
    assert not link.pending
    assert broker.queues["queue:q"].held == 2000
    assert len(reading) > 2  # stopped and resumed more than once


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        pass


def test_the_dialing_side_stops_reading_while_its_write_buffer_is_full(host: Host) -> None:
    links = PeerLinks(host, ClusterSettings(node="a"), "c", backlog=BOUND)
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    links.cluster = Cluster(broker, links, node="a", run="r")

    async def dial() -> None:
        dialed = _Dialed(links, "b")
        transport = _Transport()
        dialed.connection_made(transport)
        dialed.data_received(encode_packet(p.Connected(p.PEER_VERSION, "b"), 1))
        dialed.data_received(encode_packet(p.Ok("b"), 2, version=p.PEER_VERSION))
        assert dialed.link is not None
        dialed.pause_writing()
        assert not transport.reading
        dialed._backlog(False)  # the store lags too
        dialed.resume_writing()
        assert not transport.reading  # still: the backlog holds it
        dialed._backlog(True)
        assert transport.reading
        dialed.connection_lost(None)

    host.loop.run_until_complete(dial())


def test_demands_waiting_behind_a_sync_keep_only_the_last_per_address(host: Host) -> None:
    links = PeerLinks(host, ClusterSettings(node="a"), "c", backlog=BOUND)
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    links.cluster = Cluster(broker, links, node="a", run="r")
    wire = Wire()
    link = links.up("b", wire.write, wire.close)
    wire.packets()  # PeerResume
    links.send_confirm("b", [HandoverKey("s", 1)])  # waits for a sync; what follows too
    for i in range(10_000):  # consumers come and go on two queues meanwhile
        links.send_demand("b", Demand("queue:one", (None,) if i % 2 else ()))
        links.send_demand("b", Demand("queue:two", (f"n = {i}",)))
    links.send_release("b", [HandoverKey("s", 2)])
    links.send_demand("b", Demand("queue:one", ()))
    assert len([d for d in link.pending if d]) == 4
    while host.waiting:
        host.sync()
    got = []
    while not isinstance(item := wire.codec.next_packet(), NeedData):
        got.append(item[1])
    assert got == [
        p.PeerConfirm((("s", 1),)),
        p.PeerDemand("queue:two", ("n = 9999",)),
        p.PeerRelease((("s", 2),)),
        p.PeerDemand("queue:one", ()),
    ]
    assert link.backlog == 0
