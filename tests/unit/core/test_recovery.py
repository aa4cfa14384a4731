"""Recovery: a new Broker over the same MemoryStore is what a restart looks like."""

from __future__ import annotations

import logging

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.store import AddOp
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker

from .helpers import Recorder, bodies, make_broker, memory, msg, restart, stats_of


def test_persistent_messages_in_durable_queues_come_back_in_order(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for body, priority in [(b"a", 4), (b"b", 9), (b"c", 4), (b"d", 0), (b"e", 9)]:
        s.send("queue:q", msg(body, priority=priority, properties={"p": priority}))
    broker2 = restart(broker)
    r = Recorder()
    BrokerConnection(broker2).session(AckMode.AUTO).consumer(1, "queue:q", r)
    assert r.bodies == [b"b", b"e", b"a", b"c", b"d"]
    assert [e.seq for e in r.entries] == [2, 5, 1, 3, 4]
    assert all(not e.redelivered and e.delivery_count == 1 for e in r.entries)
    assert r.entries[0].message.properties == {"p": 9}


def test_sequence_numbers_continue_after_a_restart(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    for _ in range(3):
        s.send("queue:q", msg())
    broker2 = restart(broker)
    BrokerConnection(broker2).session().send("queue:q", msg(b"new"))
    assert [e.seq for e in looking.browse(broker2, "queue:q")] == [1, 2, 3, 4]
    # also when everything was consumed before the restart
    r = Recorder()
    BrokerConnection(broker2).session(AckMode.AUTO).consumer(1, "queue:q", r)
    broker3 = restart(broker2)
    BrokerConnection(broker3).session().send("queue:q", msg(b"newer"))
    assert [e.seq for e in looking.browse(broker3, "queue:q")] == [5]


def test_acked_messages_do_not_come_back(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    for body in (b"a", b"b", b"c"):
        s.send("queue:q", msg(body))
    s.ack(c, r.entries[1].seq)
    broker2 = restart(broker)
    assert bodies(looking.browse(broker2, "queue:q")) == [b"a", b"c"]


def test_delivered_but_unacked_messages_come_back_redelivered(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"seen"))
    s.send("queue:q", msg(b"unseen"))
    broker2 = restart(broker)  # the consumer never acked: a crash
    r2 = Recorder()
    BrokerConnection(broker2).session(AckMode.CLIENT).consumer(1, "queue:q", r2)
    assert r2.bodies == [b"seen", b"unseen"]
    assert [(e.redelivered, e.delivery_count) for e in r2.entries] == [(True, 2), (False, 1)]


def test_non_persistent_messages_do_not_come_back(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.send("queue:q", msg(b"keep"))
    s.send("queue:q", msg(b"lose", persistent=False))
    s.send("queue:q", msg(b"keep too"))
    broker2 = restart(broker)
    assert bodies(looking.browse(broker2, "queue:q")) == [b"keep", b"keep too"]


def test_temporary_queues_do_not_come_back(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    address = conn.temporary_queue()
    conn.session().send(address, msg())
    broker2 = restart(broker)
    assert address not in broker2.queues
    assert sum(len(m) for m in memory(broker2).messages.values()) == 0


def test_dead_letters_survive_a_restart(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"bad"))
    s.nack(c, r.entries[0].seq, requeue=False)
    broker2 = restart(broker)
    [dead] = looking.browse(broker2, "queue:__sys__deadLetter")
    assert dead.message.properties["chute_reason"] == "rejected"
    assert looking.browse(broker2, "queue:q") == []


def test_recover_reports_how_many_messages_it_restored(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.send("queue:a", msg())
    s.send("queue:b", msg())
    s.send("queue:b", msg(persistent=False))
    broker2 = Broker(broker.store, broker.settings, clock=broker.clock)
    assert broker2.recover() == 2
    assert stats_of(broker2, "queue:b")["depth"] == 1


def test_queues_come_back_even_when_empty(broker: Broker) -> None:
    BrokerConnection(broker).session().consumer(1, "queue:idle", Recorder())
    broker2 = restart(broker)
    assert "queue:idle" in broker2.queues


def test_messages_for_an_unknown_queue_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = make_broker()
    broker.store.add(AddOp("queue:ghost", ("queue:ghost",), 1, msg()))
    with caplog.at_level(logging.WARNING, logger="chute.broker"):
        broker2 = restart(broker)
    assert "queue:ghost" in caplog.text
    assert "queue:ghost" not in broker2.queues


def test_a_restart_after_a_restart_keeps_everything(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session(AckMode.CLIENT)
    s.consumer(1, "topic:t", Recorder(), subscription="sub", durable=True)
    s.send("topic:t", msg(b"t"))
    s.send("queue:q", msg(b"q"))
    broker3 = restart(restart(broker))
    assert bodies(looking.browse(broker3, "queue:q")) == [b"q"]
    r = Recorder()
    BrokerConnection(broker3, client_id="app").session().consumer(
        1, "topic:t", r, subscription="sub", durable=True
    )
    assert r.bodies == [b"t"]
    assert r.entries[0].redelivered
