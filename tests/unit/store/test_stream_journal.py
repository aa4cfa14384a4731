"""Streams over the real journal: what a stream keeps survives a restart, and retention
gives the journal's segments back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.offsets import Offset
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.store.journal import Journal
from chute.store.segment import list_segments

S = "stream:s"
BODY = b"x" * 200
START = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


class Taker:
    def __init__(self) -> None:
        self.got: list[Entry] = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.got.append(entry)


class Node:
    """A broker over a journal in a directory, restarted as a server is: close, reopen."""

    def __init__(self, directory: Path, settings: dict[str, DestinationSettings]) -> None:
        self.directory = directory
        self.settings = SettingsResolver(settings)
        self.clock = Clock()
        self.journal: Journal | None = None
        self.broker = self.start()

    def start(self) -> Broker:
        self.journal = Journal(self.directory, sync="never", segment_size=64 << 10)
        broker = Broker(self.journal, self.settings, clock=self.clock)
        broker.recover()
        return broker

    def restart(self) -> Broker:
        self.close()
        self.broker = self.start()
        return self.broker

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    @property
    def stream(self) -> Stream:
        return self.broker.streams[S]

    def segments(self) -> int:
        assert self.journal is not None
        self.journal.flush()
        self.journal.reclaim()
        return len(list_segments(str(self.directory)))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path / "journal", {})
    yield made
    made.close()


def send(broker: Broker, n: int, start: int = 0) -> None:
    session = BrokerConnection(broker).session()
    for i in range(start, start + n):
        session.send(S, Message.create(BODY + str(i).encode()))


def expected(n: int, start: int = 0) -> list[bytes]:
    return [BODY + str(i).encode() for i in range(start, start + n)]


def read_from(broker: Broker, offset: str | int) -> list[Entry]:
    """Everything a client-ack reader from ``offset`` gets, acking and giving credit back."""
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    taker = Taker()
    consumer = session.consumer(1, S, taker, prefetch=100, offset=offset)
    got: list[Entry] = []
    while taker.got:
        batch, taker.got = taker.got, []
        got += batch
        session.ack(consumer, batch[-1].seq)
        BrokerSession.add_credit(consumer, len(batch))
    session.close_consumer(consumer)
    return got


def test_a_stream_survives_a_restart(node: Node) -> None:
    stamps = []
    for i in range(5):
        stamps.append(node.clock.now)
        send(node.broker, 400, start=400 * i)
        node.clock.now += 1000
    before = node.stream
    figures = (before.count, before.bytes, before.first, before.head, before.last)
    assert figures[0] == 2000
    after = node.restart().streams[S]
    assert (after.count, after.bytes, after.first, after.head, after.last) == figures
    assert [e.message.body for e in after.read(1, after.head)[1]] == expected(2000)
    got = read_from(node.broker, "first")
    assert [e.seq for e in got] == list(range(1, 2001))
    assert [e.message.body for e in got] == expected(2000)
    assert after.locate(Offset("timestamp", stamps[3])) == 1201
    assert after.locate(Offset("timestamp", stamps[3] - 1)) == 1201
    assert [e.seq for e in read_from(node.broker, f"timestamp={stamps[4]}")][:2] == [1601, 1602]
    send(node.broker, 1, start=2000)  # numbering goes on after the restart
    assert after.last == 2001
    assert [e.seq for e in read_from(node.broker, "last")] == [2001]


def test_retention_removes_messages_and_the_journal_their_segments(tmp_path: Path) -> None:
    node = Node(tmp_path / "j", {S: DestinationSettings(max_messages=200)})
    try:
        send(node.broker, 200)
        at_first = node.segments()
        send(node.broker, 3000, start=200)
        assert node.stream.count == 200
        assert node.stream.first == 3001
        many = node.segments()
        assert many <= at_first + 2  # segments of removed messages went
        broker = node.restart()
        stream = broker.streams[S]
        assert (stream.count, stream.first, stream.head) == (200, 3001, 3201)
        assert [e.message.body for e in read_from(broker, "first")] == expected(200, 3000)
    finally:
        node.close()


def test_age_retention_gives_segments_back(tmp_path: Path) -> None:
    node = Node(tmp_path / "j", {S: DestinationSettings(max_age_ms=60_000)})
    try:
        send(node.broker, 3000)
        full = node.segments()
        assert full > 3
        node.clock.now += 60_001
        send(node.broker, 10, start=3000)
        node.broker.expire_due()
        node.broker.expire_due()  # retention removes a step at a time
        node.broker.expire_due()
        assert node.stream.count == 10
        assert node.segments() < full
        broker = node.restart()
        stream = broker.streams[S]
        assert (stream.count, stream.first, stream.head) == (10, 3001, 3011)
    finally:
        node.close()


def test_offsets_never_go_back_after_everything_went(tmp_path: Path) -> None:
    node = Node(tmp_path / "j", {S: DestinationSettings(max_age_ms=1000)})
    try:
        send(node.broker, 3000)
        node.clock.now += 2000
        for _ in range(3):
            node.broker.expire_due()
        assert (node.stream.count, node.stream.head) == (0, 3001)
        node.segments()
        broker = node.restart()
        send(broker, 1, start=3000)
        assert [e.seq for e in read_from(broker, "first")] == [3001]
    finally:
        node.close()


def test_a_prepared_send_survives_a_restart_and_commits(node: Node) -> None:
    send(node.broker, 3)
    tx = BrokerConnection(node.broker).session(AckMode.CLIENT, transacted=True)
    tx.send(S, Message.create(b"prepared"))
    tx.prepare("xid-1")
    send(node.broker, 2, start=3)
    broker = node.restart()
    stream = broker.streams[S]
    assert broker.xa.xids() == ["xid-1"]
    assert (stream.head, stream.count) == (4, 5)
    assert [e.seq for e in read_from(broker, "first")] == [1, 2, 3]
    broker.xa.commit("xid-1")
    assert (stream.head, stream.count, stream.last) == (7, 6, 6)
    bodies = [e.message.body for e in read_from(broker, "first")]
    assert bodies == [*expected(3), b"prepared", *expected(2, 3)]
    broker = node.restart()
    assert [e.message.body for e in read_from(broker, "first")] == bodies


def test_a_purged_stream_stays_empty_after_a_restart(node: Node) -> None:
    send(node.broker, 500)
    assert node.broker.destinations.purge(S) == 500
    broker = node.restart()
    stream = broker.streams[S]
    assert (stream.count, stream.first, stream.head) == (0, 501, 501)
    assert read_from(broker, "first") == []
