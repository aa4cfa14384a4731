"""Hostile input over real TCP: a bad packet gets an Error and a close; others carry on."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

import chute
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData

from .conftest import ChuteServer, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    """One broker for the module: no test restarts it, each uses destinations of its
    own, and each hostile input must leave it serving the next test."""
    srv = start_server(tmp_path_factory.mktemp("broker"))
    yield srv
    srv.stop()


def _connect(server: ChuteServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(encode_packet(p.Connect(), correlation_id=1))
    _, packet = _read_packet(sock)
    assert isinstance(packet, p.Connected)
    return sock


def _read_packet(sock: socket.socket) -> tuple[p.Header, p.Packet]:
    codec = PacketCodec()
    while True:
        item = codec.next_packet()
        if not isinstance(item, NeedData):
            return item
        data = sock.recv(65536)
        codec.receive_data(data)
        if not data:
            item = codec.next_packet()
            assert not isinstance(item, NeedData), "connection closed without a packet"
            return item


def _read_until_closed(sock: socket.socket) -> list[p.Packet]:
    codec = PacketCodec()
    packets: list[p.Packet] = []
    while True:
        data = sock.recv(65536)
        codec.receive_data(data)
        while not isinstance(item := codec.next_packet(), NeedData):
            packets.append(item[1])
        if not data:
            return packets


def _roundtrip_ok(server: ChuteServer) -> None:
    """A fresh client can still open a session and get a response."""
    sock = _connect(server)
    try:
        sock.sendall(encode_packet(p.Ping(), correlation_id=7))
        _, packet = _read_packet(sock)
        assert isinstance(packet, p.Pong)
    finally:
        sock.close()


def test_garbage_gets_error_and_close_others_carry_on(server: ChuteServer) -> None:
    bystander = _connect(server)
    bad = _connect(server)
    # A header announcing an unknown packet type.
    body = b"\x00" * 3
    bad.sendall(struct.pack(">IBBIII", 14 + len(body), 1, 250, 0, 0, 0) + body)
    packets = _read_until_closed(bad)
    assert packets
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "unknown-packet-type"
    bystander.sendall(encode_packet(p.Ping(), correlation_id=9))
    _, pong = _read_packet(bystander)
    assert isinstance(pong, p.Pong)
    bystander.close()
    _roundtrip_ok(server)


def test_oversized_packet_refused_at_header(server: ChuteServer) -> None:
    bad = _connect(server)
    # Announce 1 GiB; send only the header: the broker must not wait for the body.
    bad.sendall(struct.pack(">IBBIII", 1 << 30, 1, int(p.PacketType.SEND), 0, 1, 0))
    packets = _read_until_closed(bad)
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "packet-too-large"
    _roundtrip_ok(server)


def test_malformed_body_refused(server: ChuteServer) -> None:
    bad = _connect(server)
    bad.sendall(struct.pack(">IBBIII", 14 + 2, 1, int(p.PacketType.SEND), 0, 1, 0) + b"\xff\xff")
    packets = _read_until_closed(bad)
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "malformed-packet"
    _roundtrip_ok(server)


def test_first_packet_must_be_connect(server: ChuteServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(encode_packet(p.Ping(), correlation_id=1))
    packets = _read_until_closed(sock)
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "not-connected"
    _roundtrip_ok(server)


def test_unsupported_version_range(server: ChuteServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(encode_packet(p.Connect(min_version=7, max_version=9), correlation_id=1))
    packets = _read_until_closed(sock)
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "unsupported-version"


def test_abrupt_disconnect_mid_packet(server: ChuteServer) -> None:
    sock = _connect(server)
    sock.sendall(struct.pack(">IBBIII", 500, 1, int(p.PacketType.SEND), 0, 1, 0) + b"abc")
    sock.close()
    _roundtrip_ok(server)


def test_heartbeats_ping_idle_clients_and_drop_silent_ones(server: ChuteServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(encode_packet(p.Connect(heartbeat_ms=1000), correlation_id=1))
    _, connected = _read_packet(sock)
    assert isinstance(connected, p.Connected)
    assert connected.heartbeat_ms == 1000
    # We never answer: the broker pings at the interval, then gives up on us.
    packets = _read_until_closed(sock)
    pings = [pk for pk in packets if isinstance(pk, p.Ping)]
    assert len(pings) >= 2
    _roundtrip_ok(server)


def test_credit_only_ack_with_messages_in_flight(server: ChuteServer) -> None:
    """An Ack with seq 0 grants credit and acks nothing, even with messages in flight."""
    sock = _connect(server)
    codec = PacketCodec()

    def next_packet() -> p.Packet:
        while isinstance(item := codec.next_packet(), NeedData):
            codec.receive_data(sock.recv(65536))
        return item[1]

    sock.sendall(
        encode_packet(p.SessionOpen(1, p.SessionAckMode.CLIENT), callback_id=1)
        + encode_packet(p.ConsumerOpen(1, 2, "queue:credit", prefetch=1), correlation_id=2)
        + encode_packet(p.Send(1, "queue:credit", Message.create(b"a", persistent=False)))
        + encode_packet(p.Send(1, "queue:credit", Message.create(b"b", persistent=False)))
    )
    assert isinstance(next_packet(), p.Ok)
    first = next_packet()
    assert isinstance(first, p.Deliver)
    assert first.message.body == b"a"
    sock.sendall(encode_packet(p.Ack(2, 0, True, 1), target_id=2, correlation_id=3))
    answers = [next_packet(), next_packet()]
    assert any(isinstance(a, p.Ok) for a in answers), answers
    second = next(a for a in answers if isinstance(a, p.Deliver))
    assert second.message.body == b"b"
    assert not second.redelivered
    sock.close()


def test_a_send_many_over_its_count_is_refused_and_nothing_of_it_is_kept(
    server: ChuteServer,
) -> None:
    """A SendMany of many tiny messages (one packet, past SEND_MANY_MAX) is malformed: the
    broker closes that connection without queueing any of them, and serves the next."""
    bad = _connect(server)
    bad.sendall(encode_packet(p.SessionOpen(1), correlation_id=2))
    _, opened = _read_packet(bad)
    assert isinstance(opened, p.Ok)
    address = "queue:hostile.many"
    tiny = tuple(Message(b"", id="i") for _ in range(p.SEND_MANY_MAX + 1))
    bad.sendall(encode_packet(p.SendMany(1, address, tiny), correlation_id=3))
    packets = _read_until_closed(bad)
    assert isinstance(packets[-1], p.Error)
    assert packets[-1].code == "malformed-packet"
    with chute.connect(server.url) as conn, conn.session() as s:
        assert s.browse(address) == []
        s.send_many(address, [b"ok"] * (p.SEND_MANY_MAX + 1))  # the client splits it
        assert len(s.browse(address)) == p.SEND_MANY_MAX + 1
