"""SourceCodec and SinkCodec: every frame whole, byte by byte and with trailing bytes
(h11's tr()), limits, the sink's stop-and-wait states, and the fuzz invariant."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.smq import (
    CLOSED,
    NEED_DATA,
    Ack,
    Deliver,
    EndOfSession,
    NeedData,
    Publish,
    Refuse,
    SinkCodec,
    SourceCodec,
    SourceEvent,
)

ID = bytes(range(16))


def frame_m(body: bytes) -> bytes:
    return b"M" + struct.pack(">i", len(body)) + body


def frame_i(ident: bytes, body: bytes) -> bytes:
    return b"I" + ident + struct.pack(">i", len(body)) + body


def events(codec: SourceCodec) -> list[SourceEvent]:
    out: list[SourceEvent] = []
    while not isinstance(event := codec.next_event(), NeedData):
        out.append(event)
    return out


def feed_whole(data: bytes) -> list[SourceEvent]:
    codec = SourceCodec()
    codec.receive_data(data)
    return events(codec)


def feed_bytewise(data: bytes) -> list[SourceEvent]:
    codec = SourceCodec()
    out: list[SourceEvent] = []
    for i in range(len(data)):
        codec.receive_data(data[i : i + 1])
        out += events(codec)
    return out


# -- source --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (frame_m(b"hello"), [Publish(b"hello")]),
        (frame_m(b""), [Publish(b"")]),
        (frame_i(ID, b"x\x00y"), [Publish(b"x\x00y", ID)]),
        (b"E", [EndOfSession()]),
        (
            frame_m(b"a") + frame_i(ID, b"b") + b"E",
            [Publish(b"a"), Publish(b"b", ID), EndOfSession()],
        ),
    ],
)
def test_source_frames_whole_bytewise_and_followed(
    data: bytes, expected: list[SourceEvent]
) -> None:
    assert feed_whole(data) == expected
    assert feed_bytewise(data) == expected
    if expected[-1] != EndOfSession():
        trailing = feed_whole(data + b"M\x00")  # the start of a next frame
        assert trailing == expected


def test_source_eof_between_frames_is_closed() -> None:
    codec = SourceCodec()
    codec.receive_data(frame_m(b"a"))
    codec.receive_data(b"")
    assert codec.next_event() == Publish(b"a")
    assert codec.next_event() is CLOSED


@pytest.mark.parametrize("partial", [b"M", b"M\x00\x00", frame_m(b"abc")[:-1], b"I" + ID[:5]])
def test_source_eof_mid_frame_raises(partial: bytes) -> None:
    codec = SourceCodec()
    codec.receive_data(partial)
    assert codec.next_event() is NEED_DATA
    codec.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="middle of a frame") as info:
        codec.next_event()
    assert info.value.error_code == "truncated-frame"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"X", "unknown-frame"),
        (b"m\x00\x00\x00\x00", "unknown-frame"),
        (b"M\xff\xff\xff\xff", "bad-length"),  # -1, as Java's writeInt writes it
        (b"M\x80\x00\x00\x00", "bad-length"),
        (b"M\x00\x00\x04\x01", "too-large"),  # refused before the body comes
        (b"I" + ID + b"\x7f\xff\xff\xff", "too-large"),
        (b"E" + frame_m(b"late"), "data-after-end"),
    ],
)
def test_source_bad_input_raises_remote_protocol_error(data: bytes, code: str) -> None:
    codec = SourceCodec(max_body_size=1024)
    codec.receive_data(data)
    with pytest.raises(RemoteProtocolError) as info:
        events(codec)
    assert info.value.error_code == code


def test_source_body_at_the_limit_is_accepted() -> None:
    codec = SourceCodec(max_body_size=4)
    codec.receive_data(frame_m(b"1234"))
    assert events(codec) == [Publish(b"1234")]


def test_source_receive_after_eof_is_our_bug() -> None:
    codec = SourceCodec()
    codec.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        codec.receive_data(b"M")


def test_source_large_body_in_many_reads_is_linear() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB in 1 KiB reads
    data = frame_m(body)
    codec = SourceCodec()
    out: list[SourceEvent] = []
    for i in range(0, len(data), 1024):
        codec.receive_data(data[i : i + 1024])
        out += events(codec)
    assert out == [Publish(body)]


def test_stored_is_y() -> None:
    assert SourceCodec.stored() == b"Y"


# -- sink ----------------------------------------------------------------------------


def test_sink_deliver_encodes_m_and_r() -> None:
    codec = SinkCodec()
    assert codec.send(Deliver(ID, b"hi")) == b"M" + ID + b"\x00\x00\x00\x02hi"
    codec.receive_data(b"Y")
    assert codec.next_event() == Ack()
    assert codec.send(Deliver(ID, b"", replay=True)) == b"R" + ID + b"\x00\x00\x00\x00"


def test_sink_is_stop_and_wait() -> None:
    codec = SinkCodec()
    codec.send(Deliver(ID, b"1"))
    assert codec.awaiting_ack
    with pytest.raises(LocalProtocolError):
        codec.send(Deliver(ID, b"2"))
    assert codec.next_event() is NEED_DATA
    codec.receive_data(b"Y")
    assert codec.next_event() == Ack()
    assert not codec.awaiting_ack
    codec.send(Deliver(ID, b"2"))


def test_sink_other_answer_ends_the_session() -> None:
    codec = SinkCodec()
    codec.send(Deliver(ID, b"1"))
    codec.receive_data(b"NY")
    assert codec.next_event() == Refuse(ord("N"))
    with pytest.raises(RemoteProtocolError, match="after its session ended"):
        codec.next_event()
    with pytest.raises(LocalProtocolError):
        codec.send(Deliver(ID, b"2"))


def test_sink_unasked_byte_is_a_protocol_error() -> None:
    codec = SinkCodec()
    codec.receive_data(b"Y")
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_event()
    assert info.value.error_code == "unexpected-byte"


def test_sink_eof() -> None:
    codec = SinkCodec()
    codec.send(Deliver(ID, b"1"))
    codec.receive_data(b"")
    assert codec.next_event() is CLOSED


def test_sink_refuses_a_bad_id() -> None:
    with pytest.raises(LocalProtocolError):
        SinkCodec().send(Deliver(b"short", b""))


# -- fuzz: garbage only ever raises RemoteProtocolError --------------------------------


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=8), eof=st.booleans())
def test_source_garbage_only_raises_remote_protocol_error(chunks: list[bytes], eof: bool) -> None:
    codec = SourceCodec(max_body_size=256)
    try:
        for chunk in chunks:
            if chunk:
                codec.receive_data(chunk)
                events(codec)
        if eof:
            codec.receive_data(b"")
            events(codec)
    except RemoteProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=8), max_size=8),
    deliveries=st.lists(st.booleans(), max_size=8),
)
def test_sink_garbage_only_raises_remote_protocol_error(
    chunks: list[bytes], deliveries: list[bool]
) -> None:
    codec = SinkCodec()
    try:
        for chunk, deliver in zip(chunks, deliveries + [False] * len(chunks), strict=False):
            if deliver and not codec.awaiting_ack and codec.state.value == "idle":
                codec.send(Deliver(ID, chunk))
            if chunk:
                codec.receive_data(chunk)
            while not isinstance(codec.next_event(), NeedData):
                pass
    except RemoteProtocolError:
        pass
