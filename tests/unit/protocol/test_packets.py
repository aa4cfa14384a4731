"""Packets and their wire bodies: every type round-trips, typed properties keep their type."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.content import decode_content, encode_content
from chute.core.model.cluster import Handover, HandoverKey
from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.message import BodyKind, Byte, Float, Int, Long, Message, Short
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.spec import HEADER
from chute.protocol.splice import (
    encode_deliver,
    encode_send,
    encode_send_many,
    plain_send_encoder,
)
from chute.protocol.wire import CODECS, encode_packet
from chute.sansio import NeedData

MESSAGE = Message.create(
    b"hello",
    id="m-1",
    priority=7,
    correlation_id="corr",
    reply_to="queue:replies",
    type="order",
    persistent=False,
    properties={
        "flag": True,
        "b": Byte(-3),
        "s": Short(1000),
        "i": Int(-70000),
        "l": 1 << 40,
        "f": Float(1.5),
        "d": 2.25,
        "text": "eu ✓",
    },
    kind=BodyKind.TEXT,
)
DELIVERED = MESSAGE.replace(timestamp=1000, expiration=2000, delivery_count=2, redelivered=True)

EXAMPLES: list[p.Packet] = [
    p.Connect(),
    p.Connect(1, 3, "client-1", "alice", "secret", 10_000),
    p.Connected(1, "conn-1", 5000, 1 << 20),
    p.Ping(),
    p.Pong(),
    p.Disconnect(),
    p.Error("not-found", "no such queue: queue:x"),
    p.Ok(),
    p.Ok("value"),
    p.Held("the broker's queues hold 2 MiB in memory, over memory_high_watermark", 30_000),
    p.SessionOpen(3),
    p.SessionOpen(3, p.SessionAckMode.INDIVIDUAL, transacted=True),
    p.SessionClose(3),
    p.Send(3, "queue:orders", MESSAGE),
    p.Send(3, "topic:prices", Message(b""), ttl_ms=60_000),
    p.SendMany(3, "stream:orders", (MESSAGE, Message(b"", id="x"), MESSAGE), ttl_ms=5),
    p.SendMany(3, "queue:none", ()),
    p.ConsumerOpen(3, 4, "queue:orders"),
    p.ConsumerOpen(3, 4, "topic:t", "region = 'eu'", 10, True, "sub", True, True),
    p.ConsumerClose(4),
    p.StreamConsumerOpen(2, 5, "stream:orders", "timestamp=1700000000000", "region = 'eu'", 50),
    p.StreamConsumerOpen(2, 6, "stream:orders", "first"),
    p.Deliver(4, 1 << 40, 2, True, 1000, 2000, DELIVERED),
    p.Ack(4, 17),
    p.Ack(4, 17, cumulative=True, credit=50),
    p.Nack(4, 17),
    p.Nack(4, 17, requeue=False),
    p.Credit(4, 100),
    p.Commit(3),
    p.Rollback(3),
    p.XaPrepare(3, "xid-1"),
    p.XaCommit("xid-1"),
    p.XaRollback("xid-\u00e9"),
    p.XaRecover(),
    p.Browse("queue:orders"),
    p.Browse("queue:orders", "a > 1", 10),
    p.BrowseResult(),
    p.BrowseResult(((1, DELIVERED), (5, Message(b"x", id="m-2")))),
    p.Stat(),
    p.StatResult('{"queues": {}}'),
    p.Unsubscribe("sub"),
    p.Unsubscribe("sub", "client-1"),
    p.TempQueue(),
    p.TempQueueCreated("queue:__tmp__.1"),
    p.CallbackCreate("topic:t", "cb", "queue:forward"),
    p.CallbackCreate("topic:t", "cb", "queue:forward", "x = 1"),
    p.DestinationDelete("queue:orders"),
    p.DestinationDelete("topic:prices", force=True),
    p.DestinationPurge("queue:orders"),
    p.DestinationCreate("stream:events"),
    # the Spark connector's packets (more in tests/unit/spark/test_cursor_packets.py)
    p.XaCommitBatch("query-1", 3, ("xid-1", "xid-2")),
    p.CursorOpen("queue:orders", "spark", "a > 1", 1000),
    p.CursorInfo(1, 5),
    p.CursorFetch("queue:orders", None, 1, 5, 10, 1 << 20),
    p.CursorPage(5, ((1, DELIVERED),)),
    p.CursorAck("queue:orders", "spark", 5),
    p.CursorClose("topic:t", "spark", delete=True),
    p.BrowseFetch("queue:orders"),
    p.BrowseFetch("queue:orders", "a > 1", 1 << 40, (1 << 40) + 9, 100, 1 << 20),
    p.BrowsePage(0, 1, True),
    p.BrowsePage(5, 90, False, ((1, DELIVERED), (5, Message(b"x", id="m-2")))),
    p.StatFetch(),
    p.StatFetch("queue:orders.*", "queue:orders.17", 50),
    p.StatPage('{"destinations": []}'),
    p.StatPage('{"destinations": []}', "queue:orders.17"),
    p.Move("queue:orders", "queue:orders.retry"),
    p.Move("queue:orders", "topic:t", "region = 'eu'", (1, 7, 1 << 40), 500),
    p.DeadLetterRetry(),
    p.DeadLetterRetry("queue:my.dlq", "x > 1", (3,), 10),
    p.DeadLetterRetryResult(),
    p.DeadLetterRetryResult((("", 2), ("queue:a", 3), ("topic:\u00e9", 1 << 33))),
    # between the nodes of a cluster
    p.PeerOpen("chute", "node-a"),
    p.PeerHandover("run1", 1 << 40, "queue:orders", 2, True, Message(b"x", id="m-3")),
    p.PeerHandovers(
        "run1",
        (
            Handover(HandoverKey("run1", 7), "queue:orders", Message(b"", id="m-4")),
            Handover(
                HandoverKey("run1", 8), "topic:t", Message(b"yz", id="m-5", priority=7), 3, True
            ),
        ),
    ),
    p.PeerConfirm((("run1", 1), ("run0", 1 << 40))),
    p.PeerRefuse((("run1", 2),)),
    p.PeerRelease(()),
    p.PeerDemand("queue:orders", (None, "a > 1")),
    p.PeerDemand("topic:t", ()),
    p.PeerResume((("run1", 3),), (("queue:orders", (None,)), ("topic:t", ("b = 'x'",)))),
    p.PeerStreamRead("stream:orders", 1 << 40, 256),
    p.PeerStreamRecords("stream:orders", 9, ()),
    p.PeerStreamRecords(
        "stream:\u00e9",
        10,
        ((7, Message(b"x", id="m-1")), (9, Message(b"", id="m-2", timestamp=5, expiration=9))),
    ),
    p.PeerStatsFetch(1, ""),
    p.PeerStatsFetch(1 << 40, "queue:orders.\u00e9"),
    p.PeerStatsPage(1, True, (), ()),
    p.PeerStatsPage(7, False, ("a", "c"), (("queue:orders", 1 << 40, 3), ("topic:t", 0, 0))),
]


def roundtrip(packet: p.Packet, correlation_id: int = 0) -> tuple[p.Header, p.Packet]:
    codec = PacketCodec()
    codec.receive_data(codec.send(packet, correlation_id=correlation_id))
    item = codec.next_packet()
    assert not isinstance(item, NeedData)
    assert codec.next_packet() is NeedData.NEED_DATA
    return item


@pytest.mark.parametrize("packet", EXAMPLES, ids=lambda x: type(x).__name__)
def test_every_example_roundtrips(packet: p.Packet) -> None:
    header, decoded = roundtrip(packet, correlation_id=99)
    assert decoded == packet
    assert type(decoded) is type(packet)
    assert header.correlation_id == 99
    assert header.version == p.PROTOCOL_VERSION


def test_every_packet_type_has_an_example_and_a_codec() -> None:
    assert set(CODECS) == set(p.PacketType)
    assert {type(x) for x in EXAMPLES} == {c.cls for c in CODECS.values()}


@pytest.mark.parametrize(
    ("packet", "target", "callback"),
    [
        (p.SessionOpen(3), 0, 3),
        (p.SessionClose(3), 3, 0),
        (p.Send(3, "q", Message()), 3, 0),
        (p.ConsumerOpen(3, 4, "q"), 3, 4),
        (p.ConsumerClose(4), 4, 0),
        (p.StreamConsumerOpen(2, 5, "stream:x", "next"), 2, 5),
        (p.Deliver(4, 1, 0, False, 0, 0, Message()), 4, 0),
        (p.Ack(4, 1), 4, 0),
        (p.Nack(4, 1), 4, 0),
        (p.Credit(4, 1), 4, 0),
        (p.Commit(3), 3, 0),
        (p.Rollback(3), 3, 0),
        (p.XaPrepare(3, "x"), 3, 0),
        (p.Ping(), 0, 0),
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, int) else str(x),
)
def test_handler_ids_travel_in_the_header(packet: p.Packet, target: int, callback: int) -> None:
    header, _ = roundtrip(packet)
    assert (header.target_id, header.callback_id) == (target, callback)


def test_explicit_target_overrides() -> None:
    data = encode_packet(p.Error("destination-full", "full"), target_id=3)
    _, _, _, _, target, _ = HEADER.unpack_from(data)
    assert target == 3


def test_typed_properties_keep_their_jms_type() -> None:
    _, decoded = roundtrip(p.Send(1, "q", MESSAGE))
    assert isinstance(decoded, p.Send)
    props = decoded.message.properties
    assert props == MESSAGE.properties
    for name, value in MESSAGE.properties.items():
        assert type(props[name]) is type(value), name


def test_send_content_splices_into_deliver() -> None:
    _, send = roundtrip(p.Send(1, "queue:a", MESSAGE))
    assert isinstance(send, p.Send)
    assert send.content == encode_content(MESSAGE)
    codec = PacketCodec()
    codec.receive_data(encode_deliver(9, 5, 2, True, 1000, 2000, send.content))
    item = codec.next_packet()
    assert not isinstance(item, NeedData)
    header, deliver = item
    assert header.target_id == 9
    assert deliver == p.Deliver(9, 5, 2, True, 1000, 2000, DELIVERED)
    assert deliver.message == DELIVERED


def test_decoded_send_caches_its_content_on_the_message() -> None:
    _, send = roundtrip(p.Send(1, "queue:a", MESSAGE))
    assert isinstance(send, p.Send)
    assert send.message.encoded == send.content == encode_content(MESSAGE)


def test_decoded_handovers_cache_their_content_on_the_message() -> None:
    # the receiving node delivers (or hands over again) a message without encoding it
    one = p.PeerHandover("run1", 3, "queue:a", 0, False, MESSAGE)
    _, decoded = roundtrip(one)
    assert isinstance(decoded, p.PeerHandover)
    assert decoded.message.encoded == encode_content(MESSAGE)
    other = Message(b"yz", id="m-5", priority=7, properties={"k": 1})
    two = p.PeerHandovers(
        "run1",
        (
            Handover(HandoverKey("run1", 3), "queue:a", MESSAGE),
            Handover(HandoverKey("run1", 4), "topic:t", other, 2, True),
        ),
    )
    _, decoded = roundtrip(two)
    assert isinstance(decoded, p.PeerHandovers)
    contents = [h.message.encoded for h in decoded.handovers]
    assert contents == [encode_content(MESSAGE), encode_content(other)]


def test_encode_send_matches_the_generic_encoder() -> None:
    content = encode_content(MESSAGE)
    fast = encode_send(3, b"queue:a", content, 500, correlation_id=8)
    assert fast == encode_packet(p.Send(3, "queue:a", MESSAGE, 500), correlation_id=8)


@pytest.mark.parametrize(
    ("body", "priority", "persistent", "ttl", "corr"),
    [(b"", 0, False, 0, 0), (b"x" * 1000, 9, True, 60_000, 77), (b"\x00\xff", 4, True, 1, 1)],
)
def test_a_plain_send_is_the_generic_encoding_of_its_message(
    body: bytes, priority: int, persistent: bool, ttl: int, corr: int
) -> None:
    message_id = b"0192f3c4a1b2c3d4e5f60718293a4b5c"
    fast = plain_send_encoder(b"queue:a")(
        body, p.PROTOCOL_VERSION, corr, 3, ttl, priority, persistent, message_id
    )
    message = Message(body, id=message_id.decode(), priority=priority, persistent=persistent)
    assert fast == encode_packet(p.Send(3, "queue:a", message, ttl), correlation_id=corr)


def test_deliver_with_precomputed_content_matches() -> None:
    pk = p.Deliver(4, 1, 0, False, 5, 6, MESSAGE)
    assert encode_packet(pk) == encode_deliver(4, 1, 0, False, 5, 6, encode_content(MESSAGE))


def test_send_with_cached_content_uses_it() -> None:
    other = encode_content(Message(b"other", id="x"))
    data = encode_packet(p.Send(1, "q", MESSAGE, content=other))
    assert data.endswith(other)


@pytest.mark.parametrize(
    "packet",
    [
        p.Error("x" * 70_000, "too long a code"),
        p.Credit(1, -1),
        p.Ack(1 << 33, 1),
        p.Send(1, "q", Message(b"", id="i", properties={"x": 1 << 70})),
        p.Send(1, "q", Message(b"", id="\udcff")),
        p.SessionOpen(1, "bogus"),  # type: ignore[arg-type]
    ],
    ids=lambda x: type(x).__name__,
)
def test_unencodable_packets_raise_local_protocol_error(packet: p.Packet) -> None:
    with pytest.raises(LocalProtocolError):
        encode_packet(packet)


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        ((1, 1), 1),
        ((1, 5), 4),
        ((0, 1), 1),
        ((1, 2), 2),
        ((3, 5), 4),
        ((4, 5), 4),
        ((5, 6), None),
        ((1, 0), None),
    ],
)
def test_negotiate_version(offered: tuple[int, int], chosen: int | None) -> None:
    assert p.negotiate_version(*offered) == chosen


def test_a_session_open_names_its_producer_only_when_it_has_one() -> None:
    named = p.SessionOpen(3, p.SessionAckMode.CLIENT, False, "producer-7")
    plain = p.SessionOpen(3, p.SessionAckMode.CLIENT, False)
    for packet in (named, plain):
        codec = PacketCodec()
        codec.receive_data(encode_packet(packet))
        item = codec.next_packet()
        assert not isinstance(item, NeedData)
        assert item[1] == packet
    assert len(encode_packet(named)) == len(encode_packet(plain)) + 3 + len("producer-7")


def test_ack_mode_compares_as_text() -> None:
    assert p.SessionAckMode("client") is p.SessionAckMode.CLIENT
    assert str(p.SessionAckMode.CLIENT) == "client"
    assert "client" in {p.SessionAckMode.CLIENT}


def test_packets_are_frozen() -> None:
    packet = p.Ack(1, 2)
    with pytest.raises(AttributeError):
        packet.seq = 3  # type: ignore[misc]


def test_content_rejects_bad_priority_and_flags() -> None:
    good = encode_content(Message(b"", id="i"))
    for patch in (b"\x0a\x00", b"\x04\x80"):
        bad = patch + good[2:]
        with pytest.raises(RemoteProtocolError, match="priority or flags"):
            decode_content(bad, 0, len(bad))


# -- properties of arbitrary messages ---------------------------------------------------

_f32 = st.floats(width=32, allow_nan=False).map(Float)
_values = st.one_of(
    st.booleans(),
    st.integers(-128, 127).map(Byte),
    st.integers(-(1 << 15), (1 << 15) - 1).map(Short),
    st.integers(-(1 << 31), (1 << 31) - 1).map(Int),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(-(1 << 63), (1 << 63) - 1).map(Long),
    _f32,
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
_opt_text = st.none() | st.text(max_size=30)
_messages = st.builds(
    Message,
    st.binary(max_size=300),
    id=st.text(min_size=1, max_size=40),
    priority=st.integers(0, 9),
    correlation_id=_opt_text,
    reply_to=_opt_text,
    type=_opt_text,
    persistent=st.booleans(),
    properties=st.dictionaries(st.text(min_size=1, max_size=10), _values, max_size=8),
    kind=st.sampled_from(BodyKind),
)


@given(_messages, st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 64) - 1))
def test_any_message_roundtrips_through_send_and_deliver(m: Message, sid: int, ttl: int) -> None:
    _, send = roundtrip(p.Send(sid, "queue:q", m, ttl))
    assert isinstance(send, p.Send)
    assert send.message == m
    assert send.ttl_ms == ttl
    assert {k: type(v) for k, v in send.message.properties.items()} == {
        k: (int if type(v) is Long else type(v)) for k, v in m.properties.items()
    }
    assert send.content is not None
    delivered = decode_content(send.content, 0, len(send.content), 1024, 5, 6, 7, True)
    assert delivered == m.replace(timestamp=5, expiration=6, delivery_count=7, redelivered=True)


def test_float_keeps_single_precision() -> None:
    m = Message(b"", id="i", properties={"f": Float(0.1)})
    _, send = roundtrip(p.Send(1, "q", m))
    assert isinstance(send, p.Send)
    value = send.message.properties["f"]
    assert type(value) is Float
    assert math.isclose(value, 0.1, rel_tol=1e-7)
    assert value == struct.unpack(">f", struct.pack(">f", 0.1))[0]


def test_management_packets_keep_their_names_and_tags() -> None:
    from chute.protocol import manage_packets  # the module they are declared in

    assert p.Browse is manage_packets.Browse
    assert p.Move is manage_packets.Move
    tags = [
        p.PacketType.MOVE,
        p.PacketType.DEAD_LETTER_RETRY,
        p.PacketType.DEAD_LETTER_RETRY_RESULT,
    ]
    assert [int(t) for t in tags] == [64, 65, 66]  # on the wire: never renumbered
    assert p.DeadLetterRetry().source == "queue:__sys__deadLetter"


def test_encode_send_many_matches_the_generic_encoder_and_keeps_each_content() -> None:
    messages = (MESSAGE, Message(b"two", id="t"), MESSAGE.replace(body=b"x" * 5000))
    contents = [encode_content(m) for m in messages]
    fast = encode_send_many(3, b"queue:a", contents, 500, correlation_id=8)
    assert fast == encode_packet(p.SendMany(3, "queue:a", messages, 500), correlation_id=8)
    _, decoded = roundtrip(p.SendMany(3, "queue:a", messages, 500))
    assert isinstance(decoded, p.SendMany)
    assert [m.encoded for m in decoded.messages] == contents  # spliced on, as a Send's


@given(st.lists(_messages, max_size=12), st.integers(0, (1 << 64) - 1))
def test_any_messages_roundtrip_through_send_many(ms: list[Message], ttl: int) -> None:
    _, decoded = roundtrip(p.SendMany(7, "queue:q", tuple(ms), ttl))
    assert isinstance(decoded, p.SendMany)
    assert (decoded.messages, decoded.ttl_ms, decoded.address) == (tuple(ms), ttl, "queue:q")


def _send_many_body(count: int, *entries: bytes, tail: bytes = b"") -> bytes:
    return struct.pack(">QH", 0, 1) + b"q" + struct.pack(">I", count) + b"".join(entries) + tail


_ONE = encode_content(Message(b"m", id="i"))


@pytest.mark.parametrize(
    "body",
    [
        _send_many_body(1 << 30),  # a count the packet cannot hold
        _send_many_body(2, struct.pack(">I", len(_ONE)) + _ONE),  # one entry short
        _send_many_body(1, struct.pack(">I", 1 << 20) + _ONE),  # an entry overruns
        _send_many_body(1, struct.pack(">I", len(_ONE)) + _ONE, tail=b"junk"),
        _send_many_body(1, struct.pack(">I", 3) + b"abc"),  # not a content block
        struct.pack(">QH", 0, 50) + b"q",  # the address overruns
        _send_many_body(  # more messages than one SendMany may carry, each well formed
            p.SEND_MANY_MAX + 1, *[struct.pack(">I", len(_ONE)) + _ONE] * (p.SEND_MANY_MAX + 1)
        ),
    ],
    ids=["count", "short", "overrun", "trailing", "content", "address", "too-many"],
)
def test_a_malformed_send_many_is_refused_as_malformed(body: bytes) -> None:
    codec = PacketCodec()
    head = HEADER.pack(len(body) + 14, p.PROTOCOL_VERSION, p.PacketType.SEND_MANY, 1, 3, 0)
    codec.receive_data(head + body)
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "malformed-packet"


@pytest.mark.parametrize(
    ("tag", "body"),
    [
        (p.PacketType.MOVE, b"\x00\x01a\x00\x01b\x00" + struct.pack(">I", 1 << 30)),
        (p.PacketType.DEAD_LETTER_RETRY_RESULT, struct.pack(">I", 1 << 30)),
        (p.PacketType.DEAD_LETTER_RETRY_RESULT, struct.pack(">I", 1) + b"\x00\x01a\x00"),
        (p.PacketType.PEER_STATS_PAGE, struct.pack(">QBI", 1, 1, 1 << 30)),
        (p.PacketType.PEER_STATS_PAGE, struct.pack(">QBII", 1, 0, 0, 1 << 30)),
        (p.PacketType.PEER_STATS_PAGE, struct.pack(">QBII", 1, 0, 0, 1) + b"\x00\x01a\x00"),
        (p.PacketType.PEER_STATS_FETCH, struct.pack(">Q", 1) + b"\x00\x05ab"),
    ],
)
def test_lists_that_overrun_the_packet_are_malformed(tag: int, body: bytes) -> None:
    codec = PacketCodec()
    codec.receive_data(HEADER.pack(len(body) + 14, p.PROTOCOL_VERSION, tag, 1, 0, 0) + body)
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_packet()
    assert info.value.error_code == "malformed-packet"


_runs = st.sampled_from(["run1", "a3f9c2d17b40e8a6", "r\u00e9", "x" * 300])


@given(st.lists(st.tuples(_runs, st.integers(0, (1 << 64) - 1)), max_size=40), st.booleans())
def test_keys_are_their_layout_and_roundtrip(pairs: list[tuple[str, int]], one_run: bool) -> None:
    """Keys travel as count u32, then s16 run | u64 n each, whether they share one run
    (packed and read in one call) or not."""
    keys = tuple(("run1", n) for _, n in pairs) if one_run else tuple(pairs)
    layout = struct.pack(">I", len(keys)) + b"".join(
        struct.pack(">H", len(run.encode())) + run.encode() + struct.pack(">Q", n)
        for run, n in keys
    )
    for kind in (p.PeerConfirm, p.PeerRelease, p.PeerRefuse):
        data = encode_packet(kind(keys), version=p.PEER_VERSION)
        assert data[HEADER.size :] == layout
        assert roundtrip(kind(keys))[1] == kind(keys)
