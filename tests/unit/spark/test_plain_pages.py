"""Pages of plain messages (no optional strings or properties, ids of one length) take
the columnar way in chute.spark.pages: the same batch as decoding the messages, and
only RemoteProtocolError for bad bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.content import encode_content
from chute.errors import RemoteProtocolError
from chute.message import BodyKind, Message
from chute.protocol import CursorPage
from chute.spark import pages
from chute.spark.pages import page_batch
from tests.unit.spark.test_page_batch import ADDRESS, assert_same, body_of

PLAIN = st.builds(
    Message,
    st.binary(max_size=200),
    priority=st.integers(0, 9),
    timestamp=st.integers(0, 253_402_300_799_999),
    expiration=st.integers(0, 1 << 50),
    persistent=st.booleans(),
    redelivered=st.booleans(),
    delivery_count=st.integers(0, (1 << 31) - 1),
    kind=st.sampled_from(list(BodyKind)),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(PLAIN, min_size=1, max_size=40), st.integers(0, 12), st.integers(1, 1 << 62))
def test_a_plain_page_gives_the_batch_of_its_decoded_messages(
    messages: list[Message], id_length: int, first: int
) -> None:
    for i, m in enumerate(messages):  # one id length, distinct ids
        m.id = f"{i:0{id_length}x}"[-id_length:] if id_length else ""
    body = body_of(
        CursorPage(first + len(messages), tuple((first + i, m) for i, m in enumerate(messages)))
    )
    assert pages._plain(body) is not None  # the columnar way
    assert_same(body)


def test_ids_of_two_lengths_or_a_property_take_the_other_way() -> None:
    two = (Message(b"a", id="x"), Message(b"b", id="yy"))
    rich = (Message(b"a", id="x"), Message(b"b", id="y", properties={"k": "v"}))
    for messages in (two, rich):
        body = body_of(CursorPage(3, tuple((i + 1, m) for i, m in enumerate(messages))))
        assert pages._plain(body) is None
        assert_same(body)


def test_an_id_past_its_content_block_is_a_protocol_error() -> None:
    block = bytearray(encode_content(Message(b"", id="abcd")))
    struct.pack_into(">H", block, 3, 9)  # the id's length: past the block
    entry = struct.pack(">QIBqqI", 1, 0, 0, 0, 0, len(block)) + block
    with pytest.raises(RemoteProtocolError):
        page_batch(ADDRESS, struct.pack(">QI", 2, 1) + entry)


def test_a_bad_priority_in_a_plain_page_is_a_protocol_error() -> None:
    block = bytearray(encode_content(Message(b"xyz", id="abcd")))
    block[0] = 42
    entry = struct.pack(">QIBqqI", 1, 0, 0, 0, 0, len(block)) + block
    with pytest.raises(RemoteProtocolError):
        page_batch(ADDRESS, struct.pack(">QI", 2, 1) + entry)
