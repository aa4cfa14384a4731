"""A producer's messages as content blocks (chute.client.outgoing): send's and send_many's."""

from __future__ import annotations

import pytest

from chute.client.outgoing import SEND_MANY_BYTES, SendOptions, content_of, contents_of
from chute.content import decode_content, encode_content
from chute.errors import InvalidMessage
from chute.message import BodyKind, Int, Message
from chute.protocol.packets import SEND_MANY_MAX


def test_a_message_s_block_is_its_content_and_a_body_gets_send_s_defaults() -> None:
    full = Message(b"b", id="m-1", priority=9, type="t", properties={"n": Int(1)})
    [[block, plain, text]] = contents_of([full, b"plain", "text"])
    assert block == encode_content(full)
    got = decode_content(plain, 0, len(plain), 64)
    assert (got.body, got.kind, got.priority, got.persistent) == (b"plain", BodyKind.BYTES, 4, True)
    assert got.id
    assert decode_content(text, 0, len(text), 64).kind is BodyKind.TEXT
    assert content_of(b"x", SendOptions(id="fixed")) == encode_content(Message(b"x", id="fixed"))


@pytest.mark.parametrize(
    "item",
    [
        42,
        Message(b"x", priority=10),
        Message(b"x", id="bad\nid"),
        Message(b"x", properties={"": 1}),
        Message(b"x", type="t" * 70_000),
    ],
    ids=["not-a-message", "priority", "id", "property", "too-long"],
)
def test_a_bad_item_raises_before_its_run_is_given(item: object) -> None:
    runs = contents_of([b"fine", item])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage):
        next(runs)


def test_runs_split_at_the_byte_and_count_bounds() -> None:
    tiny = list(contents_of([b"t"] * (2 * SEND_MANY_MAX + 1)))
    assert [len(run) for run in tiny] == [SEND_MANY_MAX, SEND_MANY_MAX, 1]
    big = list(contents_of([b"x" * (SEND_MANY_BYTES // 3)] * 7))
    assert [len(run) for run in big] == [2, 2, 2, 1]
    assert all(sum(map(len, run)) <= SEND_MANY_BYTES for run in big)
    assert [len(run) for run in contents_of([b"y" * (2 * SEND_MANY_BYTES)])] == [1]
    assert list(contents_of([])) == []
