"""Producer flow control: a queue whose consumers fall behind tells its producers' drivers."""

from __future__ import annotations

from chute.core.model.consumer import AckMode
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.store.memory import MemoryStore

from .helpers import Recorder, msg

BACKLOG = 100


def make() -> Broker:
    return Broker(MemoryStore(), flow_backlog=BACKLOG)


def test_a_backlog_past_the_mark_with_consumers_is_reported() -> None:
    broker = make()
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.consumer(1, "queue:q", Recorder(), prefetch=10)
    for _ in range(BACKLOG + 9):
        s.send("queue:q", msg())
    assert not broker.pressure  # 10 in flight, 99 waiting
    s.send("queue:q", msg())
    queue = broker.queue_by_name("queue:q")
    assert broker.pressure == [queue]


def test_a_queue_nobody_consumes_is_never_congested() -> None:
    broker = make()
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    for _ in range(BACKLOG * 5):
        s.send("queue:q", msg())
    assert not broker.pressure  # a backlog for later is what queues are for


def test_waiters_wake_once_the_backlog_is_halved() -> None:
    broker = make()
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    consumer = s.consumer(1, "queue:q", r, prefetch=1)
    for _ in range(BACKLOG + 1):
        s.send("queue:q", msg())
    queue = broker.queue_by_name("queue:q")
    assert queue is not None
    woken: list[str] = []
    queue.flow_waiters.append(lambda: woken.append("w"))
    for _ in range(BACKLOG // 2 - 1):  # consume one at a time, acking and granting credit
        _, entry = r.deliveries.pop()
        s.ack(consumer, entry.seq)
        BrokerSession.add_credit(consumer, 1)
    assert not woken
    _, entry = r.deliveries.pop()
    s.ack(consumer, entry.seq)
    BrokerSession.add_credit(consumer, 1)
    assert woken == ["w"]
    assert queue.flow_waiters == []


def test_waiters_wake_when_the_last_consumer_leaves() -> None:
    broker = make()
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer = s.consumer(1, "queue:q", Recorder(), prefetch=1)
    for _ in range(BACKLOG * 2):
        s.send("queue:q", msg())
    queue = broker.queue_by_name("queue:q")
    assert queue is not None
    woken: list[str] = []
    queue.flow_waiters.append(lambda: woken.append("w"))
    s.close_consumer(consumer)
    assert woken == ["w"]


def test_a_held_connection_gets_nothing_until_released_and_others_get_its_share() -> None:
    """Consumer flow control: a connection that cannot write more (a slow reader) is
    held whatever its credit; the messages go to other consumers meanwhile, and it
    gets its share again once released."""
    broker = make()
    slow_conn, fast_conn = BrokerConnection(broker), BrokerConnection(broker)
    slow, fast = Recorder(), Recorder()
    slow_conn.session(AckMode.CLIENT).consumer(1, "queue:q", slow, prefetch=1000)
    fast_conn.session(AckMode.CLIENT).consumer(1, "queue:q", fast, prefetch=1000)
    producer = BrokerConnection(broker).session()
    slow_conn.hold_deliveries(True)
    for _ in range(10):
        producer.send("queue:q", msg())
    assert (len(slow.deliveries), len(fast.deliveries)) == (0, 10)
    fast_conn.hold_deliveries(True)
    for _ in range(4):
        producer.send("queue:q", msg())
    assert (len(slow.deliveries), len(fast.deliveries)) == (0, 10)  # both held: they wait
    slow_conn.hold_deliveries(False)  # released: what waited goes out at once
    assert (len(slow.deliveries), len(fast.deliveries)) == (4, 10)
    producer.send("queue:q", msg())
    assert len(slow.deliveries) == 5
