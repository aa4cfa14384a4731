"""Taking messages as the console's "Get messages" does (``manage.take``): as a consumer
would, in delivery order, then acknowledged or given back; paged ones too."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking, manage
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import InvalidAddress, NotFound
from chute.store.journal import Journal

from .helpers import Recorder, make_broker, msg


def fill(broker: Broker, address: str, n: int) -> None:
    session = BrokerConnection(broker).session()
    for i in range(n):
        session.send(address, msg(f"m{i}", priority=9 if i == n - 1 else 4))


def test_take_acks_in_delivery_order_and_requeue_gives_back() -> None:
    broker = make_broker()
    fill(broker, "queue:q", 4)
    admin = BrokerConnection(broker)
    looked = manage.take(admin, "queue:q", 2, requeue=True)
    assert [e.message.body for e in looked] == [b"m3", b"m0"]  # priority first
    assert [(e.delivery_count, e.redelivered) for e in looked] == [(1, False), (1, False)]
    again = manage.take(admin, "q", 10)
    assert [e.message.body for e in again] == [b"m3", b"m0", b"m1", b"m2"]
    assert [e.redelivered for e in again] == [True, True, False, False]
    assert looking.browse(broker, "queue:q") == []
    assert manage.take(admin, "queue:q", 1) == []


def test_take_leaves_what_consumers_hold_and_refuses_what_it_cannot_take() -> None:
    broker = make_broker()
    fill(broker, "queue:q", 3)
    other = BrokerConnection(broker).session(AckMode.CLIENT)
    other.consumer(1, "queue:q", Recorder(), prefetch=1)  # holds m2 (priority 9)
    admin = BrokerConnection(broker)
    assert [e.message.body for e in manage.take(admin, "queue:q", 5)] == [b"m0", b"m1"]
    BrokerConnection(broker).session().send("topic:t", msg())
    with pytest.raises(InvalidAddress, match="topic"):
        manage.take(admin, "topic:t", 1)
    with pytest.raises(NotFound):
        manage.take(admin, "queue:none", 1)
    fill(broker, "queue:mine", 2)
    exclusive = BrokerConnection(broker).session(AckMode.CLIENT)
    exclusive.consumer(1, "queue:mine", Recorder(), prefetch=1, exclusive=True)
    assert manage.take(admin, "queue:mine", 5) == []  # the exclusive consumer alone receives
    assert broker.queues["queue:mine"].ready == 1  # m0 waits; m1 is with the exclusive one
    assert manage.consumers(admin, "queue:mine")[0]["exclusive"] is True  # take's went


def test_take_reads_paged_messages_back(tmp_path: Path) -> None:
    broker = Broker(Journal(tmp_path / "journal", sync="never"), memory_limit=32 << 10)
    broker.recover()
    session = BrokerConnection(broker).session()
    for i in range(600):
        session.send("queue:deep", msg(f"{i:04}" + "x" * 200))
    assert broker.queues["queue:deep"].paged > 400
    admin = BrokerConnection(broker)
    taken: list[bytes] = []
    while len(taken) < 600:
        got = manage.take(admin, "queue:deep", manage.MAX_TAKE)
        assert got, len(taken)
        taken += [e.message.body[:4] for e in got]
    assert taken == [f"{i:04}".encode() for i in range(600)]
    broker.close()
