"""PacketCodec: feeding, limits and hostile input (h11's tr() pattern and fuzz invariant)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.content import encode_content
from chute.errors import RemoteProtocolError
from chute.message import BodyKind, Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.spec import HEADER, HEADER_SIZE
from chute.protocol.splice import encode_deliver
from chute.protocol.wire import encode_packet
from chute.sansio import CLOSED, NEED_DATA, NeedData

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


def test_the_limit_may_change_between_reads() -> None:
    # a server takes small packets until the client logged in, then max_packet_size
    big = encode_packet(p.Send(1, "q", Message(b"x" * 100_000, id="big")))
    codec = PacketCodec(max_packet_size=64 << 10)
    login = encode_packet(p.Connect(), correlation_id=1)
    assert [x[1] for x in feed_all(codec, login)] == [p.Connect()]
    codec.max_packet_size = 16 << 20
    assert len(feed_all(codec, big)) == 1
    codec.max_packet_size = 64 << 10
    with pytest.raises(RemoteProtocolError, match="limit of 65536"):
        feed_all(codec, big)


def test_a_packet_announced_too_large_is_refused_having_buffered_only_its_header() -> None:
    codec = PacketCodec(max_packet_size=64 << 10)
    header = HEADER.pack((15 << 20) - 4, 1, p.PacketType.SEND, 0, 1, 0)
    codec.receive_data(header)
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "packet-too-large"
    assert codec.buffered == HEADER_SIZE
    assert f"{15 << 20} bytes" in info.value.reason


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


# -- the client's Deliver fast path: next_packets(on_deliver) ---------------------------


def _deliveries(data: bytes, step: int) -> tuple[list[object], list[object], str | None]:
    """Feed ``data`` in steps, with and without ``on_deliver``: the outcome must agree.

    Returns the deliveries as ``(consumer_id, seq, message)``, the other packets,
    and the error code if the input was refused. Only the interleaving of the
    two kinds differs (deliveries go to the sink as decoded), and, before an
    error, the sink may have had deliveries that the plain call loses with its list.
    """
    results: list[tuple[list[object], list[object], str | None]] = []
    for fast in (False, True):
        codec = PacketCodec(max_packet_size=1 << 16, max_properties=4)
        delivered: list[object] = []
        others: list[object] = []

        def sink(
            consumer_id: int, seq: int, message: Message, out: list[object] = delivered
        ) -> None:
            out.append((consumer_id, seq, message))

        error = None
        try:
            for i in range(0, len(data), step):
                codec.receive_data(data[i : i + step])
                for _, packet in codec.next_packets(sink if fast else None):
                    if isinstance(packet, p.Deliver):
                        delivered.append((packet.consumer_id, packet.seq, packet.message))
                    else:
                        others.append(packet)
        except RemoteProtocolError as exc:
            error = exc.error_code
        results.append((delivered, others, error))
    (plain_delivered, plain_others, plain_error), (delivered, others, error) = results
    assert error == plain_error
    if error is None:
        assert (delivered, others) == (plain_delivered, plain_others)
    else:
        assert delivered[: len(plain_delivered)] == plain_delivered
        assert others[: len(plain_others)] == plain_others
    return delivered, others, error


def _deliver(seq: int, message: Message, consumer_id: int = 3) -> bytes:
    return encode_deliver(consumer_id, seq, 2, True, 1000 + seq, 5000, encode_content(message))


def test_on_deliver_takes_plain_and_rich_messages_in_order() -> None:
    plain = Message(b"body", id="m1", priority=7, persistent=False)
    rich = Message(b"", id="m2", correlation_id="c", type="t", properties={"k": 1})
    data = _deliver(1, plain) + encode_packet(p.Ok(), 9) + _deliver(2, rich) + _deliver(3, plain)
    for step in (1, 7, len(data)):
        delivered, others, error = _deliveries(data, step)
        assert error is None
        assert [x[:2] for x in delivered] == [(3, 1), (3, 2), (3, 3)]  # type: ignore[index]
        assert others == [p.Ok()]
    codec = PacketCodec()
    codec.receive_data(data)
    seen: list[Message] = []
    codec.next_packets(lambda _c, _s, m: seen.append(m))
    first = seen[0]
    assert (first.body, first.id, first.priority, first.persistent, first.kind) == (
        b"body",
        "m1",
        7,
        False,
        BodyKind.BYTES,
    )
    assert (first.delivery_count, first.redelivered, first.timestamp, first.expiration) == (
        2,
        True,
        1001,
        5000,
    )
    assert first.properties == {}
    assert seen[1].properties == {"k": 1}
    assert (seen[1].correlation_id, seen[1].type) == ("c", "t")


@pytest.mark.parametrize(
    ("offset", "value", "code"),
    [
        (4, 9, "unsupported-version"),  # header version
        (30, 2, "malformed-packet"),  # redelivered flag
        (47, 10, "malformed-packet"),  # priority
        (48, 0x20, "malformed-packet"),  # unknown flag
        (49, 99, "malformed-packet"),  # body kind
        (60, 0xFF, "malformed-packet"),  # id: not UTF-8
    ],
)
def test_on_deliver_refuses_what_the_generic_path_refuses(
    offset: int, value: int, code: str
) -> None:
    data = bytearray(_deliver(1, Message(b"x", id="m1")))
    data[offset] = value
    _, _, error = _deliveries(bytes(data), len(data))
    assert error == code


def test_on_deliver_refuses_an_oversized_packet() -> None:
    data = _deliver(1, Message(b"x" * 70_000, id="m1"))
    _, _, error = _deliveries(data, len(data))
    assert error == "packet-too-large"


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=40),
            st.text(min_size=1, max_size=8),
            st.booleans(),
            st.none() | st.text(max_size=5),
        ),
        max_size=5,
    ),
    st.integers(HEADER_SIZE, 400),
    st.binary(min_size=1, max_size=3),
    st.integers(1, 50),
)
def test_on_deliver_matches_the_generic_path_on_mutated_input(
    specs: list[tuple[bytes, str, bool, str | None]], index: int, patch: bytes, step: int
) -> None:
    data = bytearray(
        b"".join(
            _deliver(seq, Message(body, id=mid, persistent=persistent, correlation_id=corr))
            for seq, (body, mid, persistent, corr) in enumerate(specs)
        )
        + encode_packet(p.Ping())
    )
    index %= len(data)
    data[index : index + len(patch)] = patch
    _deliveries(bytes(data), step)


def test_unfinished_send_names_its_address_before_its_body() -> None:
    """A Send's address is known from its first bytes, whichever reads cut them, and
    only while the rest of the packet has not arrived."""
    data = encode_packet(p.Send(1, "queue:a.b", Message(body=b"x" * 5000)), 0, 1, 0, 1)
    for cut in range(2, 60):
        codec = PacketCodec()
        codec.receive_data(data[: cut // 2])
        codec.receive_data(data[cut // 2 : cut])
        expected = "queue:a.b" if cut >= 18 + 10 + len("queue:a.b") else None
        assert codec.unfinished_send() == expected, cut
    codec = PacketCodec()
    codec.receive_data(data)
    assert codec.unfinished_send() is None  # whole: acted on as a packet
    codec.discard()
    assert codec.buffered == 0
    ping = encode_packet(p.Ping(), 0, 0, 0, 1)
    codec.receive_data(ping + ping[:5])
    assert codec.unfinished_send() is None  # not a Send
