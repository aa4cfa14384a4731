"""Cursors (range reads that consume only on ack) and idempotent batch commits, in the core."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.batches import BATCHES, Marker
from chute.core.rules.broker import Broker
from chute.core.rules.cursor import DEFAULT_LEASE_MS
from chute.errors import ConsumerError, InvalidAddress, NotFound, TransactionError

from .helpers import FakeClock, Recorder, bodies, msg, restart


def fill(broker: Broker, address: str, n: int, prefix: str = "m") -> None:
    for i in range(n):
        broker.send(address, msg(f"{prefix}{i}".encode()))


def read(broker: Broker, address: str, name: str | None, start: int, end: int) -> list[bytes]:
    out: list[bytes] = []
    while start < end:
        start, entries = broker.cursors.fetch(address, name, start, end, max_messages=3)
        out.extend(bodies(entries))
    return out


def prepare(broker: Broker, xid: str, address: str, body: bytes) -> None:
    tx = BrokerConnection(broker).session(transacted=True)
    tx.send(address, msg(body))
    tx.prepare(xid)


def test_range_read_does_not_consume_and_pages(broker: Broker) -> None:
    fill(broker, "queue:q", 10)
    assert broker.cursors.open("queue:q", "c") == (1, 11)
    assert read(broker, "queue:q", "c", 3, 9) == [f"m{i}".encode() for i in range(2, 8)]
    assert read(broker, "queue:q", "c", 3, 9) == [f"m{i}".encode() for i in range(2, 8)]
    next_start, page = broker.cursors.fetch("queue:q", "c", 1, 11, max_messages=4)
    assert (next_start, [e.seq for e in page]) == (5, [1, 2, 3, 4])
    assert broker.queues["queue:q"].held == 10


def test_fetch_pages_by_bytes(broker: Broker) -> None:
    fill(broker, "queue:q", 5)
    size = looking.browse(broker, "queue:q")[0].message.size
    next_start, page = broker.cursors.fetch("queue:q", None, 1, 6, max_bytes=2 * size)
    assert (next_start, len(page)) == (3, 2)


def test_cursor_holds_the_queue_and_ack_consumes_below_end(broker: Broker) -> None:
    fill(broker, "queue:q", 6)
    broker.cursors.open("queue:q", "c")
    recorder = Recorder()
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "queue:q", recorder)
    fill(broker, "queue:q", 1, "late")
    assert recorder.entries == []  # held: nobody else takes the leased messages
    assert broker.cursors.ack("queue:q", "c", 4) == 3
    assert broker.cursors.open("queue:q", "c") == (4, 8)
    assert read(broker, "queue:q", "c", 1, 8) == [b"m3", b"m4", b"m5", b"late0"]
    broker.cursors.close("queue:q", "c")
    assert bodies(recorder.entries) == [b"m3", b"m4", b"m5", b"late0"]


def test_cursor_refuses_a_queue_with_messages_in_flight(broker: Broker) -> None:
    fill(broker, "queue:q", 2)
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "queue:q", Recorder())
    with pytest.raises(ConsumerError, match="in flight"):
        broker.cursors.open("queue:q", "c")


def test_selector_on_a_queue_reads_and_acks_only_matches(broker: Broker) -> None:
    for i in range(6):
        broker.send("queue:q", msg(f"m{i}".encode(), properties={"odd": i % 2 == 1}))
    broker.cursors.open("queue:q", "c", selector="odd = TRUE")
    assert read(broker, "queue:q", "c", 1, 7) == [b"m1", b"m3", b"m5"]
    broker.cursors.ack("queue:q", "c", 7)
    assert bodies(looking.browse(broker, "queue:q")) == [b"m0", b"m2", b"m4"]


def test_topic_cursor_is_a_durable_subscription(broker: Broker) -> None:
    broker.send("topic:t", msg(b"before"))
    assert broker.cursors.open("topic:t", "c") == (2, 2)
    fill(broker, "topic:t", 3)
    assert broker.cursors.open("topic:t", "c") == (2, 5)
    assert read(broker, "topic:t", "c", 2, 5) == [b"m0", b"m1", b"m2"]
    broker.cursors.ack("topic:t", "c", 4)
    fresh = restart(broker)
    assert read(fresh, "topic:t", "c", 1, 5) == [b"m2"]  # found again after a restart
    with pytest.raises(ConsumerError, match="selector"):
        fresh.cursors.open("topic:t", "c", selector="x = 1")
    fresh.cursors.close("topic:t", "c", delete=True)
    assert fresh.topics["topic:t"].subscriptions == {}


def test_head_stops_below_prepared_sends(broker: Broker) -> None:
    fill(broker, "queue:q", 2)
    prepare(broker, "x1", "queue:q", b"staged")
    fill(broker, "queue:q", 1, "after")
    assert broker.cursors.open("queue:q", "c") == (1, 3)  # seq 3 waits for its commit
    broker.xa.commit("x1")
    assert broker.cursors.open("queue:q", "c") == (1, 5)
    assert read(broker, "queue:q", "c", 1, 5) == [b"m0", b"m1", b"staged", b"after0"]


def test_lease_outlives_the_connection_for_lease_ms(broker: Broker, clock: FakeClock) -> None:
    fill(broker, "queue:q", 1)
    conn = BrokerConnection(broker)
    broker.cursors.open("queue:q", "c", lease_ms=1000, owner=conn.id)
    recorder = Recorder()
    BrokerConnection(broker).session().consumer(1, "queue:q", recorder)
    clock.advance(5000)
    assert broker.cursors.expire(clock.now) == []  # its connection lives
    conn.close()
    broker.cursors.expire(clock.now)
    clock.advance(999)
    assert broker.cursors.expire(clock.now) == []
    clock.advance(1)
    assert broker.cursors.expire(clock.now) == ["c"]
    assert bodies(recorder.entries) == [b"m0"]
    assert DEFAULT_LEASE_MS > 0


def test_requests_for_unknown_cursors_and_topics_fail_clearly(broker: Broker) -> None:
    with pytest.raises(NotFound, match="not open"):
        broker.cursors.fetch("queue:q", "nope", 1, 2)
    with pytest.raises(NotFound, match="does not exist"):  # a look creates nothing
        broker.cursors.fetch("topic:t", None, 1, 2)
    assert "topic:t" not in broker.topics
    broker.destination("topic:t")
    with pytest.raises(InvalidAddress, match="topic"):
        broker.cursors.fetch("topic:t", None, 1, 2)
    with pytest.raises(InvalidAddress):
        broker.cursors.open("queue:q", "bad/name")


def test_commit_batch_commits_once_per_sink_and_batch(broker: Broker) -> None:
    prepare(broker, "a", "queue:out", b"1")
    prepare(broker, "b", "queue:out", b"2")
    assert broker.batches.commit("sink", 0, ("a", "b")) is True
    prepare(broker, "a-retry", "queue:out", b"1")
    assert broker.batches.commit("sink", 0, ("a-retry",)) is False  # Spark retried batch 0
    assert broker.xa.xids() == []
    prepare(broker, "c", "queue:out", b"3")
    assert broker.batches.commit("sink", 1, ("c",)) is True
    assert bodies(looking.browse(broker, "queue:out")) == [b"1", b"2", b"3"]
    assert len(looking.browse(broker, BATCHES)) == 1  # only the sink's newest marker is kept


def test_commit_batch_refuses_what_is_not_prepared(broker: Broker) -> None:
    prepare(broker, "a", "queue:out", b"1")
    with pytest.raises(NotFound, match="not prepared"):
        broker.batches.commit("sink", 0, ("a", "gone"))
    assert broker.xa.xids() == ["a"]  # nothing committed
    with pytest.raises(TransactionError):
        broker.batches.commit("sink", 0, ("a", "a"))
    with pytest.raises(TransactionError):
        broker.batches.commit("sink", -1, ("a",))


def test_markers_survive_a_restart_and_roll_forward(broker: Broker) -> None:
    prepare(broker, "a", "queue:out", b"1")
    prepare(broker, "b", "queue:out", b"2")
    broker.batches.commit("sink", 4, ("a", "b"))
    fresh = restart(broker)
    prepare(fresh, "a2", "queue:out", b"1")
    assert fresh.batches.commit("sink", 4, ("a2",)) is False
    assert bodies(looking.browse(fresh, "queue:out")) == [b"1", b"2"]

    # A crash after the marker but before the commits: recovery finishes the batch.
    prepare(fresh, "c", "queue:out", b"3")
    marker = Marker("other", 0, ("c",), keep=False)
    fresh.send(BATCHES, msg(marker.encode()))
    again = restart(fresh)
    assert again.xa.xids() == []
    assert bodies(looking.browse(again, "queue:out")) == [b"1", b"2", b"3"]
    assert [Marker.decode(m.message.body).sink for m in looking.browse(again, BATCHES)] == ["sink"]


def test_one_off_batches_keep_no_marker(broker: Broker) -> None:
    prepare(broker, "a", "queue:out", b"1")
    assert broker.batches.commit("job", 0, ("a",), keep=False) is True
    assert looking.browse(broker, BATCHES) == []
    assert bodies(looking.browse(broker, "queue:out")) == [b"1"]
