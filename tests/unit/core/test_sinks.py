"""Sinks (dead-letter and expiry queues): their default bound, and a non-persistent dead
letter that never becomes a store write.

A subscriber that never reads, behind a flood of non-persistent messages, drops its
oldest to the dead-letter queue at the flood's rate; the dead-letter queue must
neither grow without bound nor write what its producer never wanted written.
"""

from __future__ import annotations

import logging

import pytest

from chute.core.model.address import DEAD_LETTER, EXPIRED
from chute.core.model.consumer import AckMode
from chute.core.model.paging import HELD_OVERHEAD, held_cost
from chute.core.model.settings import (
    SINK_MAX_BYTES,
    SINK_MEMORY_SHARE,
    DestinationSettings,
    Overflow,
    SettingsResolver,
)
from chute.core.model.store import AddOp
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON
from chute.message import Message

from .helpers import FakeClock, Recorder, RecordingStore, msg, stats_of

BODY = b"f" * 1000
COST = held_cost(msg(BODY))


def flood_broker(
    store: RecordingStore,
    *,
    memory_limit: int = 0,
    settings: dict[str, DestinationSettings] | None = None,
) -> Broker:
    return Broker(
        store,
        SettingsResolver(settings or {}),
        clock=FakeClock(),
        memory_limit=memory_limit,
        memory_high_watermark=100 * memory_limit,
        max_subscription_bytes=10 * len(BODY),
    )


def stuck_subscriber(broker: Broker) -> BrokerSession:
    """A subscriber that took one message and reads nothing more, and a producer."""
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(
        1, "topic:flood", Recorder(), prefetch=1
    )
    return BrokerConnection(broker).session(AckMode.AUTO)


def dead_letters(broker: Broker) -> list[Message]:
    return [entry.message for entry in looking.browse(broker, DEAD_LETTER)]


def waiting_in_subscription(broker: Broker) -> list[bytes]:
    sub = next(iter(broker.topics["topic:flood"].subscriptions.values()))
    return [e.message.body for lane in sub.lanes for e in lane]


def test_dead_letter_and_expiry_queues_are_bounded_by_default() -> None:
    resolve = SettingsResolver(
        {"queue:orders": DestinationSettings(dead_letter="queue:orders.dlq")}
    )
    for sink in (DEAD_LETTER, EXPIRED, "queue:orders.dlq"):
        settings = resolve(sink)
        assert (settings.max_bytes, settings.overflow) == (SINK_MAX_BYTES, Overflow.DROP_OLDEST)
        assert settings.transient_in_memory
    assert not resolve("queue:orders").bounded
    assert not resolve("queue:orders").transient_in_memory


def test_a_sink_of_its_own_in_the_configuration_keeps_its_own_bound() -> None:
    resolve = SettingsResolver(
        {
            DEAD_LETTER: DestinationSettings(),  # unbounded, as before the default bound
            "queue:*": DestinationSettings(max_messages=5, overflow=Overflow.REJECT),
        }
    )
    assert not resolve(DEAD_LETTER).bounded
    assert resolve(DEAD_LETTER).transient_in_memory  # never a write, whatever its bound
    assert (resolve(EXPIRED).max_messages, resolve(EXPIRED).overflow) == (5, Overflow.REJECT)


def test_a_non_persistent_message_dropped_by_a_subscriber_is_never_written() -> None:
    store = RecordingStore()
    broker = flood_broker(store, memory_limit=200 * COST)
    producer = stuck_subscriber(broker)
    for _ in range(2000):  # ten times what the memory holds before queues page
        producer.send("topic:flood", msg(BODY, persistent=False))
    assert [op for kind, op in store.calls if kind == "add"] == []
    assert store.kinds().count("ack") == 0
    kept = dead_letters(broker)
    assert kept, "the dead-letter queue kept none"
    assert all(not m.persistent for m in kept)  # a dead letter keeps its persistence
    assert all(m.properties[DIVERT_REASON] == "dropped-oldest" for m in kept)
    # held in memory, in a quarter of max_memory at most: it does not make every queue page
    dlq = broker.queues[DEAD_LETTER]
    assert sum(held_cost(m) for m in kept) == dlq.held * HELD_OVERHEAD + 2 * dlq.held_bytes
    assert sum(held_cost(m) for m in kept) <= broker.memory.limit // SINK_MEMORY_SHARE
    assert broker.memory.used <= broker.memory.limit


def test_the_newest_non_persistent_dead_letters_stay_under_max_memory() -> None:
    store = RecordingStore()
    broker = flood_broker(store, memory_limit=200 * COST)
    producer = stuck_subscriber(broker)
    sent = [msg(f"{i:06d}".encode() + BODY, persistent=False) for i in range(2000)]
    for message in sent:
        producer.send("topic:flood", message)
    in_sub = waiting_in_subscription(broker)
    kept = [m.body for m in dead_letters(broker)]
    # what left the subscription last is what the dead-letter queue holds: the newest
    bodies = [m.body for m in sent]
    assert kept + in_sub == bodies[len(bodies) - len(kept) - len(in_sub) :]
    assert stats_of(broker, DEAD_LETTER)["dead_lettered"] > 1000
    assert broker.diversion.discarded == stats_of(broker, DEAD_LETTER)["dead_lettered"]


def test_persistent_dead_letters_stay_persistent_and_page_as_before() -> None:
    store = RecordingStore()
    broker = flood_broker(store, memory_limit=200 * COST)
    producer = stuck_subscriber(broker)
    for _ in range(1000):
        producer.send("topic:flood", msg(BODY))
    dropped = 1000 - 1 - len(waiting_in_subscription(broker))  # one is in flight
    written = [op for kind, op in store.calls if kind == "add"]
    assert len(written) == dropped  # every one the subscription dropped, on disk
    assert all(isinstance(op, AddOp) and op.queues == (DEAD_LETTER,) for op in written)
    dlq = broker.queues[DEAD_LETTER]
    assert dlq.paged > 0  # past max_memory they page: they are on disk already
    assert dlq.held == dropped
    assert all(m.persistent for m in dead_letters(broker))


def test_a_full_dead_letter_queue_drops_its_oldest_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RecordingStore()
    bound = 50 * msg(BODY).size
    broker = flood_broker(
        store,
        settings={DEAD_LETTER: DestinationSettings(max_bytes=bound, overflow=Overflow.DROP_OLDEST)},
    )
    producer = stuck_subscriber(broker)
    sent = [msg(f"{i:06d}".encode() + BODY[6:]) for i in range(500)]
    with caplog.at_level(logging.WARNING, logger="chute.broker"):
        for message in sent:
            producer.send("topic:flood", message)
    dlq = broker.queues[DEAD_LETTER]
    assert dlq.held_bytes <= bound
    kept = [m.body for m in dead_letters(broker)]
    assert 40 < len(kept) == dlq.held  # a dead letter carries where it came from and why
    dropped = [m.body for m in sent][1 : 500 - len(waiting_in_subscription(broker))]
    assert kept == dropped[-len(kept) :]  # the newest that left the subscription
    discarded = [r for r in caplog.records if "discarded" in r.getMessage()]
    assert len(discarded) == 1, [r.getMessage() for r in discarded]
    line = discarded[0].getMessage()
    assert f"{DEAD_LETTER} discarded (the oldest, to make room)" in line
    assert f"{DEAD_LETTER} keeps at most {bound} bytes;" in line
    assert broker.diversion.discarded == len(dropped) - len(kept)


def test_a_dead_letter_alone_larger_than_the_memory_line_is_discarded_not_written() -> None:
    store = RecordingStore()
    broker = flood_broker(store, memory_limit=2 * COST)
    producer = stuck_subscriber(broker)
    big = b"b" * (4 * len(BODY))
    for _ in range(20):
        producer.send("topic:flood", msg(big, persistent=False))
    assert [kind for kind in store.kinds() if kind == "add"] == []
    assert dead_letters(broker) == []
    assert broker.diversion.discarded > 0
