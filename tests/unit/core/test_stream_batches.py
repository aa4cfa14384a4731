"""Streams take what arrives together as a whole (a ``send_many``, a transaction, a
prepared chunk): whatever the batches, their order of commit, retention and the
readers' selectors, a stream keeps and hands on exactly what one-by-one sends would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chute.core.model import stream as stream_module
from chute.core.model.consumer import AckMode, Entry
from chute.core.model.paging import held_cost
from chute.core.model.settings import DestinationSettings
from chute.core.model.store import AddOp
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.core.rules.partitions import pick
from chute.message import Message
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, make_broker

S = "stream:s"

# one step: ("many", n) a send_many of n; ("one", n) n sends; ("each", n) n sends taken
# together (send_each: a producer's sends that arrived together); ("prepare", n) a
# prepared send_many of n, committed later; ("commit", i) the i-th still prepared, if any
step = st.one_of(
    st.tuples(st.just("many"), st.integers(1, 40)),
    st.tuples(st.just("each"), st.integers(1, 40)),
    st.tuples(st.just("one"), st.integers(1, 5)),
    st.tuples(st.just("prepare"), st.integers(1, 20)),
    st.tuples(st.just("commit"), st.integers(0, 3)),
)


def message(i: int) -> Message:
    return Message(f"m{i}".encode() * (1 + i % 5), id=f"id{i}", properties={"i": i, "r": i % 4})


def tail_is_consistent(stream: Stream) -> None:
    tail = stream._tail[stream._tail_from :]
    assert [e.seq for e in tail] == sorted({e.seq for e in tail})
    assert stream._tail_bytes == sum(held_cost(e.message) for e in tail)


def play(broker: Broker, steps: list[tuple[str, int]]) -> dict[int, Message]:
    """Run ``steps``; every prepared send is committed at the end. The messages the
    stream took, by offset."""
    session = BrokerConnection(broker).session()
    prepared: list[tuple[str, list[Message]]] = []
    sent: list[Message] = []
    counter = 0

    def made(n: int) -> list[Message]:
        nonlocal counter
        out = [message(counter + k) for k in range(n)]
        counter += n
        return out

    for kind, n in steps:
        if kind == "many":
            batch = made(n)
            session.send_many(S, batch)
            sent += batch
        elif kind == "one":
            for m in made(n):
                session.send(S, m)
                sent.append(m)
        elif kind == "each":
            batch = made(n)
            assert session.send_each(S, batch) == n
            sent += batch
        elif kind == "prepare":
            tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
            batch = made(n)
            tx.send_many(S, batch)
            xid = f"x{len(prepared)}-{counter}"
            tx.prepare(xid)
            prepared.append((xid, batch))
        elif prepared:
            xid, batch = prepared.pop(n % len(prepared))
            broker.xa.commit(xid)
            sent += batch
        tail_is_consistent(broker.streams[S])
    for xid, batch in prepared:
        broker.xa.commit(xid)
        sent += batch
    tail_is_consistent(broker.streams[S])
    stream = broker.streams[S]
    by_body = {m.id: m for m in sent}
    kept = stream._read(1, stream.next_seq, 0, 0)[1]
    assert len(kept) == stream.count
    return {e.seq: by_body[e.message.id] for e in kept}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, max_size=25),
    keep=st.integers(0, 60),
    tail=st.sampled_from([1 << 10, 8 << 20]),
    every=st.integers(1, 4),
)
def test_batches_keep_and_hand_on_what_single_sends_would(
    steps: list[tuple[str, int]], keep: int, tail: int, every: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stream_module, "TAIL_BYTES", tail)
        patch.setattr(stream_module, "TAIL_MIN", tail)
        broker = make_broker({S: DestinationSettings(max_messages=keep)}, clock=FakeClock())
        broker.destination(S)
        kept = play(broker, steps)
        stream = broker.streams[S]
        total = sum(n for kind, n in steps if kind in {"many", "one", "each", "prepare"})
        # retention keeps the newest ``keep`` (all when 0), whole or cut inside a batch
        expected = sorted(kept)
        assert len(expected) == (min(keep, total) if keep else total)
        assert stream.count == len(expected)
        assert stream.bytes == sum(m.size for m in kept.values())
        if expected:
            assert stream.first == expected[0]
            assert expected == list(range(expected[0], expected[0] + len(expected)))
        assert stream.head == total + 1
        # every page boundary, every selector: a reader gets what matches, in order
        for start in range(1, total + 2):
            got = stream.read(start, stream.head)[1]
            assert [e.seq for e in got] == [s for s in expected if s >= start]
            page = stream.read(start, stream.head, max_messages=every)
            assert [e.seq for e in page[1]] == [s for s in expected if s >= start][:every]
        session = BrokerConnection(broker).session(AckMode.AUTO)
        recorder = Recorder()
        session.consumer(1, S, recorder, prefetch=1000, offset="first", selector=f"r < {every}")
        want = [s for s in expected if int(kept[s].properties["r"]) < every]
        assert [e.seq for e in recorder.take()] == want


def test_retention_behind_a_prepared_send_removes_the_oldest_of_a_batch() -> None:
    # offset 2 is held by a prepared send while 3..5 arrive together and retention keeps
    # 2: it removes 1 and 3, never the batch's newest
    broker = make_broker({S: DestinationSettings(max_messages=2)}, clock=FakeClock())
    session = BrokerConnection(broker).session()
    session.send(S, message(1))
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send(S, message(2))
    tx.prepare("held")
    session.send_many(S, [message(3), message(4), message(5)])
    stream = broker.streams[S]
    assert (stream.first, stream.count) == (4, 2)
    assert [m.seq for m in broker.store.page_in(S, 0, 10)] == [4, 5]
    broker.xa.commit("held")
    assert [e.seq for e in stream.read(1, stream.head)[1]] == [4, 5]


def test_a_prepared_chunk_routes_each_run_to_a_stream_together_and_the_rest_as_before() -> None:
    # a chunk's sends in runs: a stream's run, a queue's, the stream again with a time to
    # live, a stream with partitions (routed by key): offsets, times and partitions are
    # what sends one by one would give, and the store holds each stream's run as a batch
    clock = FakeClock()
    parted = "stream:p"
    store = MemoryStore()
    broker = make_broker({parted: DestinationSettings(partitions=2)}, store=store, clock=clock)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send_many(S, [message(i) for i in range(3)])
    tx.send_many("queue:q", [message(i) for i in range(3, 5)])
    tx.send_many(S, [message(i) for i in range(5, 7)], ttl=1000)
    keyed = [Message(b"k", id=f"k{i}", properties={"key": f"key-{i}"}) for i in range(6)]
    tx.send_many(parted, keyed)
    tx.prepare("chunk")
    prepared = store.prepared["chunk"]
    assert [(op.destination, op.seq) for op in prepared if isinstance(op, AddOp)][:7] == [
        (S, 1), (S, 2), (S, 3), ("queue:q", 1), ("queue:q", 2), (S, 4), (S, 5)
    ]  # fmt: skip
    assert broker.streams[S].head == 1  # nothing readable before the commit
    clock.advance(50)
    broker.xa.commit("chunk")
    stream = broker.streams[S]
    got = stream.read(1, stream.head)[1]
    assert [(e.seq, e.message.id, e.message.expiration) for e in got] == [
        (1, "id0", 0), (2, "id1", 0), (3, "id2", 0),
        (4, "id5", FakeClock().now + 1000), (5, "id6", FakeClock().now + 1000),
    ]  # fmt: skip
    assert all(e.message.timestamp == FakeClock().now and e.message.persistent for e in got)
    assert broker.queues["queue:q"].held == 2
    by_partition: dict[str, list[str]] = {}
    for address in (parted, parted + "#1"):
        part = broker.streams[address]
        by_partition[address] = [e.message.id for e in part.read(1, part.head)[1]]
    assert sorted(by_partition[parted] + by_partition[parted + "#1"]) == [m.id for m in keyed]
    for address, ids in by_partition.items():
        for other in keyed:
            if other.id in ids:
                assert partition_of(other, 2) == (0 if address == parted else 1)


def partition_of(message: Message, count: int) -> int:
    return pick(message.key, count, 0)


def test_a_local_transaction_s_sends_to_a_stream_are_appended_as_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    appended: list[list[int]] = []
    append = Stream.append

    def spy(stream: Stream, entries: Sequence[Entry]) -> None:
        appended.append([e.seq for e in entries])
        append(stream, entries)

    monkeypatch.setattr(Stream, "append", spy)
    broker = make_broker()
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    for i in range(4):
        tx.send(S, message(i))
    tx.send("queue:q", message(4))
    tx.send(S, message(5))
    tx.send(S, message(6), ttl=500)
    tx.commit()
    assert appended == [[1, 2, 3, 4], [5], [6]]  # a run each: address and ttl alike
    stream = broker.streams[S]
    assert [e.message.id for e in stream.read(1, stream.head)[1]] == [
        f"id{i}" for i in (0, 1, 2, 3, 5, 6)
    ]
    assert broker.queues["queue:q"].held == 1


def test_a_sink_s_chunks_listed_out_of_order_commit_in_offset_order_and_stay_in_memory() -> None:
    broker = make_broker()
    conn = BrokerConnection(broker)
    n = 50
    for chunk in range(3):  # the offsets of chunk c are c*n+1 .. (c+1)*n
        session = conn.session(transacted=True)
        session.send_many(S, [message(chunk * n + i) for i in range(n)])
        session.prepare(f"x{chunk}")
    # the driver lists them as the sink's tasks finished
    assert conn.commit_batch("sink", 0, ("x2", "x0", "x1"), keep=False)
    stream = broker.streams[S]
    assert [e.seq for e in stream._tail[stream._tail_from :]] == list(range(1, 3 * n + 1))
    tail_is_consistent(stream)
    assert stream.head == 3 * n + 1


def test_a_prepared_chunk_rolled_back_releases_its_offsets_and_the_next_commits() -> None:
    broker = make_broker()
    conn = BrokerConnection(broker)
    for chunk, n in (("a", 5), ("b", 3)):
        session = conn.session(transacted=True)
        session.send_many(S, [message(i) for i in range(n)])
        session.prepare(chunk)
    stream = broker.streams[S]
    assert stream.head == 1  # both wait
    broker.xa.rollback("a")
    assert stream.head == 6  # "b" holds offsets 6 .. 8
    broker.xa.commit("b")
    assert (stream.head, stream.count, stream.reserved) == (9, 3, set())
    assert [e.seq for e in stream.read(1, stream.head)[1]] == [6, 7, 8]
    tail_is_consistent(stream)
