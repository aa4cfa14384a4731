"""Messages the store refused leave their queues before anyone gets them (Broker.unstored)."""

from __future__ import annotations

from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.model.store import AckOp, AddOp
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.core.rules.unstored import withdraw_unstored

from .helpers import FakeClock, Recorder, RecordingStore, make_broker, msg


def adds(store: RecordingStore) -> list[AddOp]:
    return [op for kind, op in store.calls if kind == "add"]


def test_a_waiting_message_is_taken_out_and_its_room_given_back() -> None:
    store = RecordingStore()
    broker = make_broker({"queue:q": DestinationSettings(max_messages=2)}, store=store)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(b"kept"))
    s.send("queue:q", msg(b"refused"))
    queue = broker.queues["queue:q"]
    before = queue.held_bytes
    refused = adds(store)[-1]
    broker.unstored([refused])
    assert (queue.held, queue.held_bytes) == (1, before - refused.message.size)
    s.send("queue:q", msg(b"room again"))  # the bound counts what is really held
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=10)
    assert r.bodies == [b"kept", b"room again"]


def test_an_unacked_delivery_is_taken_back_and_the_consumer_gets_its_credit_back() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    consumer = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"refused"))  # pushed at once: its delivery is held by the driver
    s.send("queue:q", msg(b"next"))
    assert r.bodies == [b"refused"]
    assert withdraw_unstored(broker, [adds(store)[0]]) == (1, 0)
    assert consumer.inflight == {}
    broker.queues["queue:q"].deliver()
    assert r.bodies == [b"refused", b"next"]  # the credit came back: the next one goes


def test_a_message_an_auto_ack_consumer_already_got_is_counted_as_gone() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=10)
    s.send("queue:q", msg(b"already out"))
    assert withdraw_unstored(broker, [adds(store)[0]]) == (0, 1)


def test_a_paged_message_is_no_longer_counted() -> None:
    store = RecordingStore()
    broker = Broker(store, SettingsResolver({}), clock=FakeClock(), memory_limit=4096)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    for i in range(100):
        s.send("queue:q", msg(b"x" * 100, id=f"m{i}"))
    queue = broker.queues["queue:q"]
    assert queue.paged > 0
    refused = adds(store)[-1]
    store.messages["queue:q"].pop(refused.seq)  # what the journal refused, it does not hold
    held, paged = queue.held, queue.paged
    broker.unstored([refused])
    assert (queue.held, queue.paged) == (held - 1, paged - 1)
    r = Recorder()
    consumer = s.consumer(1, "queue:q", r, prefetch=1000)
    received = []
    while r.entries:
        received += r.take()
        for entry in list(consumer.inflight.values()):
            s.ack(consumer, entry.seq, cumulative=False)
        queue.deliver()
    assert [e.message.id for e in received] == [f"m{i}" for i in range(99)]
    assert (queue.held, queue.held_bytes, queue.paged) == (0, 0, 0)


def test_refused_acks_change_nothing_in_memory() -> None:
    broker = make_broker()
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(b"a"))
    assert withdraw_unstored(broker, [AckOp("queue:q", 1)]) == (0, 0)
    assert broker.queues["queue:q"].held == 1


def test_a_topics_refused_message_leaves_every_durable_subscription() -> None:
    store = RecordingStore()
    broker = make_broker(store=store)
    connection = BrokerConnection(broker, client_id="c")
    s = connection.session(AckMode.CLIENT)
    for i, name in enumerate(("one", "two")):
        consumer = s.consumer(i, "topic:t", Recorder(), subscription=name, durable=True)
        s.close_consumer(consumer)  # offline durable subscriptions store what comes
    s.send("topic:t", msg(b"refused"))
    [refused] = adds(store)
    assert len(refused.queues) == 2
    assert withdraw_unstored(broker, [refused]) == (2, 0)
    for name in refused.queues:
        queue = broker.queue_by_name(name)
        assert queue is not None
        assert queue.held == 0
