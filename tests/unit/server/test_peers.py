"""The links' side of the PeerPort contract: a hand-over, a confirm or a release leaves only
once the store synced what was recorded before it, and nothing overtakes it on its link."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest

from chute.config import ServerConfig
from chute.config.sections import ClusterSettings
from chute.core.model.cluster import Demand, Handover, HandoverKey
from chute.core.model.queue import QueueChannel
from chute.core.model.settings import SettingsResolver
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server.peers import PeerLinks
from chute.server.peers_dial import _Dialed
from chute.store.memory import MemoryStore

Synced = Callable[[BaseException | None], None]


class Host:
    """A server whose store syncs when the test says."""

    def __init__(self) -> None:
        self.config = ServerConfig()
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.get_ident()
        self.waiting: list[Synced] = []
        self.seals: list[Callable[[], None]] = []

    def request_sync(self, callback: Synced, seal: Callable[[], None] | None = None) -> None:
        self.waiting.append(callback)
        if seal is not None:
            self.seals.append(seal)

    def start(self) -> None:
        """The syncs asked for start (the loop's turn ended): their seals run."""
        seals, self.seals = self.seals, []
        for seal in seals:
            seal()

    def sync(self, error: BaseException | None = None) -> None:
        self.start()
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback(error)


class Wire:
    def __init__(self) -> None:
        self.codec = PacketCodec()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.codec.receive_data(data)

    def close(self) -> None:
        self.closed = True

    def packets(self) -> list[type]:
        out: list[type] = []
        while not isinstance(item := self.codec.next_packet(), NeedData):
            out.append(type(item[1]))
        return out


@pytest.fixture
def host() -> Iterator[Host]:
    made = Host()
    yield made
    made.loop.close()


def linked(host: Host) -> tuple[Host, PeerLinks, Wire]:
    links = PeerLinks(host, ClusterSettings(node="a"), "c")
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    links.cluster = Cluster(broker, links, node="a", run="r")
    wire = Wire()
    links.up("b", wire.write, wire.close)
    assert wire.packets() == [p.PeerResume]  # link_up: nothing durable before it
    return host, links, wire


def handover(n: int) -> Handover:
    return Handover(HandoverKey("r", n), "queue:q", Message.create(b"x"))


def test_a_handover_and_what_follows_it_wait_for_the_sync(host: Host) -> None:
    host, links, wire = linked(host)
    links.send_demand("b", Demand("queue:q", (None,)))  # nothing pending: at once
    assert wire.packets() == [p.PeerDemand]
    links.send_handover("b", handover(1))
    links.send_demand("b", Demand("queue:q", ()))
    links.send_refuse("b", [HandoverKey("s", 1)])
    assert wire.packets() == []
    host.sync()
    assert wire.packets() == [p.PeerHandover, p.PeerDemand, p.PeerRefuse]
    links.send_demand("b", Demand("queue:q", (None,)))
    assert wire.packets() == [p.PeerDemand]


def test_a_packet_recorded_after_a_sync_started_waits_for_the_next(host: Host) -> None:
    host, links, wire = linked(host)
    links.send_confirm("b", [HandoverKey("s", 1)])
    host.start()
    links.send_release("b", [HandoverKey("s", 2)])  # a sync is under way: it covers less
    assert len(host.waiting) == 1
    host.sync()
    assert wire.packets() == [p.PeerConfirm]
    assert len(host.waiting) == 1  # asked again, for the release
    host.sync()
    assert wire.packets() == [p.PeerRelease]


def test_a_failed_sync_sends_nothing_and_closes_the_link(host: Host) -> None:
    host, links, wire = linked(host)
    links.send_handover("b", handover(1))
    host.sync(OSError("disk gone"))
    assert wire.packets() == []
    assert wire.closed
    assert "b" not in links.links
    links.send_demand("b", Demand("queue:q", ()))  # the link is down: dropped
    assert wire.packets() == []


def test_a_link_lost_under_a_sync_sends_nothing_when_it_ends(host: Host) -> None:
    host, links, wire = linked(host)
    links.send_handover("b", handover(1))
    links.lost(links.links["b"])
    host.sync()
    assert wire.packets() == []


def received(wire: Wire) -> list[object]:
    out: list[object] = []
    while not isinstance(item := wire.codec.next_packet(), NeedData):
        out.append(item[1])
    return out


def test_confirms_waiting_for_a_sync_go_as_one_packet_never_under_a_started_sync(
    host: Host,
) -> None:
    host, links, wire = linked(host)
    links.send_confirm("b", [HandoverKey("s", 1)])  # the sync asked for covers this one
    host.start()
    links.send_confirm("b", [HandoverKey("s", 2)])  # recorded after: waits for the next
    links.send_confirm("b", [HandoverKey("s", 3)])  # joins it
    links.send_release("b", [HandoverKey("s", 4)])  # another kind: a packet of its own
    host.sync()
    assert received(wire) == [p.PeerConfirm((("s", 1),))]
    host.sync()
    assert received(wire) == [
        p.PeerConfirm((("s", 2), ("s", 3))),
        p.PeerRelease((("s", 4),)),
    ]


def test_handovers_waiting_for_a_sync_go_as_one_packet_never_under_a_started_sync(
    host: Host,
) -> None:
    host, links, wire = linked(host)
    links.send_handover("b", handover(1))
    links.send_handover("b", handover(2))  # the sync asked for has not started: joins
    host.start()
    links.send_handover("b", handover(3))  # the sync started: waits for the next
    links.send_handover("b", handover(4))  # joins it
    links.send_confirm("b", [HandoverKey("s", 1)])  # another kind: a packet of its own
    links.send_handover("b", handover(5))  # after it: a packet of its own
    assert len(host.waiting) == 1
    host.sync()
    batches = received(wire)
    assert len(batches) == 1
    assert isinstance(batches[0], p.PeerHandovers)
    assert [h.key.n for h in batches[0].handovers] == [1, 2]
    assert [h.message.body for h in batches[0].handovers] == [b"x", b"x"]
    host.sync()
    batches = received(wire)
    assert [type(b) for b in batches] == [p.PeerHandovers, p.PeerConfirm, p.PeerHandover]
    assert isinstance(batches[0], p.PeerHandovers)
    assert [h.key.n for h in batches[0].handovers] == [3, 4]


def test_a_batch_of_handovers_is_written_as_the_codec_encodes_it(host: Host) -> None:
    """The link joins a PeerHandovers' header and parts itself (each message copied once):
    byte for byte what the packet's codec makes."""
    host, links, _wire = linked(host)
    written: list[bytes] = []
    links.links["b"].write = written.append
    batch = [handover(n) for n in (1, 2, 3)]
    for h in batch:
        links.send_handover("b", h)
    host.sync()
    assert written == [encode_packet(p.PeerHandovers("r", tuple(batch)), version=p.PEER_VERSION)]


def test_handovers_received_in_one_packet_are_confirmed_in_one(host: Host) -> None:
    host, links, wire = linked(host)
    link = links.links["b"]
    packet = p.PeerHandovers(
        "s",
        tuple(
            Handover(HandoverKey("s", n), "queue:q", Message.create(b"m%d" % n)) for n in (1, 2, 3)
        ),
    )
    links.received(link, packet)
    host.start()
    links.received(link, p.PeerHandover("s", 3, "queue:q", 0, False, Message.create(b"m3")))
    host.sync()
    assert received(wire) == [p.PeerConfirm((("s", 1), ("s", 2), ("s", 3)))]
    host.sync()
    assert received(wire) == [p.PeerConfirm((("s", 3),))]  # the repeat: confirmed again
    queue = links.cluster.host.destination("queue:q")
    assert isinstance(queue, QueueChannel)
    assert queue.held == 3


def test_closing_the_links_ends_a_dial_whose_attempt_fails_in_the_same_turn(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node stopping while its dial to a stopping node fails: the two happen in one
    turn of the loop, and the dial must still end (it once swallowed the cancellation
    and dialed on, so ``chute serve --nodes`` never exited)."""

    async def run() -> None:
        accepted = asyncio.Event()

        async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set()

        listener = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        links = PeerLinks(host, ClusterSettings(node="a"), "c")
        made = _Dialed.connection_made

        def connection_made(self: _Dialed, transport: asyncio.BaseTransport) -> None:
            made(self, transport)

            def fail_and_stop() -> None:  # the other node closes as this one stops
                self.opened.set_exception(ConnectionError("node b closed the connection"))
                closing.append(asyncio.ensure_future(links.close()))
                stopping.set()

            asyncio.get_running_loop().call_soon(fail_and_stop)

        closing: list[asyncio.Future[None]] = []
        stopping = asyncio.Event()
        monkeypatch.setattr(_Dialed, "connection_made", connection_made)
        links.joined("b", f"127.0.0.1:{port}")  # "a" < "b": this node dials
        async with asyncio.timeout(5):
            await accepted.wait()
            await stopping.wait()
            await closing[0]  # the dial ended: close() gathers it
        assert not links._dialers
        listener.close()
        await listener.wait_closed()

    host.loop.run_until_complete(run())
