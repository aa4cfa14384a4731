"""Expiry: an expired message is never delivered; it moves to the expiry address."""

from __future__ import annotations

from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION

from .helpers import FakeClock, Recorder, bodies, make_broker, msg, restart, stats_of, stored

EXPIRED = "queue:__sys__expired"


def test_an_expired_message_is_not_delivered_but_moved_at_dispatch(
    broker: Broker, clock: FakeClock
) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"first"))
    s.send("queue:q", msg(b"short", properties={"k": 1}), ttl=1000)
    s.send("queue:q", msg(b"long"), ttl=5000)
    clock.advance(1000)
    s.ack(c, r.entries[0].seq)
    BrokerSession.add_credit(c, 5)
    assert r.bodies == [b"first", b"long"]
    [moved] = looking.browse(broker, EXPIRED)
    m = moved.message
    assert m.body == b"short"
    assert m.properties[DIVERT_REASON] == "expired"
    assert m.properties[ORIGINAL_DESTINATION] == "queue:q"
    assert m.properties["k"] == 1
    assert m.expiration == 0  # it does not expire again where it went
    st = stats_of(broker, "queue:q")
    assert (st["expired"], st["depth"]) == (1, 1)
    assert stored(broker, "queue:q") == [b"long"]
    assert stored(broker, EXPIRED) == [b"short"]


def test_a_message_is_delivered_until_its_expiration(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    s.send("queue:q", msg(), ttl=1000)
    clock.advance(999)
    r = Recorder()
    s.consumer(1, "queue:q", r)
    assert len(r.entries) == 1
    assert looking.browse(broker, EXPIRED) == []


def test_an_already_expired_message_never_reaches_a_waiting_consumer(
    broker: Broker, clock: FakeClock
) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r = Recorder()
    s.consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"stale", expiration=clock.now - 1))
    s.send("queue:q", msg(b"fresh", expiration=clock.now + 1))
    assert r.bodies == [b"fresh"]
    assert bodies(looking.browse(broker, EXPIRED)) == [b"stale"]


def test_expire_due_sweeps_waiting_messages(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(b"a"), ttl=100)
    s.send("queue:q", msg(b"b"))
    s.send("queue:q", msg(b"c", priority=9), ttl=300)
    s.send("queue:other", msg(b"d"), ttl=100)
    assert broker.expire_due() == 0
    clock.advance(100)
    assert broker.expire_due() == 2
    assert bodies(looking.browse(broker, "queue:q")) == [b"b", b"c"]  # sequence order
    assert sorted(bodies(looking.browse(broker, EXPIRED))) == [b"a", b"d"]
    clock.advance(200)
    assert broker.expire_due() == 1
    assert bodies(looking.browse(broker, "queue:q")) == [b"b"]
    assert stats_of(broker, "queue:q")["expired"] == 2
    assert broker.expire_due() == 0


def test_expire_due_leaves_messages_in_flight_alone(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", msg(), ttl=10)
    clock.advance(10)
    assert broker.expire_due() == 0
    s.ack(c, r.entries[0].seq)
    assert stats_of(broker, "queue:q")["acked"] == 1


def test_a_returned_message_that_expired_meanwhile_is_not_redelivered(
    broker: Broker, clock: FakeClock
) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"a"), ttl=10)
    clock.advance(10)
    s.nack(c, r.take()[0].seq)
    BrokerSession.add_credit(c, 1)
    assert r.entries == []
    assert bodies(looking.browse(broker, EXPIRED)) == [b"a"]


def test_expire_due_covers_topic_subscriptions(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker, client_id="app").session(AckMode.CLIENT)
    c = s.consumer(1, "topic:t", Recorder(), subscription="s", durable=True)
    s.close_consumer(c)
    s.send("topic:t", msg(b"gone"), ttl=50)
    s.send("topic:t", msg(b"kept"))
    clock.advance(50)
    assert broker.expire_due() == 1
    [moved] = looking.browse(broker, EXPIRED)
    assert moved.message.properties[ORIGINAL_DESTINATION] == "topic:t"
    assert stats_of(broker, "topic:t")["depth"] == 1


def test_a_selective_consumer_never_gets_an_expired_match(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    s.send("queue:q", msg(b"old", properties={"x": 1}), ttl=5)
    s.send("queue:q", msg(b"new", properties={"x": 1}))
    clock.advance(5)
    r = Recorder()
    s.consumer(1, "queue:q", r, selector="x = 1")
    assert r.bodies == [b"new"]
    assert bodies(looking.browse(broker, EXPIRED)) == [b"old"]


def test_the_expiry_address_is_configurable_and_the_most_specific_wins() -> None:
    clock = FakeClock()
    broker = make_broker(
        {
            "queue:logs.*": DestinationSettings(expiry="queue:logs.expired"),
            "queue:logs.audit.*": DestinationSettings(expiry="queue:audit.expired"),
            "queue:logs.audit.keep": DestinationSettings(expiry="queue:keep.expired"),
        },
        clock=clock,
    )
    s = BrokerConnection(broker).session()
    for address in ("queue:logs.web", "queue:logs.audit.db", "queue:logs.audit.keep", "queue:x"):
        s.send(address, msg(address), ttl=1)
    clock.advance(1)
    assert broker.expire_due() == 4
    assert bodies(looking.browse(broker, "queue:logs.expired")) == [b"queue:logs.web"]
    assert bodies(looking.browse(broker, "queue:audit.expired")) == [b"queue:logs.audit.db"]
    assert bodies(looking.browse(broker, "queue:keep.expired")) == [b"queue:logs.audit.keep"]
    assert bodies(looking.browse(broker, EXPIRED)) == [b"queue:x"]


def test_expired_messages_stay_moved_after_a_restart(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session()
    s.send("queue:q", msg(b"a"), ttl=1)
    clock.advance(1)
    broker.expire_due()
    broker2 = restart(broker)
    assert looking.browse(broker2, "queue:q") == []
    assert bodies(looking.browse(broker2, EXPIRED)) == [b"a"]


def test_a_message_that_expired_during_downtime_is_moved_not_delivered(
    broker: Broker, clock: FakeClock
) -> None:
    BrokerConnection(broker).session().send("queue:q", msg(b"a"), ttl=100)
    clock.advance(100)
    broker2 = restart(broker)
    r = Recorder()
    BrokerConnection(broker2).session(AckMode.AUTO).consumer(1, "queue:q", r)
    assert r.entries == []
    assert bodies(looking.browse(broker2, EXPIRED)) == [b"a"]
