"""Bounded destinations: every overflow policy, by message count and by bytes."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION
from chute.core.rules.routing import WouldBlock
from chute.errors import DestinationFull
from chute.message import Message

from .helpers import Recorder, bodies, make_broker, stats_of, stored

DLQ = "queue:__sys__deadLetter"
BODY_LEN = 36
SIZE = Message.create(b"0" * BODY_LEN).size


def body(i: int) -> bytes:
    return f"{i:0{BODY_LEN}d}".encode()


def room_for_two(policy: Overflow, by: str) -> DestinationSettings:
    """Settings that let exactly two of our messages in, by count or by bytes."""
    if by == "count":
        return DestinationSettings(max_messages=2, overflow=policy)
    return DestinationSettings(max_bytes=2 * SIZE + SIZE // 2, overflow=policy)


def setup(policy: Overflow, by: str, address: str = "queue:q") -> tuple[Broker, BrokerSession]:
    broker = make_broker({address: room_for_two(policy, by)})
    return broker, BrokerConnection(broker).session(AckMode.CLIENT)


BY = pytest.mark.parametrize("by", ["count", "bytes"])


@BY
def test_reject_refuses_the_producer_and_stores_nothing(by: str) -> None:
    broker, s = setup(Overflow.REJECT, by)
    s.send("queue:q", Message.create(body(0)))
    s.send("queue:q", Message.create(body(1)))
    with pytest.raises(DestinationFull, match="queue:q is full") as info:
        s.send("queue:q", Message.create(body(2)))
    assert not isinstance(info.value, WouldBlock)
    assert bodies(looking.browse(broker, "queue:q")) == [body(0), body(1)]
    assert stored(broker, "queue:q") == [body(0), body(1)]
    assert looking.browse(broker, DLQ) == []
    assert stats_of(broker, "queue:q")["enqueued"] == 2


@BY
def test_reject_takes_messages_again_once_room_is_freed(by: str) -> None:
    broker, s = setup(Overflow.REJECT, by)
    r = Recorder()
    for i in range(2):
        s.send("queue:q", Message.create(body(i)))
    c = s.consumer(1, "queue:q", r, prefetch=1)
    with pytest.raises(DestinationFull):  # in flight still counts against the bound
        s.send("queue:q", Message.create(body(2)))
    s.ack(c, r.entries[0].seq)
    s.send("queue:q", Message.create(body(2)))
    assert bodies(looking.browse(broker, "queue:q")) == [body(1), body(2)]


@BY
def test_dead_letter_sends_the_new_message_to_the_dead_letter_queue(by: str) -> None:
    broker, s = setup(Overflow.DEAD_LETTER, by)
    for i in range(3):
        s.send("queue:q", Message.create(body(i), properties={"k": "v"}))
    assert bodies(looking.browse(broker, "queue:q")) == [body(0), body(1)]
    [dead] = looking.browse(broker, DLQ)
    assert dead.message.body == body(2)
    assert dead.message.properties[ORIGINAL_DESTINATION] == "queue:q"
    assert dead.message.properties[DIVERT_REASON] == "overflow"
    assert dead.message.properties["k"] == "v"
    assert stored(broker, DLQ) == [body(2)]
    assert stats_of(broker, "queue:q")["dead_lettered"] == 1


@BY
def test_drop_oldest_sends_the_oldest_waiting_message_to_the_dead_letter_queue(by: str) -> None:
    broker, s = setup(Overflow.DROP_OLDEST, by)
    s.send("queue:q", Message.create(body(0), priority=9))  # oldest, whatever its priority
    s.send("queue:q", Message.create(body(1)))
    s.send("queue:q", Message.create(body(2)))
    s.send("queue:q", Message.create(body(3)))
    assert bodies(looking.browse(broker, "queue:q")) == [body(2), body(3)]
    dead = looking.browse(broker, DLQ)
    assert bodies(dead) == [body(0), body(1)]
    assert {e.message.properties[DIVERT_REASON] for e in dead} == {"dropped-oldest"}
    assert stored(broker, "queue:q") == [body(2), body(3)]
    assert stats_of(broker, "queue:q")["dead_lettered"] == 2


@BY
def test_drop_oldest_never_drops_a_message_in_flight(by: str) -> None:
    broker, s = setup(Overflow.DROP_OLDEST, by)
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=1)
    for i in range(3):
        s.send("queue:q", Message.create(body(i)))
    assert r.bodies == [body(0)]
    assert bodies(looking.browse(broker, "queue:q")) == [body(0), body(2)]
    assert bodies(looking.browse(broker, DLQ)) == [body(1)]


def test_drop_oldest_with_everything_in_flight_dead_letters_the_new_message() -> None:
    broker, s = setup(Overflow.DROP_OLDEST, "count")
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=5)
    for i in range(3):
        s.send("queue:q", Message.create(body(i)))
    assert r.bodies == [body(0), body(1)]
    [dead] = looking.browse(broker, DLQ)
    assert dead.message.body == body(2)
    assert dead.message.properties[DIVERT_REASON] == "overflow"


def test_drop_oldest_drops_as_many_as_a_big_message_needs() -> None:
    broker = make_broker(
        {"queue:q": DestinationSettings(max_bytes=3 * SIZE, overflow=Overflow.DROP_OLDEST)}
    )
    s = BrokerConnection(broker).session()
    for i in range(3):
        s.send("queue:q", Message.create(body(i)))
    s.send("queue:q", Message.create(b"B" * (BODY_LEN + SIZE)))  # the size of two
    assert bodies(looking.browse(broker, DLQ)) == [body(0), body(1)]
    assert len(looking.browse(broker, "queue:q")) == 2


@BY
def test_block_raises_would_block_and_wakes_the_producer_when_an_ack_frees_room(by: str) -> None:
    broker, s = setup(Overflow.BLOCK, by)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=2)
    s.send("queue:q", Message.create(body(0)))
    s.send("queue:q", Message.create(body(1)))
    with pytest.raises(WouldBlock) as info:
        s.send("queue:q", Message.create(body(2)))
    assert info.value.address == "queue:q"
    assert info.value.timeout_ms == 30_000
    assert stored(broker, "queue:q") == [body(0), body(1)]
    woken: list[str] = []
    broker.wait_for_room("queue:q", lambda: woken.append("room"))
    BrokerSession.add_credit(c, 1)
    assert woken == []
    s.ack(c, r.entries[0].seq, cumulative=False)
    assert woken == ["room"]
    s.ack(c, r.entries[1].seq)
    assert woken == ["room"]  # a waiter is woken once
    s.send("queue:q", Message.create(body(2)))
    assert r.bodies == [body(0), body(1), body(2)]


def test_a_wait_may_name_the_destination_in_any_spelling() -> None:
    broker, s = setup(Overflow.BLOCK, "count")
    woken: list[str] = []
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", Message.create(body(0)))
    s.send("queue:q", Message.create(body(1)))
    broker.wait_for_room("/queue/q", lambda: woken.append("slash"))
    broker.wait_for_room("q", lambda: woken.append("bare"))
    s.ack(c, r.entries[0].seq)
    assert woken == ["slash", "bare"]


def test_a_cancelled_wait_is_not_woken() -> None:
    broker, s = setup(Overflow.BLOCK, "count")
    woken: list[int] = []

    def wake() -> None:
        woken.append(1)

    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", Message.create(body(0)))
    s.send("queue:q", Message.create(body(1)))
    broker.wait_for_room("/queue/q", wake)
    broker.cancel_wait("queue:q", wake)
    s.ack(c, r.entries[1].seq)
    assert woken == []


def test_block_timeout_comes_from_the_settings() -> None:
    broker = make_broker(
        {
            "queue:q": DestinationSettings(
                max_messages=1, overflow=Overflow.BLOCK, block_timeout_ms=250
            )
        }
    )
    s = BrokerConnection(broker).session()
    s.send("queue:q", Message.create())
    with pytest.raises(WouldBlock) as info:
        s.send("queue:q", Message.create())
    assert info.value.timeout_ms == 250


def test_an_oversized_message_is_refused_even_by_an_empty_queue() -> None:
    broker, s = setup(Overflow.REJECT, "bytes")
    with pytest.raises(DestinationFull):
        s.send("queue:q", Message.create(b"x" * 10 * SIZE))
    assert looking.browse(broker, "queue:q") == []


def test_a_topic_bound_applies_to_each_subscription() -> None:
    broker = make_broker({"topic:t": DestinationSettings(max_messages=1)})
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    full, free = Recorder(), Recorder()
    c_full = s.consumer(1, "topic:t", full, prefetch=1)
    c_free = s.consumer(2, "topic:t", free, prefetch=5)
    s.send("topic:t", Message.create(b"a"))
    s.ack(c_free, free.entries[0].seq)
    with pytest.raises(DestinationFull):
        s.send("topic:t", Message.create(b"b"))
    assert free.bodies == [b"a"]  # a refused publish reaches no subscription
    s.ack(c_full, full.entries[0].seq)
    s.send("topic:t", Message.create(b"b"))
    assert free.bodies == [b"a", b"b"]


def test_a_full_subscription_under_dead_letter_does_not_hold_the_others_back() -> None:
    broker = make_broker(
        {"topic:t": DestinationSettings(max_messages=1, overflow=Overflow.DEAD_LETTER)}
    )
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    slow, fast = Recorder(), Recorder()
    s.consumer(1, "topic:t", slow, prefetch=1)
    c_fast = s.consumer(2, "topic:t", fast, prefetch=5)
    for b in (b"a", b"b"):
        s.send("topic:t", Message.create(b))
        s.ack(c_fast, fast.entries[-1].seq)
    assert slow.bodies == [b"a"]
    assert fast.bodies == [b"a", b"b"]
    [dead] = looking.browse(broker, DLQ)
    assert dead.message.properties[ORIGINAL_DESTINATION] == "topic:t"


def test_the_dead_letter_address_is_configurable_per_destination() -> None:
    broker = make_broker(
        {
            "queue:orders.*": DestinationSettings(
                max_messages=1, overflow=Overflow.DEAD_LETTER, dead_letter="queue:orders.dlq"
            ),
            "queue:orders.eu.*": DestinationSettings(
                max_messages=1, overflow=Overflow.DEAD_LETTER, dead_letter="queue:orders.eu.dlq"
            ),
        }
    )
    s = BrokerConnection(broker).session()
    for address in ("queue:orders.us", "queue:orders.eu.de"):
        s.send(address, Message.create(b"1"))
        s.send(address, Message.create(b"2"))
    assert bodies(looking.browse(broker, "queue:orders.dlq")) == [b"2"]
    [eu] = looking.browse(broker, "queue:orders.eu.dlq")
    assert eu.message.properties[ORIGINAL_DESTINATION] == "queue:orders.eu.de"
    assert looking.browse(broker, DLQ) == []


def test_a_full_dead_letter_queue_discards_and_counts() -> None:
    broker = make_broker(
        {
            "queue:q": DestinationSettings(max_messages=1, overflow=Overflow.DEAD_LETTER),
            DLQ: DestinationSettings(max_messages=1),
        }
    )
    s = BrokerConnection(broker).session()
    for i in range(3):
        s.send("queue:q", Message.create(body(i)))
    assert bodies(looking.browse(broker, DLQ)) == [body(1)]
    assert looking.stats(broker)["discarded"] == 1
