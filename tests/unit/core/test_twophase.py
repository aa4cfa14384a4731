"""Two-phase transactions: prepare, then commit or roll back by xid, across restarts."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import NotFound, TransactionError
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, bodies, msg, restart, stats_of, stored


def _prepare_job(broker: Broker, xid: str) -> None:
    """A transaction that consumes a job from queue:work and sends its result, prepared."""
    conn = BrokerConnection(broker)
    conn.session().send("queue:work", msg(b"job"))
    tx = conn.session(AckMode.CLIENT, transacted=True)
    recorder = Recorder()
    consumer = tx.consumer(1, "queue:work", recorder, prefetch=10)
    [entry] = recorder.take()
    tx.ack(consumer, entry.seq)
    tx.send("queue:done", msg(b"result"))
    tx.prepare(xid)


def test_prepared_sends_invisible_until_commit(broker: Broker) -> None:
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send("queue:orders", msg(b"a"))
    tx.prepare("xid-1")
    assert broker.xa.xids() == ["xid-1"]
    assert looking.browse(broker, "queue:orders") == []
    assert stored(broker, "queue:orders") == []
    broker.xa.commit("xid-1")
    assert bodies(looking.browse(broker, "queue:orders")) == [b"a"]
    assert stored(broker, "queue:orders") == [b"a"]
    assert broker.xa.xids() == []


def test_prepared_acks_lock_messages_until_rollback(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    conn.session().send("queue:work", msg(b"job"))
    tx = conn.session(AckMode.CLIENT, transacted=True)
    recorder = Recorder()
    consumer = tx.consumer(1, "queue:work", recorder, prefetch=10)
    [entry] = recorder.take()
    tx.ack(consumer, entry.seq)
    tx.prepare("xid-ack")
    tx.close_consumer(consumer)
    other = Recorder()
    conn.session(AckMode.CLIENT).consumer(2, "queue:work", other, prefetch=10)
    assert other.take() == []  # locked in the prepared transaction
    assert stats_of(broker, "queue:work")["depth"] == 1
    broker.xa.rollback("xid-ack")
    [again] = other.take()
    assert again.message.body == b"job"
    assert again.redelivered


def test_prepared_ack_settles_on_commit(broker: Broker) -> None:
    _prepare_job(broker, "xid-2")
    broker.xa.commit("xid-2")
    assert stored(broker, "queue:work") == []
    assert stored(broker, "queue:done") == [b"result"]
    assert stats_of(broker, "queue:work")["depth"] == 0


def test_prepared_transaction_survives_restart_then_commits(broker: Broker) -> None:
    _prepare_job(broker, "xid-3")

    after = restart(broker)
    assert after.xa.xids() == ["xid-3"]
    watcher = Recorder()
    BrokerConnection(after).session(AckMode.CLIENT).consumer(1, "queue:work", watcher, prefetch=10)
    assert watcher.take() == []  # the acked job stays locked while in doubt
    assert looking.browse(after, "queue:done") == []
    BrokerConnection(after).session().send("queue:done", msg(b"later"))
    after.xa.commit("xid-3")
    done = looking.browse(after, "queue:done")
    assert sorted(bodies(done)) == [b"later", b"result"]
    assert len({e.seq for e in done}) == 2  # numbering went past the prepared send
    assert stored(after, "queue:work") == []
    assert after.xa.xids() == []
    assert restart(after).xa.xids() == []


def test_prepared_transaction_survives_restart_then_rolls_back(broker: Broker) -> None:
    _prepare_job(broker, "xid-4")

    after = restart(broker)
    after.xa.rollback("xid-4")
    watcher = Recorder()
    BrokerConnection(after).session(AckMode.CLIENT).consumer(1, "queue:work", watcher, prefetch=10)
    [back] = watcher.take()
    assert back.message.body == b"job"
    assert looking.browse(after, "queue:done") == []
    assert restart(after).xa.xids() == []


def test_xid_rules(broker: Broker) -> None:
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    with pytest.raises(TransactionError):
        tx.prepare("")
    with pytest.raises(TransactionError):
        tx.prepare("bad\nxid")
    tx.send("queue:q", msg())
    tx.prepare("x")
    tx.send("queue:q", msg())
    with pytest.raises(TransactionError, match="already prepared"):
        tx.prepare("x")
    with pytest.raises(NotFound):
        broker.xa.commit("nope")
    with pytest.raises(NotFound):
        broker.xa.rollback("nope")
    plain = BrokerConnection(broker).session()
    with pytest.raises(TransactionError):
        plain.prepare("y")


def test_stats_list_prepared(broker: Broker) -> None:
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send("queue:q", msg())
    tx.prepare("b")
    tx.send("queue:q", msg())
    tx.prepare("a")
    assert looking.stats(broker)["prepared"] == ["a", "b"]


def test_abandoned_prepared_transactions_roll_back_after_the_timeout() -> None:
    clock = FakeClock()
    broker = Broker(MemoryStore(), clock=clock, prepared_timeout_ms=60_000)
    _prepare_job(broker, "abandoned")
    clock.advance(59_999)
    broker.expire_due()
    assert broker.xa.xids() == ["abandoned"]
    clock.advance(1)
    broker.expire_due()
    assert broker.xa.xids() == []
    assert looking.browse(broker, "queue:done") == []
    [back] = looking.browse(broker, "queue:work")
    assert back.redelivered
    assert restart(broker).xa.xids() == []


def test_recovered_prepared_transactions_time_out_from_the_restart() -> None:
    clock = FakeClock()
    broker = Broker(MemoryStore(), clock=clock, prepared_timeout_ms=60_000)
    _prepare_job(broker, "in-doubt")
    clock.advance(10 * 60_000)  # the broker was down for a long time
    after = Broker(broker.store, clock=clock, prepared_timeout_ms=60_000)
    after.recover()
    after.expire_due()
    assert after.xa.xids() == ["in-doubt"]  # a coordinator gets the full timeout after a restart
    clock.advance(60_000)
    after.expire_due()
    assert after.xa.xids() == []


def test_without_a_timeout_prepared_transactions_wait_forever(broker: Broker) -> None:
    _prepare_job(broker, "patient")
    assert isinstance(broker.clock, FakeClock)
    broker.clock.advance(365 * 24 * 3_600_000)
    broker.expire_due()
    assert broker.xa.xids() == ["patient"]
