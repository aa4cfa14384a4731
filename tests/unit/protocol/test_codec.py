"""PacketCodec: feeding, limits and hostile input (h11's tr() pattern and fuzz invariant)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.errors import RemoteProtocolError
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.codec import CLOSED, NEED_DATA, NeedData, PacketCodec
from chute.protocol.wire import HEADER, HEADER_SIZE, encode_packet

from .test_packets import EXAMPLES


def feed_all(codec: PacketCodec, data: bytes) -> list[tuple[p.Header, p.Packet]]:
    codec.receive_data(data)
    return codec.next_packets()


def tr(packet: p.Packet, correlation_id: int = 5) -> None:
    """Feed one packet whole, byte by byte, and followed by the start of another."""
    data = encode_packet(packet, correlation_id=correlation_id)

    # whole
    codec = PacketCodec()
    got = feed_all(codec, data)
    assert [x[1] for x in got] == [packet]
    assert got[0][0].correlation_id == correlation_id
    assert codec.buffered == 0

    # byte by byte: nothing until the last byte
    codec = PacketCodec()
    for i in range(len(data) - 1):
        codec.receive_data(data[i : i + 1])
        assert codec.next_packet() is NEED_DATA
    codec.receive_data(data[-1:])
    item = codec.next_packet()
    assert not isinstance(item, NeedData)
    assert item[1] == packet
    assert codec.next_packet() is NEED_DATA

    # with trailing bytes: the packet, then the rest stays buffered
    codec = PacketCodec()
    trailing = encode_packet(p.Ping())[:7]
    got = feed_all(codec, data + trailing)
    assert [x[1] for x in got] == [packet]
    assert codec.buffered == len(trailing)


@pytest.mark.parametrize("packet", EXAMPLES, ids=lambda x: type(x).__name__)
def test_tr(packet: p.Packet) -> None:
    tr(packet)


def test_many_packets_in_one_read_and_split_reads() -> None:
    data = b"".join(encode_packet(x, correlation_id=i) for i, x in enumerate(EXAMPLES))
    codec = PacketCodec()
    assert [x[1] for x in feed_all(codec, data)] == EXAMPLES
    for size in (1, 7, 100, 1000):
        codec = PacketCodec()
        got: list[p.Packet] = []
        for i in range(0, len(data), size):
            got.extend(x[1] for x in feed_all(codec, data[i : i + size]))
        assert got == EXAMPLES, size
        assert codec.buffered == 0


def test_byte_by_byte_feeding_of_a_large_packet_is_linear() -> None:
    # O(n^2) buffering would take minutes here; linear takes a fraction of a second.
    packet = p.Send(1, "q", Message(b"x" * 400_000, id="big"))
    data = encode_packet(packet)
    codec = PacketCodec()
    view = memoryview(data)
    for i in range(len(data) - 1):
        codec.receive_data(view[i : i + 1])  # type: ignore[arg-type]
        assert codec.next_packet() is NEED_DATA
    codec.receive_data(data[-1:])
    item = codec.next_packet()
    assert not isinstance(item, NeedData)
    assert item[1] == packet


def test_oversized_packet_is_refused_right_after_the_header() -> None:
    codec = PacketCodec(max_packet_size=1000)
    codec.receive_data(HEADER.pack(5000, 1, p.PacketType.SEND, 0, 1, 0))
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "packet-too-large"


def test_packet_at_the_size_limit_is_accepted() -> None:
    data = encode_packet(p.Send(1, "q", Message(b"x" * 500, id="i")))
    codec = PacketCodec(max_packet_size=len(data))
    assert len(feed_all(codec, data)) == 1
    codec = PacketCodec(max_packet_size=len(data) - 1)
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        feed_all(codec, data[:HEADER_SIZE])


def test_unknown_packet_type() -> None:
    codec = PacketCodec()
    codec.receive_data(HEADER.pack(14, 1, 250, 0, 0, 0))
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "unknown-packet-type"


def test_length_smaller_than_the_header_is_malformed() -> None:
    codec = PacketCodec()
    codec.receive_data(HEADER.pack(3, 1, p.PacketType.PING, 0, 0, 0))
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "malformed-packet"


@pytest.mark.parametrize(
    "packet", [p.Ack(1, 2), p.Send(1, "q", Message(b"abc", id="i")), p.Error("c", "r")]
)
def test_truncated_body_is_malformed(packet: p.Packet) -> None:
    data = encode_packet(packet)
    (length,) = struct.unpack_from(">I", data)
    short = struct.pack(">I", length - 2) + data[4:-2]
    if isinstance(packet, p.Send):  # the body simply gets shorter: cut the address instead
        short = struct.pack(">I", 14 + 11) + data[4 : HEADER_SIZE + 11]
    codec = PacketCodec()
    codec.receive_data(short)
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "malformed-packet"


def test_trailing_bytes_inside_a_body_are_malformed() -> None:
    data = encode_packet(p.Credit(1, 2))
    (length,) = struct.unpack_from(">I", data)
    codec = PacketCodec()
    codec.receive_data(struct.pack(">I", length + 1) + data[4:] + b"\x00")
    with pytest.raises(RemoteProtocolError, match="trailing"):
        codec.next_packet()


def test_unsupported_version_in_the_header() -> None:
    data = bytearray(encode_packet(p.Ping()))
    data[4] = 9
    codec = PacketCodec()
    codec.receive_data(bytes(data))
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "unsupported-version"


@pytest.mark.parametrize("packet", [p.Connect(7, 9), p.Connected(7, "c"), p.Error("e", "r")])
def test_negotiation_packets_decode_whatever_the_version(packet: p.Packet) -> None:
    data = bytearray(encode_packet(packet))
    data[4] = 9
    header, decoded = feed_all(PacketCodec(), bytes(data))[0]
    assert header.version == 9
    assert decoded == packet


def test_send_uses_the_negotiated_version() -> None:
    codec = PacketCodec()
    codec.version = 7
    assert codec.send(p.Ping())[4] == 7


def test_eof_mid_packet() -> None:
    codec = PacketCodec()
    codec.receive_data(encode_packet(p.Ack(1, 2))[:10])
    assert codec.next_packet() is NEED_DATA
    codec.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "eof-mid-packet"


def test_eof_at_a_packet_boundary_is_closed() -> None:
    codec = PacketCodec()
    codec.receive_data(encode_packet(p.Ping()))
    codec.receive_data(b"")
    item = codec.next_packet()
    assert not isinstance(item, NeedData)
    assert codec.next_packet() is CLOSED
    assert codec.next_packets() == []


def test_data_after_eof_is_refused() -> None:
    codec = PacketCodec()
    codec.receive_data(b"")
    with pytest.raises(RemoteProtocolError):
        codec.receive_data(b"x")


def test_too_many_properties() -> None:
    m = Message(b"", id="i", properties={f"p{i}": i for i in range(5)})
    codec = PacketCodec(max_properties=4)
    codec.receive_data(encode_packet(p.Send(1, "q", m)))
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "too-many-properties"
    codec = PacketCodec(max_properties=5)
    assert feed_all(codec, encode_packet(p.Send(1, "q", m)))[0][1].message == m  # type: ignore[union-attr]


@settings(max_examples=500)
@given(st.binary(max_size=200), st.integers(1, 40))
def test_garbage_yields_packets_or_remote_protocol_error_only(data: bytes, step: int) -> None:
    codec = PacketCodec(max_packet_size=1 << 16)
    try:
        for i in range(0, len(data), step):
            codec.receive_data(data[i : i + step])
            codec.next_packets()
        codec.receive_data(b"")
        codec.next_packets()
    except RemoteProtocolError:
        pass


_types = st.sampled_from([int(t) for t in p.PacketType])


@settings(max_examples=1000)
@given(_types, st.binary(max_size=120), st.integers(0, 3))
def test_garbage_bodies_of_real_types(ptype: int, body: bytes, version: int) -> None:
    """Well-framed packets of every real type with random bodies (the fuzzer's hard case)."""
    codec = PacketCodec()
    codec.receive_data(HEADER.pack(14 + len(body), version, ptype, 1, 2, 3) + body)
    with contextlib.suppress(RemoteProtocolError):
        codec.next_packets()


@settings(max_examples=300)
@given(st.sampled_from(EXAMPLES), st.integers(HEADER_SIZE, 400), st.binary(min_size=1, max_size=4))
def test_mutated_real_packets(packet: p.Packet, index: int, patch: bytes) -> None:
    data = bytearray(encode_packet(packet))
    index %= len(data)
    data[index : index + len(patch)] = patch
    codec = PacketCodec()
    codec.receive_data(bytes(data))
    with contextlib.suppress(RemoteProtocolError):
        codec.next_packets()
