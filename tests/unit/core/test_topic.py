"""Topics and their subscriptions: non-durable, durable, shared, selectors, unsubscribe."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.errors import ConsumerError, NotFound

from .helpers import FakeClock, Recorder, memory, msg, restart, stats_of, stored


def test_every_subscriber_gets_every_message(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    recorders = [Recorder() for _ in range(3)]
    for i, r in enumerate(recorders):
        s.consumer(i, "topic:t", r)
    for i in range(4):
        s.send("topic:t", msg(str(i)))
    for r in recorders:
        assert r.bodies == [b"0", b"1", b"2", b"3"]
    # one offset space: every subscription keeps the topic's sequence number
    assert [e.seq for e in recorders[0].entries] == [e.seq for e in recorders[2].entries]
    assert recorders[0].entries[0].message is recorders[1].entries[0].message


def test_a_topic_without_subscribers_keeps_nothing(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.send("topic:t", msg())
    r = Recorder()
    s.consumer(1, "topic:t", r)
    assert r.entries == []
    st = stats_of(broker, "topic:t")
    assert (st["kind"], st["enqueued"], st["depth"]) == ("topic", 1, 0)


def test_topic_stats_sum_their_subscriptions(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.consumer(1, "topic:t", Recorder(), prefetch=1)
    s.consumer(2, "topic:t", Recorder(), prefetch=1, selector="x = 1")
    s.send("topic:t", msg(properties={"x": 1}))
    s.send("topic:t", msg(properties={"x": 2}))
    st = stats_of(broker, "topic:t")
    assert (st["depth"], st["inflight"], st["consumers"], st["enqueued"]) == (3, 2, 2, 2)
    assert sorted(sub["selector"] or "" for sub in st["subscriptions"]) == ["", "x = 1"]


def test_topic_stats_count_what_left_their_subscriptions(broker: Broker, clock: FakeClock) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "topic:t", r, prefetch=1)
    s.send("topic:t", msg(b"bad"))
    s.send("topic:t", msg(b"old"), ttl=1)
    s.nack(c, r.entries[0].seq, requeue=False)
    clock.advance(1)
    assert broker.expire_due() == 1
    st = stats_of(broker, "topic:t")
    assert (st["dead_lettered"], st["expired"], st["depth"]) == (1, 1, 0)
    assert st["subscriptions"][0]["expired"] == 1


def test_a_non_durable_subscription_dies_with_its_consumer(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "topic:t", r, prefetch=1)
    s.send("topic:t", msg(b"a"))
    s.send("topic:t", msg(b"b"))
    s.close_consumer(c)
    assert stats_of(broker, "topic:t")["subscriptions"] == []
    s.send("topic:t", msg(b"c"))
    r2 = Recorder()
    s.consumer(2, "topic:t", r2)
    assert r2.entries == []


def test_non_durable_subscriptions_are_not_stored(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.consumer(1, "topic:t", Recorder(), prefetch=1)
    s.send("topic:t", msg())
    s.send("topic:t", msg())
    assert memory(broker).messages == {
        "queue:__sys__deadLetter": {},
        "queue:__sys__expired": {},
    }


def test_a_durable_subscription_needs_a_name_and_a_client_id(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    with pytest.raises(ConsumerError, match="client id"):
        s.consumer(1, "topic:t", Recorder(), subscription="sub", durable=True)
    s2 = BrokerConnection(broker, client_id="app").session()
    with pytest.raises(ConsumerError, match="name"):
        s2.consumer(1, "topic:t", Recorder(), durable=True)
    with pytest.raises(ConsumerError, match="name"):
        s2.consumer(1, "topic:t", Recorder(), shared=True)


def test_a_durable_subscription_keeps_messages_while_disconnected(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "topic:t", r, subscription="audit", durable=True)
    s.send("topic:t", msg(b"a"))
    s.ack(c, r.entries[0].seq)
    conn.close()
    producer = BrokerConnection(broker).session()
    for body in (b"b", b"c"):
        producer.send("topic:t", msg(body))
    assert stats_of(broker, "topic:t")["depth"] == 2
    again = BrokerConnection(broker, client_id="app").session(AckMode.CLIENT)
    r2 = Recorder()
    again.consumer(1, "topic:t", r2, subscription="audit", durable=True)
    assert r2.bodies == [b"b", b"c"]


def test_unacked_messages_of_a_durable_subscriber_come_back_redelivered(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session(AckMode.CLIENT)
    r = Recorder()
    s.consumer(1, "topic:t", r, subscription="audit", durable=True)
    s.send("topic:t", msg(b"a"))
    conn.close()
    r2 = Recorder()
    BrokerConnection(broker, client_id="app").session().consumer(
        1, "topic:t", r2, subscription="audit", durable=True
    )
    [entry] = r2.entries
    assert entry.message.body == b"a"
    assert entry.redelivered
    assert entry.delivery_count == 2


def test_a_durable_subscription_survives_a_restart(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session(AckMode.CLIENT)
    c = s.consumer(1, "topic:t", Recorder(), subscription="audit", durable=True, selector="n > 0")
    s.close_consumer(c)
    for n in range(4):
        s.send("topic:t", msg(str(n), properties={"n": n}))
    broker2 = restart(broker)
    r = Recorder()
    BrokerConnection(broker2, client_id="app").session().consumer(
        1, "topic:t", r, subscription="audit", durable=True, selector="n > 0"
    )
    assert r.bodies == [b"1", b"2", b"3"]
    assert not any(e.redelivered for e in r.entries)
    BrokerConnection(broker2).session().send("topic:t", msg(b"next", properties={"n": 1}))
    assert r.entries[-1].seq == 5  # the topic's numbering carries on


def test_the_same_client_id_cannot_attach_twice_to_a_durable_subscription(broker: Broker) -> None:
    s = BrokerConnection(broker, client_id="app").session()
    s.consumer(1, "topic:t", Recorder(), subscription="audit", durable=True)
    with pytest.raises(ConsumerError, match="already has a consumer"):
        s.consumer(2, "topic:t", Recorder(), subscription="audit", durable=True)


def test_durable_subscriptions_of_different_client_ids_are_separate(broker: Broker) -> None:
    r1, r2 = Recorder(), Recorder()
    BrokerConnection(broker, client_id="a").session(AckMode.AUTO).consumer(
        1, "topic:t", r1, subscription="s", durable=True
    )
    BrokerConnection(broker, client_id="b").session(AckMode.AUTO).consumer(
        1, "topic:t", r2, subscription="s", durable=True
    )
    BrokerConnection(broker).session().send("topic:t", msg())
    assert len(r1.entries) == len(r2.entries) == 1


def test_changing_the_selector_of_a_durable_subscription_starts_a_new_one(broker: Broker) -> None:
    s = BrokerConnection(broker, client_id="app").session()
    c = s.consumer(1, "topic:t", Recorder(), subscription="s", durable=True, selector="n = 1")
    s.close_consumer(c)
    s.send("topic:t", msg(b"kept", properties={"n": 1}))
    r = Recorder()
    s.consumer(1, "topic:t", r, subscription="s", durable=True, selector="n = 2")
    assert r.entries == []  # JMS: the old subscription and its messages are gone
    with pytest.raises(ConsumerError, match="in use"):
        s.consumer(2, "topic:t", Recorder(), subscription="s", durable=True, selector="n = 3")


def test_shared_subscriptions_compete(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r1, r2, other = Recorder(), Recorder(), Recorder()
    s.consumer(1, "topic:t", r1, subscription="work", shared=True)
    BrokerConnection(broker).session(AckMode.AUTO).consumer(
        1, "topic:t", r2, subscription="work", shared=True
    )
    s.consumer(3, "topic:t", other)
    for i in range(6):
        s.send("topic:t", msg(str(i)))
    assert r1.bodies == [b"0", b"2", b"4"]
    assert r2.bodies == [b"1", b"3", b"5"]
    assert len(other.entries) == 6


def test_a_shared_non_durable_subscription_ends_with_its_last_consumer(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    c1 = s.consumer(1, "topic:t", Recorder(), subscription="work", shared=True)
    c2 = s.consumer(2, "topic:t", Recorder(), subscription="work", shared=True)
    s.close_consumer(c1)
    s.send("topic:t", msg())
    assert stats_of(broker, "topic:t")["depth"] == 1
    s.close_consumer(c2)
    assert stats_of(broker, "topic:t")["subscriptions"] == []


def test_a_shared_durable_subscription_competes_and_outlives_its_consumers(
    broker: Broker,
) -> None:
    s1 = BrokerConnection(broker).session(AckMode.AUTO)
    s2 = BrokerConnection(broker).session(AckMode.AUTO)
    r1, r2 = Recorder(), Recorder()
    c1 = s1.consumer(1, "topic:t", r1, subscription="jobs", durable=True, shared=True)
    c2 = s2.consumer(1, "topic:t", r2, subscription="jobs", durable=True, shared=True)
    for i in range(4):
        s1.send("topic:t", msg(str(i)))
    assert r1.bodies == [b"0", b"2"]
    assert r2.bodies == [b"1", b"3"]
    s1.close_consumer(c1)
    s2.close_consumer(c2)
    s1.send("topic:t", msg(b"later"))
    r3 = Recorder()
    s1.consumer(2, "topic:t", r3, subscription="jobs", durable=True, shared=True)
    assert r3.bodies == [b"later"]


def test_unsubscribe_removes_the_subscription_and_its_messages(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session()
    c = s.consumer(1, "topic:t", Recorder(), subscription="audit", durable=True, prefetch=1)
    s.send("topic:t", msg())
    s.send("topic:t", msg())
    with pytest.raises(ConsumerError, match="still has consumers"):
        s.unsubscribe("audit")
    s.close_consumer(c)
    key = "durable:app.audit"
    assert stored(broker, key) != []
    s.unsubscribe("audit")
    assert stats_of(broker, "topic:t")["subscriptions"] == []
    assert key not in memory(broker).definitions
    assert stored(broker, key) == []
    with pytest.raises(NotFound):
        s.unsubscribe("audit")
    r = Recorder()
    s.consumer(1, "topic:t", r, subscription="audit", durable=True)
    assert r.entries == []
    assert restart(broker).subscriptions.keys() == {key}


def test_dropping_a_subscription_gives_back_the_memory_its_messages_took_once(
    broker: Broker,
) -> None:
    conn = BrokerConnection(broker, client_id="app")
    s = conn.session()
    s.close_consumer(s.consumer(1, "topic:t", Recorder(), subscription="d", durable=True))
    s.consumer(2, "topic:t", Recorder(), prefetch=1, shared=True, subscription="live")
    for _ in range(3):
        s.send("topic:t", msg(b"0123456789"))
    assert broker.memory.used > 0
    s.unsubscribe("d")
    conn.close()  # the shared subscription ends with its consumer
    assert broker.memory.used == 0


def test_unsubscribe_from_another_connection_by_client_id(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="app")
    conn.session().consumer(1, "topic:t", Recorder(), subscription="audit", durable=True)
    conn.close()
    other = BrokerConnection(broker).session()
    with pytest.raises(NotFound):
        other.unsubscribe("audit")
    other.unsubscribe("audit", client_id="app")
    assert broker.subscriptions == {}


def test_subscription_selectors_filter_what_enters(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    r = Recorder()
    s.consumer(1, "topic:t", r, selector="region = 'eu'", prefetch=1)
    for region in ("us", "eu", "us", "eu"):
        s.send("topic:t", msg(region, properties={"region": region}))
    assert r.bodies == [b"eu"]
    assert stats_of(broker, "topic:t")["depth"] == 2  # only the matching ones were copied


def test_acks_and_nacks_work_on_subscriptions(broker: Broker) -> None:
    s = BrokerConnection(broker, client_id="app").session(AckMode.INDIVIDUAL)
    r = Recorder()
    c = s.consumer(1, "topic:t", r, subscription="a", durable=True, prefetch=1)
    s.send("topic:t", msg(b"one"))
    s.send("topic:t", msg(b"two"))
    s.nack(c, r.take()[0].seq)
    BrokerSession.add_credit(c, 1)
    [again] = r.take()
    assert (again.message.body, again.redelivered, again.delivery_count) == (b"one", True, 2)
    s.nack(c, again.seq, requeue=False)
    BrokerSession.add_credit(c, 1)
    [two] = r.take()
    s.ack(c, two.seq)
    dead = looking.browse(broker, "queue:__sys__deadLetter")
    assert [e.message.properties["chute_original_destination"] for e in dead] == ["topic:t"]
    assert stored(broker, "durable:app.a") == []
