"""The cursor and batch-commit packets of the native protocol: round trips and bad input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.message import Message
from chute.protocol import (
    CursorAck,
    CursorClose,
    CursorFetch,
    CursorInfo,
    CursorOpen,
    CursorPage,
    Header,
    PacketCodec,
    PacketType,
    XaCommitBatch,
    decode_body,
    encode_packet,
)
from chute.protocol.spec import HEADER_SIZE

PACKETS = [
    CursorOpen("queue:orders", "spark", "region = 'eu'", 30_000),
    CursorOpen("queue:orders"),
    CursorInfo(1, 1 << 40),
    CursorFetch("topic:t", "c", 5, 10, 100, 1 << 20),
    CursorFetch("queue:q", None, 1, 2),
    CursorAck("queue:q", "c", 99),
    CursorClose("topic:t", "c", delete=True),
    XaCommitBatch("query-1", 7, ("spark/q/7/0/0/ab", "spark/q/7/1/0/cd"), keep=True),
    XaCommitBatch("job", 0, (), keep=False),
    CursorPage(11, ((3, Message(b"x", id="i1", properties={"n": 1})), (9, Message(b"")))),
    CursorPage(4),
]


@pytest.mark.parametrize("packet", PACKETS, ids=lambda p: type(p).__name__)
def test_round_trip_through_the_codec(packet: object) -> None:
    data = encode_packet(packet, correlation_id=3)  # type: ignore[arg-type]
    codec = PacketCodec()
    for i in range(len(data)):  # byte by byte, as h11's tests feed
        codec.receive_data(data[i : i + 1])
    header, decoded = codec.next_packet()  # type: ignore[misc]
    assert header.correlation_id == 3
    assert decoded == packet


def test_tags_are_stable() -> None:
    assert (PacketType.XA_COMMIT_BATCH, PacketType.CURSOR_OPEN, PacketType.CURSOR_CLOSE) == (
        36,
        50,
        55,
    )


def test_values_the_wire_cannot_carry_are_refused() -> None:
    with pytest.raises(LocalProtocolError):
        encode_packet(CursorFetch("queue:q", None, -1, 2))
    with pytest.raises(LocalProtocolError):
        encode_packet(XaCommitBatch("s", 0, "not-a-tuple"))  # type: ignore[arg-type]


def test_string_list_count_past_the_packet_is_malformed() -> None:
    body = encode_packet(XaCommitBatch("s", 0, ("a",)))[HEADER_SIZE:]
    lying = body[:10] + b"\xff\xff\xff\xff" + body[14:]
    with pytest.raises(RemoteProtocolError, match="overruns"):
        decode_body(PacketType.XA_COMMIT_BATCH, Header(), lying)


@given(
    st.sampled_from(
        [
            PacketType.CURSOR_OPEN,
            PacketType.CURSOR_INFO,
            PacketType.CURSOR_FETCH,
            PacketType.CURSOR_PAGE,
            PacketType.CURSOR_ACK,
            PacketType.CURSOR_CLOSE,
            PacketType.XA_COMMIT_BATCH,
        ]
    ),
    st.binary(max_size=200),
)
def test_garbage_bodies_raise_only_remote_protocol_error(tag: int, body: bytes) -> None:
    with contextlib.suppress(RemoteProtocolError):  # any other exception fails the test
        decode_body(tag, Header(), body)
