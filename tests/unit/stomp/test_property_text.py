"""Typed properties reach a STOMP client as their plain values, as ActiveMQ and RabbitMQ
write JMS typed properties into STOMP headers: ``-128``, never ``Byte(-128)``."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.content import decode_content, encode_content
from chute.dropbox.transcoder import decode_filename
from chute.message import Byte, Float, Int, Long, Message, PropertyValue, Short
from chute.stomp import SERVER_COMMANDS, Frame, StompCodec
from chute.stomp.adapter import message_frame, property_text
from chute.stomp.delivery import MessageEncoder

EVERY_TYPE: dict[str, PropertyValue] = {
    "b": True,
    "y": Byte(-128),
    "h": Short(-20000),
    "i": Int(0),
    "n": Int(2147483647),
    "l": Long(-9223372036854775808),
    "plain": 9223372036854775807,
    "f": Float(1.25),
    "d": 2.5,
    "s": "text",
}
SHOWN = {
    "b": "true",
    "y": "-128",
    "h": "-20000",
    "i": "0",
    "n": "2147483647",
    "l": "-9223372036854775808",
    "plain": "9223372036854775807",
    "f": "1.25",
    "d": "2.5",
    "s": "text",
}


def single(value: float) -> float:
    """``value`` as a 32-bit float holds it."""
    rounded: float = struct.unpack(">f", struct.pack(">f", value))[0]
    return rounded


def as_a_client_reads(message: Message, version: str) -> Frame:
    """The MESSAGE frame the broker's hot path writes, parsed as a client parses it."""
    encoder = MessageEncoder("/queue/q", "0", None, version)
    client = StompCodec(version=version, commands=SERVER_COMMANDS)
    client.receive_data(encoder.encode(message, 1, 1, False))
    frame = client.next_frame()
    assert isinstance(frame, Frame)
    return frame


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_every_jms_type_reaches_a_client_as_its_plain_value(version: str) -> None:
    frame = as_a_client_reads(Message(b"", id="m", properties=dict(EVERY_TYPE)), version)
    assert {name: frame.header(name) for name in SHOWN} == SHOWN


def test_the_general_encoder_writes_the_same_values() -> None:
    frame = message_frame(
        Message(b"", id="m", properties=dict(EVERY_TYPE)),
        destination="/queue/q",
        subscription="0",
        ack=None,
        delivery_count=1,
        redelivered=False,
        version="1.2",
    )
    assert {name: frame.header(name) for name in SHOWN} == SHOWN


def test_a_dropboxmq_message_s_narrow_integers_are_plain() -> None:
    """The issue's own case: a DropboxMQ name with byte, short and int properties."""
    decoded = decode_filename("0.1795418161834000-1189107306.T.....hH=-20000&yY=-128&iI=0&fF=0%2E1")
    frame = as_a_client_reads(decoded.to_message(b""), "1.2")
    assert [frame.header(n) for n in ("h", "y", "i", "f")] == ["-20000", "-128", "0", "0.1"]


def test_a_float_that_crossed_the_native_wire_shows_as_java_shows_it() -> None:
    """The wire holds a JMS float in 32 bits; the text is Java's Float.toString digits."""
    sent = Message(b"", id="m", properties={"f": Float(1.1), "g": Float(0.1), "d": 1.1})
    data = encode_content(sent)
    received = decode_content(data, 0, len(data))
    assert received.properties["f"] != 1.1  # the 32-bit value, read back as a double
    frame = as_a_client_reads(received, "1.2")
    assert [frame.header(n) for n in ("f", "g", "d")] == ["1.1", "0.1", "1.1"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (Float(math.nan), "NaN"),
        (Float(math.inf), "Infinity"),
        (Float(-math.inf), "-Infinity"),
    ],
)
def test_values_that_are_not_numbers_use_the_names_every_client_parses(
    value: float, text: str
) -> None:
    """Java's names: Java, JavaScript and Python parse them; Python's ``inf``/``nan`` only
    Python does."""
    assert property_text(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_double_reads_back_exactly(value: float) -> None:
    assert float(property_text(value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_a_float_reads_back_as_the_same_32_bit_value_in_few_digits(value: float) -> None:
    text = property_text(Float(value))
    assert single(float(text)) == value
    mantissa = text.split("e")[0].lstrip("-").replace(".", "").strip("0")
    assert len(mantissa) <= 9  # 9 significant digits tell any two 32-bit floats apart
