"""Redelivery: nack, consumer close and max_deliveries (DESIGN.md "Delivery semantics")."""

from __future__ import annotations

from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION

from .helpers import Recorder, bodies, make_broker, memory, msg, stats_of, stored

DLQ = "queue:__sys__deadLetter"


def test_nack_requeue_puts_the_message_back_in_its_place(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    for body in (b"a", b"b", b"c"):
        s.send("queue:q", msg(body))
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    [a] = r.take()
    assert (a.redelivered, a.delivery_count) == (False, 1)
    s.nack(c, a.seq, requeue=True)
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b", b"c"]
    BrokerSession.add_credit(c, 3)
    got = r.take()
    assert bodies(got) == [b"a", b"b", b"c"]
    assert (got[0].redelivered, got[0].delivery_count) == (True, 2)
    assert (got[1].redelivered, got[1].delivery_count) == (False, 1)


def test_a_nacked_message_goes_back_before_later_ones_of_its_priority_only(
    broker: Broker,
) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"low", priority=1))
    s.send("queue:q", msg(b"mid", priority=5))
    s.send("queue:q", msg(b"top", priority=9))
    s.nack(c, r.take()[0].seq)
    BrokerSession.add_credit(c, 3)
    assert r.bodies == [b"top", b"mid", b"low"]


def test_a_requeued_message_slots_between_waiting_ones_by_sequence(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=2)
    for body in (b"1", b"2", b"3", b"4"):
        s.send("queue:q", msg(body))
    one, two = r.take()
    s.nack(c, one.seq)  # waiting: 1 3 4
    s.nack(c, two.seq)  # 2 belongs between 1 and 3
    assert bodies(looking.browse(broker, "queue:q")) == [b"1", b"2", b"3", b"4"]
    BrokerSession.add_credit(c, 4)
    assert r.bodies == [b"1", b"2", b"3", b"4"]


def test_nack_without_requeue_dead_letters_with_reason_rejected(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"poison", properties={"id": 7}))
    s.send("queue:q", msg(b"fine"))
    s.nack(c, r.entries[0].seq, requeue=False)
    [dead] = looking.browse(broker, DLQ)
    assert dead.message.body == b"poison"
    assert dead.message.properties == {
        "id": 7,
        ORIGINAL_DESTINATION: "queue:q",
        DIVERT_REASON: "rejected",
    }
    assert not dead.redelivered
    assert stored(broker, "queue:q") == [b"fine"]
    assert stored(broker, DLQ) == [b"poison"]
    assert list(c.inflight) == [r.entries[1].seq]


def test_closing_a_consumer_returns_its_messages_in_order(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    for i in range(6):
        s.send("queue:q", msg(str(i)))
    r1 = Recorder()
    c1 = s.consumer(1, "queue:q", r1, prefetch=4)
    s.ack(c1, r1.entries[0].seq, cumulative=False)
    s.ack(c1, r1.entries[2].seq, cumulative=False)
    s.close_consumer(c1)
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["inflight"], st["consumers"]) == (4, 0, 0)
    r2 = Recorder()
    s.consumer(2, "queue:q", r2, prefetch=10)
    assert r2.bodies == [b"1", b"3", b"4", b"5"]
    assert [e.redelivered for e in r2.entries] == [True, True, False, False]
    assert [e.delivery_count for e in r2.entries] == [2, 2, 1, 1]


def test_closing_a_session_or_connection_returns_messages_too(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    s = conn.session(AckMode.CLIENT)
    s.consumer(1, "queue:q", Recorder())
    s.consumer(2, "queue:q", Recorder())
    for i in range(4):
        s.send("queue:q", msg(str(i)))
    conn.close()
    conn.close()  # idempotent
    assert looking.stats(broker)["connections"] == 0
    r = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r)
    assert r.bodies == [b"0", b"1", b"2", b"3"]
    assert all(e.redelivered for e in r.entries)


def test_past_max_deliveries_a_message_is_dead_lettered() -> None:
    broker = make_broker({"queue:q": DestinationSettings(max_deliveries=3)})
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"poison"))
    s.send("queue:q", msg(b"next"))
    for _ in range(3):
        [e] = r.take()
        assert e.message.body == b"poison"
        s.nack(c, e.seq)
        BrokerSession.add_credit(c, 1)
    assert [e.delivery_count for e in r.entries] == [1]
    assert r.bodies == [b"next"]
    [dead] = looking.browse(broker, DLQ)
    assert dead.message.body == b"poison"
    assert dead.message.properties[DIVERT_REASON] == "max-deliveries"
    assert dead.message.properties[ORIGINAL_DESTINATION] == "queue:q"
    assert stats_of(broker, "queue:q")["dead_lettered"] == 1


def test_consumer_close_counts_as_a_failed_delivery() -> None:
    broker = make_broker({"queue:q": DestinationSettings(max_deliveries=2)})
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(b"crashy"))
    for i in range(2):
        c = s.consumer(i, "queue:q", Recorder())
        s.close_consumer(c)
    assert looking.browse(broker, "queue:q") == []
    assert bodies(looking.browse(broker, DLQ)) == [b"crashy"]


def test_max_deliveries_zero_means_unlimited() -> None:
    broker = make_broker({"queue:q": DestinationSettings(max_deliveries=0)})
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg())
    for _ in range(50):
        [e] = r.take()
        s.nack(c, e.seq)
        BrokerSession.add_credit(c, 1)
    assert r.entries[0].delivery_count == 51
    assert looking.browse(broker, DLQ) == []


def test_the_store_learns_of_deliveries(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg())
    s.nack(c, r.take()[0].seq)
    BrokerSession.add_credit(c, 1)
    [e] = r.take()
    held = memory(broker).messages["queue:q"]
    assert held[e.seq].delivery_count == 2


def test_a_redelivered_message_goes_to_any_consumer(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r1, r2 = Recorder(), Recorder()
    c1 = s.consumer(1, "queue:q", r1, prefetch=1)
    s.send("queue:q", msg(b"x"))
    s.consumer(2, "queue:q", r2, prefetch=1)
    s.nack(c1, r1.entries[0].seq)
    assert r2.bodies == [b"x"]
    assert r2.entries[0].redelivered


def test_selectors_see_the_delivery_history(broker: Broker) -> None:
    """JMSRedelivered and JMSXDeliveryCount in a selector reflect the coming delivery."""
    conn = BrokerConnection(broker)
    conn.session().send("queue:h", msg(b"fresh"))
    first = conn.session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = first.consumer(1, "queue:h", recorder, prefetch=1)
    [entry] = recorder.take()
    first.nack(consumer, entry.seq, requeue=True)
    first.close_consumer(consumer)
    conn.session().send("queue:h", msg(b"new"))

    picky = Recorder()
    conn.session(AckMode.CLIENT).consumer(
        2, "queue:h", picky, prefetch=10, selector="JMSRedelivered = TRUE AND JMSXDeliveryCount = 2"
    )
    assert bodies(picky.take()) == [b"fresh"]
