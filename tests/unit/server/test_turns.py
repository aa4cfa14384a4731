"""Turns: a connection acts on its input for a bounded time, or until another wants the
loop (a socket with input, a sync's answer on its way), then the others get it; what it
had buffered is acted on in its next turns, in order, and it stops reading while it
buffers much. Driven through real STOMP drivers over in-memory transports that carry
real sockets (for the readiness the server watches), in process."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator

import pytest

from chute.config import ServerConfig
from chute.core.operations import looking
from chute.core.operations.browse import STEP_MESSAGES
from chute.core.operations.connection import BrokerConnection
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server import stream
from chute.server.app import BrokerServer
from chute.server.native import NativeConnection
from chute.server.stomp import StompConnection
from chute.server.turns import Contenders
from chute.store.memory import MemoryStore
from tests.memory_transport import MemoryTransport, settle

BODY = re.compile(rb"\n\n(m\d+)\x00")


class ReadingTransport(MemoryTransport):
    """Remembers whether the driver wants to read."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        super().__init__()
        self.reading = True
        self.sock = sock  # whose readiness the server watches

    def get_extra_info(self, name: str, default: object = None) -> object:
        if name == "socket":
            return self.sock
        return super().get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def client(
    server: BrokerServer, loop: asyncio.AbstractEventLoop, sock: socket.socket | None = None
) -> tuple[StompConnection, ReadingTransport]:
    conn = StompConnection(server)
    out = ReadingTransport(sock)
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
    [queue] = [d for d in looking.stats(server.broker)["destinations"] if d["address"] == "queue:q"]
    assert queue["depth"] == 410


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """Socket pairs: (the broker's end, the client's end); closed after the test."""
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for ours, theirs in made:
        ours.close()
        theirs.close()


def pair(made: list[tuple[socket.socket, socket.socket]]) -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    made.append((ours, theirs))
    return ours, theirs


@pytest.fixture
def long_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turns that only someone waiting ends, asked after every frame."""
    monkeypatch.setattr(stream, "TURN_S", 60.0)
    monkeypatch.setattr(stream, "TURN_LOOK", 0.0)


@pytest.mark.usefixtures("long_turns")
def test_a_turn_goes_on_while_nobody_else_waits(
    loop: asyncio.AbstractEventLoop, pairs: list[tuple[socket.socket, socket.socket]]
) -> None:
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    flood, _ = client(server, loop, pair(pairs)[0])
    client(server, loop, pair(pairs)[0])  # a bystander with nothing to say
    flood.data_received(sends(0, 50))
    assert not flood.between_turns  # one turn for all 50
    [queue] = [d for d in looking.stats(server.broker)["destinations"] if d["address"] == "queue:q"]
    assert queue["depth"] == 50


@pytest.mark.usefixtures("long_turns")
def test_a_turn_ends_as_soon_as_another_socket_has_input(
    loop: asyncio.AbstractEventLoop, pairs: list[tuple[socket.socket, socket.socket]]
) -> None:
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    flood, _ = client(server, loop, pair(pairs)[0])
    ours, theirs = pair(pairs)
    bystander, answers = client(server, loop, ours)
    request = b"SEND\ndestination:/queue/mine\nreceipt:r1\n\nx\x00"
    theirs.sendall(request)  # on the bystander's socket, not read by the loop yet

    flood.data_received(sends(0, 50))
    assert flood.between_turns  # it yielded after one frame
    bystander.data_received(ours.recv(4096))  # what the loop does next
    loop.run_until_complete(asyncio.sleep(0))
    assert b"RECEIPT\nreceipt-id:r1" in answers.take()
    settle(loop, flood)
    [queue] = [d for d in looking.stats(server.broker)["destinations"] if d["address"] == "queue:q"]
    assert queue["depth"] == 50


@pytest.mark.usefixtures("long_turns")
def test_input_of_a_connection_that_waits_for_its_turn_does_not_end_another_turn(
    loop: asyncio.AbstractEventLoop, pairs: list[tuple[socket.socket, socket.socket]]
) -> None:
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    first_ours, first_theirs = pair(pairs)
    first, _ = client(server, loop, first_ours)
    second_ours, second_theirs = pair(pairs)
    second, _ = client(server, loop, second_ours)
    first_theirs.sendall(b"more")  # both floods have more on their sockets
    second_theirs.sendall(b"more")

    first.data_received(sends(0, 20))
    assert first.between_turns  # the second one's socket has input: it yields
    second.data_received(sends(100, 20))
    assert not second.between_turns  # the first has its turn scheduled: no reason to yield


@pytest.mark.usefixtures("long_turns")
def test_a_turn_ends_while_a_sync_answer_waits_to_hop_onto_the_loop(
    loop: asyncio.AbstractEventLoop,
) -> None:
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    flood, _ = client(server, loop)
    server.contenders.hop_coming()  # the writer thread called back; the loop has not run it
    flood.data_received(sends(0, 20))
    assert flood.between_turns
    server.contenders.hop_arrived()
    settle(loop, flood)
    flood.data_received(sends(20, 20))
    assert not flood.between_turns


def test_contenders_see_input_on_watched_sockets_but_their_own(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    contenders = Contenders()
    a_ours, a_theirs = pair(pairs)
    b_ours, _ = pair(pairs)
    contenders.watch(a_ours.fileno())
    contenders.watch(b_ours.fileno())
    assert not contenders.waiting(a_ours.fileno())
    a_theirs.sendall(b"x")
    assert not contenders.waiting(a_ours.fileno())  # its own input is no contender
    assert contenders.waiting(b_ours.fileno())
    contenders.unwatch(a_ours.fileno())
    assert not contenders.waiting(b_ours.fileno())  # paused: not watched any more
    contenders.close()
    assert not contenders.waiting(b_ours.fileno())  # closed: no more early ends


def test_a_closed_socket_number_taken_by_a_new_one_is_watched_again(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    contenders = Contenders()
    old, old_peer = socket.socketpair()
    fd = old.fileno()
    contenders.watch(fd)
    old.close()  # lost without unwatch (the transport closed first)
    old_peer.close()
    contenders.unwatch(fd)  # no error for a closed socket
    ours, theirs = pair(pairs)
    contenders.watch(ours.fileno())
    theirs.sendall(b"x")
    assert contenders.waiting(-1)
    contenders.close()


def native_client(server: BrokerServer) -> tuple[NativeConnection, ReadingTransport]:
    conn = NativeConnection(server)
    out = ReadingTransport()
    conn.connection_made(out)  # type: ignore[arg-type]
    conn.data_received(encode_packet(p.Connect(), correlation_id=1))
    out.take()
    return conn, out


def answers(data: bytes) -> list[tuple[p.Header, p.Packet]]:
    codec = PacketCodec()
    codec.receive_data(data)
    got = []
    while not isinstance(item := codec.next_packet(), NeedData):
        got.append(item)
    return got


def test_a_browse_page_is_built_in_turns_and_others_are_answered_meanwhile(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "TURN_S", 0.0)  # a turn is one step of the page
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    session = BrokerConnection(server.broker).session()
    for i in range(10 * STEP_MESSAGES):
        session.send("queue:deep", Message.create(b"m%d" % i))
    browser, browsed = native_client(server)
    bystander, answered = native_client(server)

    browser.data_received(encode_packet(p.BrowseFetch("queue:deep"), correlation_id=7))
    assert browser.between_turns  # one step of the page, then the loop for the others
    assert answers(browsed.take()) == []  # no half page
    bystander.data_received(encode_packet(p.Ping(), correlation_id=8))
    loop.run_until_complete(asyncio.sleep(0))
    assert [type(packet) for _, packet in answers(answered.take())] == [p.Pong]
    assert browser.between_turns

    settle(loop, browser)
    [(header, page)] = answers(browsed.take())
    assert header.correlation_id == 7
    assert isinstance(page, p.BrowsePage)
    assert [m.body for _, m in page.messages] == [b"m%d" % i for i in range(10 * STEP_MESSAGES)]
    assert page.done


def test_a_turn_that_comes_while_another_sync_waits_to_start_lets_it_go_first(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "TURN_S", 0.0)
    server = BrokerServer(ServerConfig(), MemoryStore())
    server.loop = loop
    flood, _ = client(server, loop)
    flood.data_received(sends(0, 20))
    assert flood.between_turns
    depth = queue_depth(server)
    server.contenders.sync_asked(1000)  # another client's send waits for its sync to start
    for _ in range(3):
        loop.run_until_complete(asyncio.sleep(0))
    assert queue_depth(server) == depth  # its turns wait
    assert flood.between_turns
    server.contenders.sync_started()
    settle(loop, flood)
    assert queue_depth(server) == 20


def test_contenders_count_only_others_syncs_as_due() -> None:
    contenders = Contenders()
    assert not contenders.due(7)
    contenders.sync_asked(7)
    assert not contenders.due(7)  # its own sync: nothing to let go first
    assert contenders.due(8)
    contenders.sync_started()
    assert not contenders.due(8)
    contenders.hop_coming()
    assert contenders.due(7)
    contenders.hop_arrived()
    assert not contenders.due(7)
    contenders.close()


def queue_depth(server: BrokerServer) -> int:
    for d in looking.stats(server.broker)["destinations"]:
        if d["address"] == "queue:q":
            return int(d["depth"])
    return 0
