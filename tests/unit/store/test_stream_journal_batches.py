"""A stream's batches over the real journal, read back from it at every boundary: reads
and pages starting inside a batch, retention cutting one, a selector matching part of
one, a reader stopping inside one and another going on from there, before and after a
restart (the stream's tail kept tiny, so that reads go to the journal's batches)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chute import content
from chute.content import encode_content
from chute.core.model import stream as stream_module
from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.message import Int, Message
from chute.store import payload
from tests.unit.store.helpers import count_decodes
from tests.unit.store.test_stream_journal import Node, Taker

S = "stream:s"
BATCHES = (7, 1, 30, 13, 50, 2, 25, 4)
KEEP = 95  # retention cuts the batch of 50 inside


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stream_module, "TAIL_BYTES", 1 << 10)
        patch.setattr(stream_module, "TAIL_MIN", 1 << 10)
        made = Node(tmp_path / "journal", {S: DestinationSettings(max_messages=KEEP)})
        yield made
        made.close()


def fill(broker: Broker) -> list[Message]:
    session = BrokerConnection(broker).session()
    sent: list[Message] = []
    for size in BATCHES:
        batch = [
            Message(f"m{len(sent) + i}".encode() * 30, properties={"r": Int((len(sent) + i) % 4)})
            for i in range(size)
        ]
        session.send_many(S, batch)
        sent += batch
    return sent


def check_reads(stream: Stream, bodies: dict[int, bytes]) -> None:
    kept = sorted(bodies)
    assert (stream.first, stream.head, stream.count) == (kept[0], kept[-1] + 1, len(kept))
    for start in range(1, stream.head + 1):
        after = [s for s in kept if s >= start]
        for every in (1, 3, 16, 0):
            nxt, got = stream.read(start, stream.head, max_messages=every)
            want = after[:every] if every else after
            assert [(e.seq, e.message.body) for e in got] == [(s, bodies[s]) for s in want]
            assert nxt == (want[-1] + 1 if every and len(after) > every else stream.head)
            _, blocks = stream.read_blocks(start, stream.head, max_messages=every)
            assert [b[0] for b in blocks] == want
            assert [bytes(b[5]) for b in blocks] == [encode_content(e.message) for e in got]


def read(broker: Broker, offset: str, selector: str | None = None, most: int = 0) -> list[int]:
    """The offsets a client-ack reader from ``offset`` gets (``most``: it stops after that
    many, inside a batch)."""
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    taker = Taker()
    consumer = session.consumer(1, S, taker, prefetch=7, offset=offset, selector=selector)
    got: list[int] = []
    while taker.got and not (most and len(got) >= most):
        batch, taker.got = taker.got, []
        got += [e.seq for e in batch]
        session.ack(consumer, batch[-1].seq)
        BrokerSession.add_credit(consumer, len(batch))
    session.close_consumer(consumer)
    return got[:most] if most else got


def test_batches_are_read_back_from_the_journal_at_every_boundary(node: Node) -> None:
    sent = fill(node.broker)
    total = len(sent)
    first = total - KEEP + 1  # inside the batch of 50
    bodies = {seq: sent[seq - 1].body for seq in range(first, total + 1)}
    for broker in (node.broker, node.restart()):
        stream = broker.streams[S]
        check_reads(stream, bodies)
        assert read(broker, "first") == sorted(bodies)
        matching = [s for s in sorted(bodies) if (s - 1) % 4 < 2]
        assert read(broker, "first", "r < 2") == matching
        stopped = read(broker, str(first + 20), most=9)  # from inside a batch, stops in one
        assert stopped == list(range(first + 20, first + 29))
        assert read(broker, str(stopped[-1] + 1)) == list(range(stopped[-1] + 1, total + 1))


def test_retention_past_the_tail_removes_without_decoding_what_it_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "TAIL_BYTES", 1 << 10)
    monkeypatch.setattr(stream_module, "TAIL_MIN", 1 << 10)
    node = Node(tmp_path / "journal", {S: DestinationSettings(max_messages=100)})
    try:
        decoded = count_decodes(monkeypatch)
        session = BrokerConnection(node.broker).session()
        sent = [Message(f"r{i}".encode() * 50) for i in range(1000)]
        for i in range(0, 1000, 100):
            session.send_many(S, sent[i : i + 100])
        stream = node.broker.streams[S]
        assert (stream.first, stream.head, stream.count) == (901, 1001, 100)
        assert stream.bytes == sum(m.size for m in sent[900:])
        assert decoded() < 100  # not one for each of the 900 removed
        monkeypatch.setattr(payload, "decode_content", content.decode_content)  # count no more
        assert [e.message.body for e in stream.read(1, stream.head)[1]] == [
            m.body for m in sent[900:]
        ]
    finally:
        node.close()
