"""Compacted streams over the real journal: what a segment being written holds is never
compacted, what is sealed is, and the journal's segments are freed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.core.model.settings import Cleanup, DestinationSettings
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.message import Message

from .test_stream_journal import Node, S

KEYS = 20


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path / "journal", {S: DestinationSettings(cleanup=Cleanup.COMPACT)})
    yield made
    made.close()


def rounds(broker: Broker, count: int, start: int = 0) -> None:
    session = BrokerConnection(broker).session()
    for r in range(start, start + count):
        for k in range(KEYS):
            session.send(S, Message.create(f"{r}".encode().ljust(400, b"."), key=f"k{k}"))


def newest(broker: Broker) -> dict[str | None, int]:
    stream = broker.streams[S]
    out: dict[str | None, int] = {}
    for entry in stream.read(1, stream.head)[1]:
        out[entry.message.key] = int(entry.message.body.rstrip(b"."))
    return out


def test_sealed_moves_at_each_roll_over_and_covers_everything_after_a_restart(
    node: Node,
) -> None:
    assert node.journal is not None
    assert node.journal.sealed(S) == 0
    rounds(node.broker, 1)
    node.journal.flush()
    assert node.journal.sealed(S) == 0  # all in the segment being written
    rounds(node.broker, 20)  # 400 messages of 400 bytes: past a 64 KiB segment
    node.journal.flush()
    sealed = node.journal.sealed(S)
    assert 1 < sealed < node.broker.streams[S].head
    node.restart()
    assert node.journal is not None
    assert node.journal.sealed(S) == node.broker.streams[S].head


def newest_kept_across_a_restart(node: Node) -> None:
    """The newest round (99) of each key is what the stream keeps, also after a restart,
    and the journal's compaction left a few segments."""
    assert newest(node.broker) == {f"k{k}": 99 for k in range(KEYS)}
    broker = node.restart()
    broker.expire_due()
    assert broker.streams[S].count == KEYS
    assert newest(broker) == {f"k{k}": 99 for k in range(KEYS)}
    assert node.segments() <= 3


def test_only_sealed_segments_are_compacted_and_their_space_is_freed(node: Node) -> None:
    rounds(node.broker, 100)  # 2,000 messages, 800 KB: about 13 segments
    assert node.journal is not None
    node.journal.flush()
    before = node.segments()
    stream = node.broker.streams[S]
    node.broker.expire_due()
    sealed = node.journal.sealed(S)
    kept = [e.seq for e in stream.read(1, stream.head)[1]]
    assert kept[-KEYS:] == list(range(stream.head - KEYS, stream.head))
    assert all(seq >= sealed - KEYS for seq in kept)  # older than what is sealed: one per key
    assert set(range(sealed, stream.head)) <= set(kept)  # what is not sealed: all of it
    assert node.segments() < before // 2
    newest_kept_across_a_restart(node)


def test_batches_are_compacted_message_by_message_and_their_segments_freed(
    node: Node,
) -> None:
    # each round is one send_many (one batch in the journal) holding every key: compaction
    # removes all but the newest round's from each batch, the journal's compaction moves
    # what a batch keeps forward, and a restart keeps the newest of each key
    session = BrokerConnection(node.broker).session()
    for r in range(100):
        batch = [Message.create(f"{r}".encode().ljust(400, b"."), key=f"k{k}") for k in range(KEYS)]
        session.send_many(S, batch)
    assert node.journal is not None
    node.journal.flush()
    before = node.segments()
    node.broker.expire_due()
    assert node.segments() < before // 2
    newest_kept_across_a_restart(node)
