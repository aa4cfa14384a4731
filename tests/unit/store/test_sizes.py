"""A queue's bytes survive a restart exactly, whatever record type brought its messages."""

from __future__ import annotations

import pytest

from chute.content import content_size, encode_content
from chute.core.model.store import AckOp, AddOp, QueueDefinition, QueueKind
from chute.message import Message, PropertyValue
from chute.store.reclaim import LiveIndex
from chute.store.recovery import recover_lazily

from .conftest import Journals
from .helpers import rich_message


def sized(i: int) -> Message:
    """Messages of varied sizes: bodies, string properties with non-ASCII text, numbers."""
    properties: dict[str, PropertyValue] = {"n": i}
    if i % 3:
        properties["région"] = "é" * (i % 17)
    return Message(b"x" * (50 + 37 * (i % 29)), id=f"m{i}", properties=properties)


@pytest.mark.parametrize(
    "message",
    [
        Message(b"", id="empty"),
        Message(b"body", id="plain", correlation_id="c", reply_to="queue:r", type="t"),
        rich_message(),
        sized(4),
        Message(b"\xff" * 1000, id="ü", properties={"ключ": "значение", "x": 1.5}),
    ],
    ids=["empty", "plain", "rich", "non-ascii", "utf8-properties"],
)
def test_content_size_is_message_size(message: Message) -> None:
    block = encode_content(message)
    assert content_size(block, 0, len(block)) == message.size


def test_lazy_recovery_counts_the_real_bytes_of_every_record_type(journals: Journals) -> None:
    journal = journals.open(segment_size=64 << 10)
    journal.define(QueueDefinition("q", QueueKind.QUEUE))
    messages: dict[int, Message] = {}
    seq = 0

    def op() -> AddOp:
        nonlocal seq
        seq += 1
        messages[seq] = sized(seq)
        return AddOp("q", ("q",), seq, messages[seq])

    for _ in range(40):  # plain adds
        journal.add(op())
    for _ in range(10):  # local transactions (the Spark sink's batches are commits too)
        journal.commit([op() for _ in range(8)])
    for n in range(5):  # prepared, then committed (two-phase)
        xid = f"xa-{n}"
        journal.prepare(xid, [op() for _ in range(6)])
        journal.commit_prepared(xid)
    for gone in range(1, 200, 7):  # some acked, so what is live is not all that was written
        if gone in messages:
            journal.ack(AckOp("q", gone))
            del messages[gone]
    journal.flush()
    journal.reclaim()  # compaction copies some forward as plain adds: still counted right
    journal.close()

    recovered, _ = recover_lazily(str(journals.directory), index=LiveIndex(), window_bytes=4096)
    window = recovered.messages["q"]
    count, paged_bytes = recovered.paged["q"]
    assert len(window) + count == len(messages)
    assert sum(s.message.size for s in window) + paged_bytes == sum(
        m.size for m in messages.values()
    )
