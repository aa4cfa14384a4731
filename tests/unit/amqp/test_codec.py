"""The AMQP codec: frames split anywhere decode the same; content is assembled; garbage
raises only AmqpError with a hard reply code."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from chute.amqp import codec
from chute.amqp.codec import PROTOCOL_HEADER, AmqpCodec, Content, HeartbeatEvent, Method
from chute.amqp.codes import FRAME_ERROR, UNEXPECTED_FRAME, AmqpError
from chute.amqp.properties import shared_content, to_properties
from chute.message import Message
from chute.sansio import NEED_DATA


def _publish(body: bytes, channel: int = 1, frame_max: int = 4096) -> bytes:
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), channel)
    props = {"headers": {"a": 1, "b": [1, None], "c": {"d": 2.5}}, "delivery_mode": 2}
    return method + codec.content(channel, props, body, frame_max)


def _events(data: bytes, step: int) -> list[object]:
    c = AmqpCodec(max_frame_size=4096)
    out: list[object] = []
    for start in range(0, len(data), step):
        c.receive_data(data[start : start + step])
        while (event := c.next_event()) is not NEED_DATA:
            out.append(event)
    return out


@pytest.mark.parametrize("step", [1, 7, 100, 100_000])
def test_content_is_assembled_whatever_the_split(step: int) -> None:
    body = bytes(range(256)) * 40  # several body frames at frame_max 4096
    data = _publish(body) + codec.HEARTBEAT_FRAME + _publish(b"", channel=2)
    events = _events(data, step)
    assert len(events) == 3
    first, beat, empty = events
    assert isinstance(first, Content)
    assert first.body == body
    assert first.properties.headers == {"a": 1, "b": [1, None], "c": {"d": 2.5}}
    assert isinstance(beat, HeartbeatEvent)
    assert isinstance(empty, Content)
    assert empty.body == b""
    assert empty.channel == 2


def test_an_empty_body_has_no_body_frame() -> None:
    frames = codec.content(1, {}, b"", 4096)
    assert len(frames) == 7 + 14 + 1  # the content header frame alone


def test_a_method_inside_content_is_unexpected() -> None:
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    c = AmqpCodec()
    c.receive_data(method + frame.marshal(commands.Basic.Qos(), 1))
    with pytest.raises(AmqpError) as info:
        c.next_event()
    assert info.value.reply_code == UNEXPECTED_FRAME
    assert info.value.hard


def test_a_frame_over_frame_max_is_a_frame_error() -> None:
    c = AmqpCodec(max_frame_size=4096)
    c.receive_data(struct.pack(">BHI", 3, 1, 5000))
    with pytest.raises(AmqpError) as info:
        c.next_event()
    assert info.value.reply_code == FRAME_ERROR


def test_protocol_header() -> None:
    c = AmqpCodec()
    c.receive_data(PROTOCOL_HEADER[:4])
    assert c.read_protocol_header() is NEED_DATA
    c.receive_data(PROTOCOL_HEADER[4:])
    assert c.read_protocol_header() is True
    other = AmqpCodec()
    other.receive_data(b"GET / HTTP/1.1\r\n")
    assert other.read_protocol_header() is False


def test_methods_decode() -> None:
    c = AmqpCodec()
    c.receive_data(frame.marshal(commands.Queue.Declare(queue="celery@host.celery.pidbox"), 3))
    event = c.next_event()
    assert isinstance(event, Method)
    assert event.channel == 3
    assert isinstance(event.method, commands.Queue.Declare)
    assert event.method.queue == "celery@host.celery.pidbox"


def test_server_frames_carry_any_utf8_name() -> None:
    name = "очередь@host ünïcode"
    # a server frame decodes with pamqp as a client would
    _, _, decoded = frame.unmarshal(codec.deliver(1, "ctag", 7, True, "", name))
    assert isinstance(decoded, commands.Basic.Deliver)
    assert decoded.routing_key == name
    assert decoded.delivery_tag == 7
    assert decoded.redelivered is True
    _, _, ok = frame.unmarshal(codec.declare_ok(1, name, 3, 2))
    assert isinstance(ok, commands.Queue.DeclareOk)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 3, 2)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50))
def test_garbage_raises_only_amqp_errors(data: bytes, step: int) -> None:
    c = AmqpCodec(max_frame_size=4096)
    try:
        for start in range(0, len(data), step):
            c.receive_data(data[start : start + step])
            while c.next_event() is not NEED_DATA:
                pass
    except AmqpError as exc:
        hard = exc.hard
        assert hard


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_inside_well_framed_frames_raises_only_amqp_errors(payload: bytes) -> None:
    for kind in (1, 2, 3, 8):
        c = AmqpCodec(max_frame_size=4096)
        method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        c.receive_data((method if kind in (2, 3) else b"") + codec.frame_bytes(kind, 1, payload))
        try:
            while c.next_event() is not NEED_DATA:
                pass
        except AmqpError as exc:
            hard = exc.hard
            assert hard


def test_publish_and_ack_are_read_on_the_fast_path_with_any_utf8_name() -> None:
    name = "ünï@x"
    payload = (
        b"\x00\x3c\x00\x28\x00\x00"
        + codec.shortstr(name)
        + codec.shortstr("key.é")
        + b"\x03"  # mandatory and immediate
    )
    c = AmqpCodec()
    c.receive_data(codec.frame_bytes(1, 1, payload) + codec.content(1, {}, b"", 4096))
    event = c.next_event()
    assert isinstance(event, Content)
    method = event.method
    assert (method.exchange, method.routing_key) == (name, "key.é")
    assert method.mandatory
    assert method.immediate
    c.receive_data(frame.marshal(commands.Basic.Ack(delivery_tag=9, multiple=True), 1))
    ack = c.next_event()
    assert isinstance(ack, Method)
    assert isinstance(ack.method, commands.Basic.Ack)
    assert (ack.method.delivery_tag, ack.method.multiple) == (9, True)


_SIMPLE = commands.Basic.Properties(
    content_type="application/json",
    content_encoding="utf-8",
    delivery_mode=2,
    priority=0,
    correlation_id="c-1",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="m-ü",
    message_type="t",
    user_id="guest",
    app_id="app",
)


@pytest.mark.parametrize("step", [1, 5, 1100, 100_000])
def test_a_publish_read_in_one_go_reads_as_pamqp_does(step: int) -> None:
    # the per-message path reads short-string and octet properties itself: the same
    # values as pamqp's, whether the three frames come together or piece by piece
    method = frame.marshal(commands.Basic.Publish(exchange="x", routing_key="k"), 3)
    head = frame.marshal(header.ContentHeader(0, 1024, _SIMPLE), 3)
    body = frame.marshal(pamqp_body.ContentBody(b"y" * 1024), 3)
    events = _events((method + head + body) * 3, step)
    assert len(events) == 3
    for event in events:
        assert isinstance(event, Content)
        assert event.body == b"y" * 1024
        assert (event.method.exchange, event.method.routing_key) == ("x", "k")
        for slot in commands.Basic.Properties.__slots__:
            assert getattr(event.properties, slot) == getattr(_SIMPLE, slot), slot


def test_a_body_longer_than_its_header_says_is_a_frame_error_read_in_one_go() -> None:
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    head = frame.marshal(header.ContentHeader(0, 2, commands.Basic.Properties()), 1)
    c = AmqpCodec(max_frame_size=4096)
    c.receive_data(method + head + frame.marshal(pamqp_body.ContentBody(b"abc"), 1))
    with pytest.raises(AmqpError) as info:
        c.next_event()
    assert info.value.reply_code == FRAME_ERROR


def test_deliveries_encode_as_pamqp_does() -> None:
    deliver = commands.Basic.Deliver("ctag", 7, True, "ex", "key")
    assert codec.deliver(2, "ctag", 7, True, "ex", "key") == frame.marshal(deliver, 2)
    props = {slot: getattr(_SIMPLE, slot) for slot in reversed(commands.Basic.Properties.__slots__)}
    head = frame.marshal(header.ContentHeader(0, 5, _SIMPLE), 2)
    assert codec.content(2, props, b"hello", 4096) == head + frame.marshal(
        pamqp_body.ContentBody(b"hello"), 2
    )


def test_a_message_shared_by_consumers_is_encoded_for_each_channel() -> None:
    message = Message(b"body", persistent=False, properties={"k": "v"})
    for channel in (1, 1, 2, 1):
        assert shared_content(channel, message, 4096) == codec.content(
            channel, to_properties(message, 0), b"body", 4096
        )
    other = Message(b"other", persistent=False)
    assert shared_content(1, other, 4096) == codec.content(
        1, to_properties(other, 0), b"other", 4096
    )
