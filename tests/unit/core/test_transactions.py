"""Local transactions: a session's sends and acks commit or roll back together."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.model.store import AckOp, AddOp
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.routing import WouldBlock
from chute.errors import DestinationFull, InvalidAddress, NotFound, TransactionError

from .helpers import (
    FakeClock,
    Recorder,
    RecordingStore,
    bodies,
    make_broker,
    msg,
    restart,
    stats_of,
    stored,
)


def tx_session(broker: Broker, mode: AckMode = AckMode.CLIENT) -> BrokerSession:
    return BrokerConnection(broker).session(mode, transacted=True)


def test_sends_are_invisible_until_commit(broker: Broker) -> None:
    tx = tx_session(broker)
    r = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r)
    tx.send("queue:q", msg(b"a"))
    tx.send("topic:t", msg(b"t"))
    tx.send("queue:q", msg(b"b"))
    assert r.entries == []
    assert stats_of(broker, "queue:q")["enqueued"] == 0
    assert stored(broker, "queue:q") == []
    tx.commit()
    assert r.bodies == [b"a", b"b"]


def test_rollback_discards_the_sends(broker: Broker) -> None:
    tx = tx_session(broker)
    tx.send("queue:q", msg(b"a"))
    tx.rollback()
    tx.commit()
    assert looking.browse(broker, "queue:q") == []


def test_a_bad_address_fails_at_send_time(broker: Broker) -> None:
    tx = tx_session(broker)
    with pytest.raises(InvalidAddress):
        tx.send("a/b", msg())
    with pytest.raises(NotFound):
        tx.send("queue:__tmp__.nobody.1", msg())


def test_acks_take_effect_at_commit(broker: Broker) -> None:
    BrokerConnection(broker).session().send("queue:q", msg(b"a"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:q", r)
    assert tx.ack(c, r.entries[0].seq) == 1
    assert stored(broker, "queue:q") == [b"a"]
    assert stats_of(broker, "queue:q")["depth"] == 1
    tx.commit()
    assert stored(broker, "queue:q") == []
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["acked"]) == (0, 1)


def test_rollback_undoes_acks_and_the_messages_come_back_redelivered(broker: Broker) -> None:
    producer = BrokerConnection(broker).session()
    for body in (b"a", b"b", b"c"):
        producer.send("queue:q", msg(body))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:q", r, prefetch=2)
    tx.ack(c, r.entries[1].seq)  # cumulative: a and b
    tx.send("queue:out", msg(b"derived"))
    tx.rollback()
    assert looking.browse(broker, "queue:out") == []
    assert stored(broker, "queue:q") == [b"a", b"b", b"c"]
    BrokerSession.add_credit(c, 3)
    again = r.entries[2:]
    assert bodies(again) == [b"a", b"b", b"c"]
    assert [e.redelivered for e in again] == [True, True, False]


def test_commit_writes_one_atomic_store_commit() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    BrokerConnection(broker).session().send("queue:in", msg(b"a"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:in", r)
    tx.ack(c, r.entries[0].seq)
    tx.send("queue:out", msg(b"b"))
    tx.send("queue:out", msg(b"c", persistent=False))
    store.calls.clear()
    tx.commit()
    assert store.kinds() == ["commit"]
    [(_, ops)] = store.calls
    assert [type(op) for op in ops] == [AckOp, AddOp]  # acks first: they free room
    assert ops[0] == AckOp("queue:in", r.entries[0].seq)
    assert isinstance(ops[1], AddOp)
    assert ops[1].queues == ("queue:out",)
    assert ops[1].message.body == b"b"
    assert store.messages["queue:in"] == {}
    assert [m.message.body for m in store.messages["queue:out"].values()] == [b"b"]
    assert bodies(looking.browse(broker, "queue:out")) == [b"b", b"c"]


def test_an_empty_commit_writes_nothing() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    store.calls.clear()
    tx_session(broker).commit()
    assert store.calls == []


def test_commit_is_refused_when_a_reject_destination_has_no_room() -> None:
    broker = make_broker({"queue:small": DestinationSettings(max_messages=1)})
    BrokerConnection(broker).session().send("queue:in", msg(b"in"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:in", r)
    tx.ack(c, r.entries[0].seq)
    tx.send("queue:big", msg(b"1"))
    tx.send("queue:small", msg(b"2"))
    tx.send("queue:small", msg(b"3"))
    with pytest.raises(DestinationFull, match="nothing was committed"):
        tx.commit()
    assert looking.browse(broker, "queue:big") == []
    assert looking.browse(broker, "queue:small") == []
    assert stored(broker, "queue:in") == [b"in"]
    assert looking.browse(broker, "queue:__sys__deadLetter") == []
    tx.rollback()  # the transaction stays open; roll it back
    assert looking.browse(broker, "queue:big") == []
    assert bodies(looking.browse(broker, "queue:in")) == [b"in"]


@pytest.mark.parametrize("by", ["count", "bytes"])
def test_the_room_a_transactions_acks_free_counts_for_its_sends(by: str) -> None:
    size = msg(b"m").size
    bound = (
        DestinationSettings(max_messages=2)
        if by == "count"
        else DestinationSettings(max_bytes=2 * size)
    )
    broker = make_broker({"queue:q": bound})
    producer = BrokerConnection(broker).session()
    producer.send("queue:q", msg(b"m"))
    producer.send("queue:q", msg(b"m"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:q", r, prefetch=1)
    tx.send("queue:q", msg(b"n"))
    with pytest.raises(DestinationFull):
        tx.commit()  # nothing acked yet: no room
    tx.ack(c, r.entries[0].seq)
    tx.commit()  # the ack frees the room the send takes
    assert bodies(looking.browse(broker, "queue:q")) == [b"m", b"n"]


def test_everything_a_commit_causes_is_in_its_one_store_commit() -> None:
    store = RecordingStore()
    broker = make_broker(
        {"queue:q": DestinationSettings(max_messages=1, overflow=Overflow.DROP_OLDEST)},
        store=store,
    )
    BrokerConnection(broker).session().send("queue:q", msg(b"old"))
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:auto", Recorder())
    tx = tx_session(broker)
    tx.send("queue:q", msg(b"new"))  # drops "old" into the dead-letter queue
    tx.send("queue:auto", msg(b"auto"))  # pushed and settled at once
    store.calls.clear()
    tx.commit()
    assert store.kinds() == ["commit"]
    assert stored(broker, "queue:q") == [b"new"]
    assert stored(broker, "queue:__sys__deadLetter") == [b"old"]
    assert stored(broker, "queue:auto") == []
    broker2 = restart(broker)
    assert looking.browse(broker2, "queue:auto") == []
    assert bodies(looking.browse(broker2, "queue:q")) == [b"new"]


def test_commit_under_block_raises_would_block() -> None:
    broker = make_broker({"queue:q": DestinationSettings(max_messages=1, overflow=Overflow.BLOCK)})
    BrokerConnection(broker).session().send("queue:q", msg())
    tx = tx_session(broker)
    tx.send("queue:q", msg())
    with pytest.raises(WouldBlock) as info:
        tx.commit()
    assert info.value.address == "queue:q"


def test_a_transaction_respects_drop_oldest_bounds_across_its_sends() -> None:
    broker = make_broker(
        {"queue:q": DestinationSettings(max_messages=2, overflow=Overflow.DROP_OLDEST)}
    )
    BrokerConnection(broker).session().send("queue:q", msg(b"old"))
    tx = tx_session(broker)
    for body in (b"1", b"2", b"3"):
        tx.send("queue:q", msg(body))
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"2", b"3"]
    assert bodies(looking.browse(broker, "queue:__sys__deadLetter")) == [b"old", b"1"]
    assert stats_of(broker, "queue:q")["depth"] == 2


def test_a_transaction_respects_dead_letter_bounds_across_its_sends() -> None:
    broker = make_broker(
        {"queue:q": DestinationSettings(max_messages=2, overflow=Overflow.DEAD_LETTER)}
    )
    tx = tx_session(broker)
    for body in (b"1", b"2", b"3"):
        tx.send("queue:q", msg(body))
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"1", b"2"]
    assert bodies(looking.browse(broker, "queue:__sys__deadLetter")) == [b"3"]


def test_commit_and_rollback_need_a_transacted_session(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    with pytest.raises(TransactionError):
        s.commit()
    with pytest.raises(TransactionError):
        s.rollback()


def test_closing_a_transacted_session_rolls_back(broker: Broker) -> None:
    BrokerConnection(broker).session().send("queue:q", msg(b"a"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:q", r)
    tx.ack(c, r.entries[0].seq)
    tx.send("queue:q", msg(b"never"))
    tx.close()
    r2 = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r2)
    assert r2.bodies == [b"a"]
    assert r2.entries[0].redelivered


def test_a_transaction_is_stamped_when_it_commits() -> None:
    clock = FakeClock()
    broker = make_broker(clock=clock)
    tx = tx_session(broker)
    tx.send("queue:q", msg(), ttl=100)
    clock.advance(500)
    tx.commit()
    [e] = looking.browse(broker, "queue:q")
    assert e.message.timestamp == clock.now
    assert e.message.expiration == clock.now + 100


def test_each_commit_starts_a_new_transaction(broker: Broker) -> None:
    tx = tx_session(broker)
    tx.send("queue:q", msg(b"1"))
    tx.commit()
    tx.send("queue:q", msg(b"2"))
    tx.rollback()
    tx.send("queue:q", msg(b"3"))
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"1", b"3"]


def test_a_committed_transaction_survives_a_restart(broker: Broker) -> None:
    BrokerConnection(broker).session().send("queue:in", msg(b"in"))
    tx = tx_session(broker)
    r = Recorder()
    c = tx.consumer(1, "queue:in", r)
    tx.ack(c, r.entries[0].seq)
    tx.send("queue:out", msg(b"out"))
    tx.commit()
    broker2 = restart(broker)
    assert looking.browse(broker2, "queue:in") == []
    assert bodies(looking.browse(broker2, "queue:out")) == [b"out"]


def test_a_transacted_publish_reaches_every_subscription(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r1, r2 = Recorder(), Recorder()
    s.consumer(1, "topic:t", r1)
    s.consumer(2, "topic:t", r2)
    tx = tx_session(broker)
    tx.send("topic:t", msg(b"x"))
    assert r1.entries == []
    tx.commit()
    assert r1.bodies == r2.bodies == [b"x"]


# -- send_many ------------------------------------------------------------------------------


def test_send_many_joins_the_transaction_and_counts_what_it_holds(broker: Broker) -> None:
    tx = tx_session(broker)
    before = broker.memory.used
    tx.send("queue:q", msg(b"one"))
    tx.send_many("queue:q", [msg(b"two"), msg(b"three")])
    tx.send_many("queue:q", [])
    assert stats_of(broker, "queue:q")["enqueued"] == 0
    held = broker.memory.used - before
    assert held > 0
    tx.rollback()
    assert broker.memory.used == before
    tx.send_many("queue:q", [msg(b"a"), msg(b"b")], ttl=1000)
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b"]
    assert {e.message.expiration for e in looking.browse(broker, "queue:q")} == {
        broker.clock() + 1000
    }


def test_send_many_outside_a_transaction_is_one_atomic_store_commit() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    store.calls.clear()
    BrokerConnection(broker).session().send_many("queue:q", [msg(b"a"), msg(b"b"), msg(b"c")])
    assert store.kinds() == ["commit"]
    assert [op.message.body for op in store.calls[0][1] if isinstance(op, AddOp)] == [
        b"a",
        b"b",
        b"c",
    ]
    assert stored(broker, "queue:q") == [b"a", b"b", b"c"]


@pytest.mark.parametrize("overflow", [Overflow.REJECT, Overflow.BLOCK])
def test_send_many_without_room_for_all_sends_none(overflow: Overflow) -> None:
    settings = DestinationSettings(max_messages=3, overflow=overflow)
    store = RecordingStore()
    broker = make_broker({"queue:small": settings}, store=store)
    session = BrokerConnection(broker).session()
    session.send("queue:small", msg(b"first"))
    store.calls.clear()
    with pytest.raises(WouldBlock if overflow is Overflow.BLOCK else DestinationFull):
        session.send_many("queue:small", [msg(b"1"), msg(b"2"), msg(b"3")])
    assert bodies(looking.browse(broker, "queue:small")) == [b"first"]
    assert store.calls == []
    session.send_many("queue:small", [msg(b"1"), msg(b"2")])
    assert stored(broker, "queue:small") == [b"first", b"1", b"2"]


def test_a_refused_send_many_leaves_the_transaction_only_a_rollback() -> None:
    broker = make_broker()
    tx = tx_session(broker)
    with pytest.raises(InvalidAddress):
        tx.send_many("a/b", [msg()])
    tx.send_many("queue:q", [msg(b"later")])
    with pytest.raises(TransactionError, match="refused"):
        tx.commit()
    assert looking.browse(broker, "queue:q") == []
