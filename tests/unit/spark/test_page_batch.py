"""CursorPage bytes straight to Arrow (chute.spark.pages): the same batch as decoding
the messages and converting them, for any page; only RemoteProtocolError for bad bytes."""

from __future__ import annotations

import contextlib
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.client import requests
from chute.client.protocol import ClientProtocol
from chute.content import encode_content
from chute.errors import RemoteProtocolError
from chute.message import BodyKind, Byte, Float, Int, Long, Message, PropertyValue, Short
from chute.protocol import CursorPage, Header, PacketCodec, PacketType, decode_body, encode_packet
from chute.protocol.columns import RawCursorPage, page_columns
from chute.protocol.spec import HEADER_SIZE
from chute.spark.pages import page_batch
from chute.spark.schema import ARROW_SCHEMA, to_record_batch

ADDRESS = "stream:orders"
TEXT = st.text(max_size=12)  # any unicode, the empty string too
NAMES = st.text(min_size=1, max_size=8)

VALUES: st.SearchStrategy[PropertyValue] = st.one_of(
    st.booleans(),
    st.integers(-128, 127).map(Byte),
    st.integers(-(1 << 15), (1 << 15) - 1).map(Short),
    st.integers(-(1 << 31), (1 << 31) - 1).map(Int),
    st.integers(-(1 << 63), (1 << 63) - 1).map(Long),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(width=32, allow_nan=False).map(Float),
    st.floats(allow_nan=False),
    TEXT,
)

MESSAGES = st.builds(
    Message,
    st.binary(max_size=64),
    id=TEXT,
    priority=st.integers(0, 9),
    timestamp=st.integers(0, 253_402_300_799_999),  # up to the year 9999
    expiration=st.integers(0, 1 << 50),
    correlation_id=st.none() | TEXT,
    reply_to=st.none() | TEXT,
    type=st.none() | TEXT,
    persistent=st.booleans(),
    redelivered=st.booleans(),
    delivery_count=st.integers(0, (1 << 31) - 1),
    properties=st.none() | st.dictionaries(NAMES, VALUES, max_size=5),
    kind=st.sampled_from(list(BodyKind)),
)


def body_of(page: CursorPage) -> bytes:
    return encode_packet(page)[HEADER_SIZE:]


def expected(body: bytes) -> pa.RecordBatch:
    page = decode_body(PacketType.CURSOR_PAGE, Header(), body)
    assert isinstance(page, CursorPage)
    return to_record_batch(ADDRESS, page.messages)


def assert_same(body: bytes) -> None:
    got = page_batch(ADDRESS, body)
    want = expected(body)
    assert got.schema == ARROW_SCHEMA
    assert got.to_pylist() == want.to_pylist()  # a readable difference first
    assert got.equals(want)


@settings(max_examples=150, deadline=None)
@given(st.lists(MESSAGES, max_size=40), st.integers(1, 1 << 62), st.integers(0, 1 << 62))
def test_any_page_gives_the_batch_of_its_decoded_messages(
    messages: list[Message], first: int, next_start: int
) -> None:
    entries = tuple((first + i, m) for i, m in enumerate(messages))
    assert_same(body_of(CursorPage(next_start, entries)))


def test_a_page_of_plain_and_rich_messages_at_scale() -> None:
    entries = []
    for i in range(2000):
        rich = i % 3 == 0
        entries.append(
            (
                i + 1,
                Message(
                    bytes([i % 256]) * (i % 1500),
                    id=f"ID:é-{i}",
                    priority=i % 10,
                    timestamp=1_700_000_000_000 + i,
                    correlation_id=f"c-{i}" if rich else None,
                    redelivered=i % 7 == 0,
                    delivery_count=i % 5,
                    properties={"n": Int(i), "f": Float(0.1), "ok": i % 2 == 0} if rich else None,
                ),
            )
        )
    assert_same(body_of(CursorPage(2001, tuple(entries))))


def test_an_empty_page_is_an_empty_batch() -> None:
    batch = page_batch(ADDRESS, body_of(CursorPage(7)))
    assert batch.num_rows == 0
    assert batch.schema == ARROW_SCHEMA


def test_a_property_named_twice_keeps_its_first_place_and_last_value() -> None:
    message = Message(b"body", id="m", properties={"a": Int(1), "b": "x"})
    block = encode_content(message)
    head_len = 13 + 1  # content head + the id
    props_end = len(block) - len(b"body")
    props = block[head_len:props_end]
    again = encode_content(Message(b"", id="", properties={"a": "late"}))[13:]
    doubled = bytearray(block[:head_len] + props + again + b"body")
    struct.pack_into(">H", doubled, 11, 3)  # three properties now
    entry = struct.pack(">QIBqqI", 5, 0, 0, 0, 0, len(doubled)) + doubled
    body = struct.pack(">QI", 6, 1) + entry
    assert_same(body)
    assert page_batch(ADDRESS, body).column("properties").to_pylist() == [
        [("a", "late"), ("b", "x")]
    ]


def test_bad_utf8_in_an_id_is_a_protocol_error() -> None:
    block = bytearray(encode_content(Message(b"", id="ab")))
    block[13] = 0xFF
    body = struct.pack(">QI", 2, 1) + struct.pack(">QIBqqI", 1, 0, 0, 0, 0, len(block)) + block
    with pytest.raises(RemoteProtocolError):
        page_batch(ADDRESS, body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.data())
def test_garbage_raises_only_remote_protocol_error(noise: bytes, data: st.DataObject) -> None:
    good = body_of(CursorPage(3, ((1, Message(b"xy", id="i", correlation_id="c")),)))
    at = data.draw(st.integers(0, len(good)))
    for body in (noise, good[:at] + noise, good[:at] + noise + good[at:]):
        with contextlib.suppress(RemoteProtocolError):  # any other exception fails the test
            page_batch(ADDRESS, body)
        with contextlib.suppress(RemoteProtocolError):
            page_columns(body)


def test_the_client_keeps_pages_as_bytes_and_decodes_them_where_read() -> None:
    messages = ((4, Message(b"x", id="i", properties={"n": Long(2)})),)
    packet = encode_packet(CursorPage(5, messages), correlation_id=1)
    proto = ClientProtocol()
    proto.codec.receive_data(packet)
    item = proto.codec.next_packet()
    assert isinstance(item, tuple)
    page = item[1]
    assert isinstance(page, RawCursorPage)
    fetch = requests.cursor_fetch("stream:s", None, 4, 5, 0, 0)
    raw = requests.cursor_fetch_raw("stream:s", None, 4, 5, 0, 0)
    next_start, decoded = fetch.parse(page)
    assert next_start == 5
    assert decoded[0][0] == 4
    assert decoded[0][1].properties == {"n": 2}
    assert raw.parse(page) == (5, packet[HEADER_SIZE:])
    plain = PacketCodec()  # a codec that decodes pages: the raw answer is the same bytes
    plain.receive_data(packet)
    item = plain.next_packet()
    assert isinstance(item, tuple)
    assert raw.parse(item[1]) == (5, packet[HEADER_SIZE:])
