"""A subscription's bound is on its backlog: an empty subscription takes any one message.

With ``max_subscription_bytes`` (or a topic's own ``max_bytes``) below a message's
size, that message must still reach a subscriber that keeps up, not go straight to
the dead-letter queue.
"""

from __future__ import annotations

from chute.core.model.address import DEAD_LETTER
from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings, Overflow, SettingsResolver
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, msg, stats_of

LIMIT = 1000
BIG = b"B" * (4 * LIMIT)


def broker_with(settings: dict[str, DestinationSettings] | None = None) -> Broker:
    return Broker(
        MemoryStore(),
        SettingsResolver(settings or {}),
        clock=FakeClock(),
        max_subscription_bytes=LIMIT,
    )


def test_a_message_larger_than_the_bound_reaches_an_idle_subscriber() -> None:
    broker = broker_with()
    for mode in (AckMode.AUTO, AckMode.CLIENT):
        received = Recorder()
        BrokerConnection(broker).session(mode).consumer(1, f"topic:{mode.value}", received)
        producer = BrokerConnection(broker).session()
        producer.send(f"topic:{mode.value}", msg(BIG))
        if mode is AckMode.AUTO:  # settled as it is pushed: empty again, as RabbitMQ's test
            producer.send(f"topic:{mode.value}", msg(BIG))
        assert received.bodies == [BIG] * (2 if mode is AckMode.AUTO else 1), mode
    assert looking.browse(broker, DEAD_LETTER) == []


def test_under_drop_oldest_the_newest_large_message_stays() -> None:
    broker = broker_with()
    received = Recorder()
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer = session.consumer(1, "topic:big", received, prefetch=1)
    producer = BrokerConnection(broker).session()
    producer.send("topic:big", msg(BIG + b"1"))  # delivered, unacked: the subscription holds it
    producer.send("topic:big", msg(BIG + b"2"))  # no room while the first is held: dead letter
    session.ack(consumer, received.entries[0].seq)
    session.add_credit(consumer, 1)
    producer.send("topic:big", msg(BIG + b"3"))  # empty again (the second went)
    assert received.bodies == [BIG + b"1", BIG + b"3"]
    assert [e.message.body for e in looking.browse(broker, DEAD_LETTER)] == [BIG + b"2"]
    assert stats_of(broker, "topic:big")["dead_lettered"] == 1


def test_a_topics_own_bound_never_refuses_an_empty_subscription_either() -> None:
    own = DestinationSettings(max_bytes=LIMIT, overflow=Overflow.REJECT)
    broker = broker_with({"topic:own": own})
    received = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "topic:own", received)
    BrokerConnection(broker).session().send("topic:own", msg(BIG))
    assert received.bodies == [BIG]
