"""STOMP's mapping of streams, as RabbitMQ's STOMP plugin reads them: ``/stream/NAME``,
the SUBSCRIBE's ``x-stream-offset`` and the MESSAGE's ``x-stream-offset``."""

from __future__ import annotations

import pytest

from chute.errors import ConsumerError, InvalidAddress
from chute.message import Message
from chute.stomp import SERVER_COMMANDS, Frame, StompCodec
from chute.stomp.adapter import (
    AckToken,
    message_frame,
    stream_offset,
    subscribe_options,
    to_address,
    to_destination,
)
from chute.stomp.delivery import MessageEncoder


def test_stream_destinations_map_both_ways() -> None:
    assert to_address("/stream/events") == "stream:events"
    assert to_address("stream:events") == "stream:events"
    assert to_destination("stream:events") == "/stream/events"


def test_an_unknown_prefix_names_every_destination_form() -> None:
    with pytest.raises(InvalidAddress, match="/stream/NAME"):
        to_address("/exchange/x")


@pytest.mark.parametrize(
    "value",
    ["first", "last", "next", "FIRST", "offset=0", "offset=17", "17", "timestamp=1700000000"],
)
def test_every_rabbitmq_offset_form_is_taken_as_written(value: str) -> None:
    assert stream_offset(value) == value  # the core reads the text itself


@pytest.mark.parametrize("value", ["", "start", "offset=-1", "offset=x", "timestamp=", "10m"])
def test_a_bad_offset_is_refused_with_the_forms(value: str) -> None:
    with pytest.raises(ConsumerError) as caught:
        stream_offset(value)
    reason = caught.value.reason
    assert reason.startswith("x-stream-offset must be first, last, next, offset=N")
    assert "timestamp=T" in reason
    assert repr(value) in reason


def test_subscribe_reads_the_offset_header_and_defaults_to_none() -> None:
    frame = Frame("SUBSCRIBE", (("destination", "/stream/s"), ("id", "1")))
    assert subscribe_options(frame, "1.2").offset is None  # the core reads from next
    frame = Frame(
        "SUBSCRIBE",
        (("destination", "/stream/s"), ("id", "1"), ("x-stream-offset", "offset=5")),
    )
    assert subscribe_options(frame, "1.2").offset == "offset=5"
    frame = Frame(
        "SUBSCRIBE", (("destination", "/stream/s"), ("id", "1"), ("x-stream-offset", "nope"))
    )
    with pytest.raises(ConsumerError, match="x-stream-offset must be"):
        subscribe_options(frame, "1.2")


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("consumer_id", [None, 3])
@pytest.mark.parametrize(("delivery_count", "redelivered"), [(1, False), (2, True)])
def test_the_fast_encoder_writes_the_offset_as_message_frame_does(
    version: str, consumer_id: int | None, delivery_count: int, redelivered: bool
) -> None:
    message = Message(b"payload", id="m-9", properties={"k": "v"})
    prefix = None if consumer_id is None else AckToken.prefix(consumer_id)
    encoder = MessageEncoder("/stream/s", "sub", prefix, version, stream=True)
    codec = StompCodec(version=version, commands=SERVER_COMMANDS)
    expected = codec.send(
        message_frame(
            message,
            destination="/stream/s",
            subscription="sub",
            ack=None if consumer_id is None else AckToken.make(consumer_id, 41),
            delivery_count=delivery_count,
            redelivered=redelivered,
            version=version,
            stream_offset=41,
        )
    )
    assert encoder.encode(message, 41, delivery_count, redelivered) == expected


def test_a_message_from_a_stream_carries_its_offset_and_no_property_shadows_it() -> None:
    # a message read from a stream and sent on with every header it had
    message = Message(b"x", id="m-1", properties={"x-stream-offset": "3", "n": "1"})
    client = StompCodec(commands=SERVER_COMMANDS)
    client.receive_data(
        MessageEncoder("/stream/s", "0", None, "1.2", stream=True).encode(message, 12, 1, False)
    )
    client.receive_data(MessageEncoder("/queue/q", "0", None, "1.2").encode(message, 12, 1, False))
    from_stream, from_queue = client.next_frame(), client.next_frame()
    assert isinstance(from_stream, Frame)
    assert isinstance(from_queue, Frame)
    assert [v for k, v in from_stream.headers if k == "x-stream-offset"] == ["12"]
    assert from_queue.header("x-stream-offset") is None
    assert from_queue.header("n") == "1"
