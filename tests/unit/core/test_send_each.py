"""A producer's sends to a stream that arrived together are taken in one pass
(``BrokerSession.send_each``), as a ``send`` of each would take them, at consecutive
offsets, the store recording them as one batch (each as its own add if it cannot); the
pass takes nothing when they must wait for room, and stops at the first send the store
cannot record, so that the caller sends the rest alone and learns why."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.paging import held_cost
from chute.core.model.settings import SettingsResolver
from chute.core.model.store import AddOp, TxOp
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.core.rules.routing import WouldBlock
from chute.errors import StoreError
from chute.message import Message

from .helpers import FakeClock, Recorder, RecordingStore, make_broker, msg, restart

S = "stream:s"
BODY = b"x" * 1000


def messages(count: int, start: int = 0) -> list[Message]:
    return [msg(f"m{i}", id=f"id{i}") for i in range(start, start + count)]


def kept(broker: Broker) -> list[tuple[int, bytes]]:
    stream = broker.streams[S]
    return [(e.seq, e.message.body) for e in stream.read(stream.first, stream.head)[1]]


def test_the_sends_are_one_batch_in_the_store_at_consecutive_offsets_for_every_reader() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    broker.destination(S)
    reader = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, S, reader, offset="first")
    session = BrokerConnection(broker).session()
    session.send(S, msg("before"))
    assert session.send_each(S, messages(5), ttl=60_000) == 5
    assert kept(broker) == [(1, b"before")] + [(2 + i, f"m{i}".encode()) for i in range(5)]
    assert store.kinds() == ["add", "commit"]
    batch = store.calls[1][1]
    assert [op.seq for op in batch] == [2, 3, 4, 5, 6]
    assert all(isinstance(op, AddOp) and op.queues == (S,) for op in batch)
    assert [e.message.body for e in reader.take()] == [b"before"] + [
        f"m{i}".encode() for i in range(5)
    ]
    stamped = broker.streams[S].read(2, 7)[1]
    assert all(e.message.expiration == e.message.timestamp + 60_000 for e in stamped)
    assert [body for _, body in kept(restart(broker))] == [b"before"] + [
        f"m{i}".encode() for i in range(5)
    ]


def test_sends_that_must_wait_for_room_are_left_to_send_alone() -> None:
    cost = held_cost(msg(BODY))
    broker = Broker(
        RecordingStore(), SettingsResolver({}), clock=FakeClock(), memory_high_watermark=20 * cost
    )
    broker.destination(S)
    session = BrokerConnection(broker).session()
    batch = [msg(BODY, id=f"id{i}") for i in range(30)]
    assert session.send_each(S, batch[:10]) == 10  # admitted together, as a bulk send
    assert session.send_each(S, batch[10:20]) == 10  # the line is not reached before
    assert session.send_each(S, batch[20:]) == 0  # past it: none is taken
    assert [e.message.id for e in broker.streams[S].read(1, 1000)[1]] == [m.id for m in batch[:20]]
    with pytest.raises(WouldBlock):
        session.send(S, batch[20])  # alone, it says why it waits
    assert broker.streams[S].next_seq == 21  # no offset skipped


class RefusingStore(RecordingStore):
    """A store that cannot record the message with id ``bad`` (a field too long, say),
    nor a batch that holds it."""

    def add(self, op: AddOp) -> None:
        if op.message.id == "bad":
            raise StoreError("message 'bad' cannot be journaled: too long")
        super().add(op)

    def commit(self, ops: Sequence[TxOp]) -> None:
        if any(isinstance(op, AddOp) and op.message.id == "bad" for op in ops):
            raise StoreError("a record cannot be journaled: too long")
        super().commit(ops)


def test_a_send_the_store_cannot_record_stops_the_pass_without_skipping_an_offset() -> None:
    store = RefusingStore()
    broker = make_broker(store=store)
    broker.destination(S)
    session = BrokerConnection(broker).session()
    batch = [*messages(3), msg("bad", id="bad"), *messages(2, start=3)]
    assert session.send_each(S, batch) == 3  # each its own add, up to the bad one
    assert kept(broker) == [(1, b"m0"), (2, b"m1"), (3, b"m2")]
    with pytest.raises(StoreError, match="cannot be journaled"):
        session.send(S, batch[3])
    assert session.send_each(S, batch[4:]) == 2
    assert [seq for seq, _ in kept(broker)] == [1, 2, 3, 5, 6]  # send's refusal took 4
    assert store.kinds() == ["add", "add", "add", "commit"]


def test_only_a_stream_outside_a_transaction_without_a_named_producer_takes_sends_together() -> (
    None
):
    broker = make_broker()
    broker.destination(S)
    broker.destination("queue:q")
    plain = BrokerConnection(broker).session()
    assert plain.send_each("queue:q", messages(2)) == 0
    assert plain.send_each("stream:unknown", messages(2)) == 0
    transacted = BrokerConnection(broker).session(transacted=True)
    assert transacted.send_each(S, messages(2)) == 0
    named = BrokerConnection(broker).session()
    named.name_producer("p1")  # its resends are looked for one by one
    assert named.send_each(S, messages(2)) == 0
    assert broker.streams[S].count == 0
