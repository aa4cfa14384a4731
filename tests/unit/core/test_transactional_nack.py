"""A nack inside a transaction, in the core: taken out of flight now, decided at commit.

One rule for every protocol (the native protocol and STOMP both reach it
through ``core.BrokerSession.nack``): the nacked message leaves its consumer's
window at once, nobody receives it before the transaction ends, a commit
requeues it (redelivered) or dead-letters it, and a rollback, a prepared
rollback or the session's end gives it back like an aborted ack.
"""

from __future__ import annotations

import pytest

from chute.core.model.address import DEAD_LETTER
from chute.core.model.consumer import AckMode, BrokerConsumer
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON
from chute.errors import ConsumerError

from .helpers import Recorder, RecordingStore, bodies, make_broker, msg, restart, stats_of, stored


def setup(broker: Broker, *bodies_: bytes) -> tuple[BrokerSession, BrokerConsumer, Recorder]:
    producer = BrokerConnection(broker).session()
    for body in bodies_:
        producer.send("queue:q", msg(body))
    tx = BrokerConnection(broker).session(AckMode.INDIVIDUAL, transacted=True)
    r = Recorder()
    consumer = tx.consumer(1, "queue:q", r, prefetch=len(bodies_))
    return tx, consumer, r


def watcher(broker: Broker) -> Recorder:
    """A second consumer of the queue: it must see nothing the transaction holds."""
    r = Recorder()
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "queue:q", r)
    return r


def test_a_nacked_message_waits_for_the_commit_then_comes_back_redelivered(
    broker: Broker,
) -> None:
    tx, consumer, r = setup(broker, b"a")
    [entry] = r.take()
    assert tx.nack(consumer, entry.seq) == 1
    assert not consumer.inflight  # out of its window at once
    other = watcher(broker)
    assert other.entries == []  # but nobody gets it before the commit
    assert stats_of(broker, "queue:q")["depth"] == 1
    tx.commit()
    [again] = other.take()
    assert (again.message.body, again.redelivered, again.delivery_count) == (b"a", True, 2)


def test_a_committed_reject_dead_letters_in_the_same_store_commit() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    tx, consumer, r = setup(broker, b"a")
    [entry] = r.take()
    tx.nack(consumer, entry.seq, requeue=False)
    assert stored(broker, DEAD_LETTER) == []
    store.calls.clear()
    tx.commit()
    assert store.kinds() == ["commit"]  # the dead letter's add and the queue's ack together
    [dead] = looking.browse(broker, DEAD_LETTER)
    assert dead.message.body == b"a"
    assert dead.message.properties[DIVERT_REASON] == "rejected"
    assert stored(broker, "queue:q") == []
    assert stats_of(broker, "queue:q")["dead_lettered"] == 1


def test_rollback_gives_acked_and_nacked_messages_back_alike(broker: Broker) -> None:
    tx, consumer, r = setup(broker, b"a", b"b")
    first, second = r.take()
    tx.ack(consumer, first.seq)
    tx.nack(consumer, second.seq, requeue=False)
    tx.rollback()
    BrokerSession.add_credit(consumer, 2)  # what a driver gives back for an ack and a nack
    assert bodies(r.take()) == [b"a", b"b"]  # back to the consumer, in order
    assert looking.browse(broker, DEAD_LETTER) == []


def test_closing_the_session_with_a_nack_open_gives_the_message_back(broker: Broker) -> None:
    tx, consumer, r = setup(broker, b"a")
    [entry] = r.take()
    tx.nack(consumer, entry.seq, requeue=False)
    tx.close()
    other = watcher(broker)
    [back] = other.take()
    assert (back.message.body, back.redelivered) == (b"a", True)
    assert looking.browse(broker, DEAD_LETTER) == []


def test_a_cumulative_nack_takes_everything_delivered_up_to_it(broker: Broker) -> None:
    tx, consumer, r = setup(broker, b"a", b"b", b"c")
    _, second, _ = r.take()
    assert tx.nack(consumer, second.seq, cumulative=True) == 2
    assert list(consumer.inflight) == [3]
    tx.commit()
    assert bodies(r.take()) == []  # no credit was given back: the window holds c only
    assert [e.message.body for e in looking.browse(broker, "queue:q")] == [b"a", b"b", b"c"]


def test_a_nack_outside_a_transaction_acts_at_once(broker: Broker) -> None:
    producer = BrokerConnection(broker).session()
    producer.send("queue:q", msg(b"a"))
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    r = Recorder()
    consumer = s.consumer(1, "queue:q", r, prefetch=2)
    [entry] = r.take()
    s.nack(consumer, entry.seq)
    [again] = r.take()
    assert (again.message.body, again.redelivered) == (b"a", True)


def test_a_nack_of_a_message_not_in_flight_is_refused(broker: Broker) -> None:
    tx, consumer, r = setup(broker, b"a")
    [entry] = r.take()
    tx.nack(consumer, entry.seq)
    with pytest.raises(ConsumerError):
        tx.nack(consumer, entry.seq)


def test_prepared_nacks_are_applied_at_commit_and_given_back_at_rollback(broker: Broker) -> None:
    tx, consumer, r = setup(broker, b"a", b"b")
    first, second = r.take()
    tx.nack(consumer, first.seq, requeue=False)
    tx.prepare("x1")
    tx.nack(consumer, second.seq, requeue=False)
    tx.prepare("x2")
    assert looking.browse(broker, DEAD_LETTER) == []
    broker.xa.commit("x1")
    assert [e.message.body for e in looking.browse(broker, DEAD_LETTER)] == [b"a"]
    broker.xa.rollback("x2")
    BrokerSession.add_credit(consumer, 2)
    [back] = r.take()
    assert (back.message.body, back.redelivered) == (b"b", True)


def test_a_nacked_message_of_an_unfinished_transaction_survives_a_restart(
    broker: Broker,
) -> None:
    tx, consumer, r = setup(broker, b"a")
    [entry] = r.take()
    tx.nack(consumer, entry.seq, requeue=False)
    fresh = restart(broker)  # the nack was never committed: the message is still there
    assert [e.message.body for e in looking.browse(fresh, "queue:q")] == [b"a"]
    assert looking.browse(fresh, DEAD_LETTER) == []
