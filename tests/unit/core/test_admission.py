"""Admission: past the memory high watermark or with the journal's writer behind, the
heavy producers wait while consumers drain and light ones go on; past the hard margin,
or under the disk's free-space limit, every producer waits; held producers go on only
under the low watermark (or the writer's resume line), not one message under the line
that held them; a slow non-durable subscriber loses its oldest messages to the
dead-letter queue instead of growing the broker."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from chute.core.model.consumer import AckMode
from chute.core.model.paging import LOW_RATIO, MemoryBudget, held_cost
from chute.core.model.settings import DestinationSettings, Overflow, SettingsResolver
from chute.core.operations import looking
from chute.core.operations.browse import browse_page
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.admission import (
    BEHIND,
    BEHIND_ALL,
    BEHIND_RESUME,
    HARD_MARGIN,
    STORE_CHECK_EVERY,
)
from chute.core.rules.broker import Broker
from chute.core.rules.routing import WouldBlock
from chute.errors import TransactionError
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, msg, stats_of

BODY = b"x" * 1000
COST = held_cost(msg(BODY))
DLQ = "queue:__sys__deadLetter"


class ShortStore(MemoryStore):
    """A store whose disk is short when a test says so."""

    short: str | None = None
    behind = 0

    def space_low(self) -> str | None:
        return self.short

    def backlog(self) -> int:
        return self.behind


def broker_with(high: int = 0, subscription_bytes: int = 0, low: int = 0) -> Broker:
    return Broker(
        ShortStore(),
        SettingsResolver({}),
        clock=FakeClock(),
        memory_high_watermark=high,
        memory_low_watermark=low,
        block_timeout_ms=5_000,
        max_subscription_bytes=subscription_bytes,
    )


def send_until_refused(session: BrokerSession, address: str) -> tuple[int, WouldBlock]:
    for sent in range(100_000):
        try:
            session.send(address, msg(BODY))
        except WouldBlock as refused:
            return sent, refused
    raise AssertionError("the producer never waited")


def fill_until_refused(broker: Broker, address: str = "queue:q") -> tuple[int, WouldBlock]:
    return send_until_refused(BrokerConnection(broker).session(AckMode.CLIENT), address)


def test_a_message_costs_what_it_holds_not_a_fixed_64_bytes() -> None:
    small, large = held_cost(msg(b"x" * 16)), held_cost(msg(b"x" * 1024))
    assert small > 500  # measured ~650 bytes for a 16-byte body (bench/message_cost.py)
    assert large - small == 2 * (1024 - 16)  # the body, and its wire encoding kept beside it


def test_producers_wait_at_the_high_watermark_with_a_reason_and_no_address() -> None:
    broker = broker_with(high=100 * COST)
    sent, refused = fill_until_refused(broker)
    assert sent == 100
    assert refused.address is None
    assert refused.timeout_ms == 5_000
    assert "memory_high_watermark" in refused.reason
    assert looking.stats(broker)["producers"]["blocked_by"] == refused.reason
    assert stats_of(broker, "queue:q")["depth"] == 100  # nothing half-accepted


def sessions(broker: Broker, count: int) -> list[BrokerSession]:
    return [BrokerConnection(broker).session(AckMode.CLIENT) for _ in range(count)]


def test_under_pressure_the_heavy_producer_waits_and_a_light_one_goes_on() -> None:
    broker = broker_with(high=400 * COST)
    flood, bystander = sessions(broker, 2)
    for _ in range(300):
        flood.send("queue:flood", msg(BODY))
    bystander.send("queue:mine", msg(BODY))
    broker.admission.check()  # a tick: what each sent lately, against the mean
    _, refused = send_until_refused(flood, "queue:flood")
    assert "heaviest producers wait" in refused.reason
    assert refused.address is None
    for _ in range(20):
        bystander.send("queue:mine", msg(BODY))  # light: it goes on
    assert stats_of(broker, "queue:mine")["depth"] == 21


def test_producers_that_send_alike_all_wait() -> None:
    broker = broker_with(high=200 * COST)
    a, b = sessions(broker, 2)
    for _ in range(90):
        a.send("queue:a", msg(BODY))
        b.send("queue:b", msg(BODY))
    broker.admission.check()
    for _ in range(10):
        a.send("queue:a", msg(BODY))
        b.send("queue:b", msg(BODY))
    for s in (a, b):
        with pytest.raises(WouldBlock):
            s.send("queue:a", msg(BODY))


def test_past_the_hard_margin_every_producer_waits_however_little_it_sent() -> None:
    high = 400 * COST
    broker = broker_with(high=high)
    flood, bystander = sessions(broker, 2)
    for _ in range(300):
        flood.send("queue:flood", msg(BODY))
    bystander.send("queue:mine", msg(BODY))
    broker.admission.check()
    assert "heaviest" in send_until_refused(flood, "queue:flood")[1].reason
    light, refused = send_until_refused(bystander, "queue:mine")
    assert "every producer waits" in refused.reason
    assert broker.memory.used == high + high // HARD_MARGIN  # the bound, to the message
    assert light == high // HARD_MARGIN // COST


def test_a_writer_far_behind_holds_the_heavy_producers_then_everyone() -> None:
    broker = broker_with()
    store = broker.store
    assert isinstance(store, ShortStore)
    flood, bystander = sessions(broker, 2)
    for _ in range(300):
        flood.send("queue:flood", msg(BODY))
    bystander.send("queue:mine", msg(BODY))
    store.behind = BEHIND + 1
    broker.admission.check()
    with pytest.raises(WouldBlock, match="heaviest producers wait while it writes"):
        flood.send("queue:flood", msg(BODY))
    bystander.send("queue:mine", msg(BODY))
    store.behind = BEHIND_ALL + 1
    broker.admission.check()
    with pytest.raises(WouldBlock, match="every producer waits while it writes"):
        bystander.send("queue:mine", msg(BODY))
    store.behind = 0
    broker.admission.check()
    assert broker.admission.reason is None
    flood.send("queue:flood", msg(BODY))


def test_a_waiting_flood_stays_heavy_until_admission_opens() -> None:
    broker = broker_with(high=400 * COST)
    flood, bystander = sessions(broker, 2)
    for _ in range(300):
        flood.send("queue:flood", msg(BODY))
    broker.admission.check()
    send_until_refused(flood, "queue:flood")
    for _ in range(30):  # ticks: the bystander's share grows, the waiting flood's stays
        bystander.send("queue:mine", msg(BODY))
        broker.admission.check()
        with pytest.raises(WouldBlock):
            flood.send("queue:flood", msg(BODY))
    broker.destinations.purge("queue:flood")  # room again: admission opens for everyone
    broker.admission.check()
    assert broker.admission.reason is None
    flood.send("queue:flood", msg(BODY))


def consume(broker: Broker, prefetch: int = 100) -> tuple[Recorder, Callable[[int], None]]:
    """A consumer of ``queue:q`` that acks each message by itself: what it was given, and
    its ack (by sequence number)."""
    session = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    got = Recorder()
    consumer = session.consumer(1, "queue:q", got, prefetch=prefetch)

    def ack(seq: int) -> None:
        session.ack(consumer, seq)

    return got, ack


def test_consumers_drain_while_producers_wait_and_admission_reopens_below_the_ratio() -> None:
    broker = broker_with(high=100 * COST)
    fill_until_refused(broker)
    woken: list[str] = []
    broker.wait_for_room(None, lambda: woken.append("go"))
    r, ack = consume(broker)
    entries = r.take()
    assert len(entries) == 100  # delivering is not producing: it goes on
    for entry in entries[:5]:
        ack(entry.seq)
    broker.admission.check()
    assert broker.admission.reason is not None  # 95 % held: still over the resume line
    assert woken == []
    drained = int(100 * (1 - LOW_RATIO)) + 1
    for entry in entries[5 : 5 + drained]:
        ack(entry.seq)
    broker.admission.check()
    assert broker.admission.reason is None
    assert woken == ["go"]
    BrokerConnection(broker).session(AckMode.CLIENT).send("queue:q", msg(BODY))


def test_held_producers_go_on_only_under_the_low_watermark_not_one_message_under_the_high(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = broker_with(high=100 * COST, low=50 * COST)
    producer = BrokerConnection(broker).session(AckMode.CLIENT)
    with caplog.at_level(logging.INFO, logger="chute.broker"):
        sent, refused = send_until_refused(producer, "queue:q")
        assert sent == 100
        assert "until consumers drain them under memory_low_watermark" in refused.reason
        woken: list[str] = []
        broker.wait_for_room(None, lambda: woken.append("go"))
        r, ack = consume(broker)
        entries = r.take()
        ack(entries[0].seq)  # one message under the high watermark
        broker.admission.check()
        assert broker.admission.reason is not None
        assert "not yet under memory_low_watermark" in broker.admission.reason
        with pytest.raises(WouldBlock):  # and the producer is not let in either
            producer.send("queue:q", msg(BODY))
        for entry in entries[1:50]:  # down to the low watermark: not under it yet
            ack(entry.seq)
            broker.admission.check()
            assert woken == []
        assert broker.memory.used == 50 * COST
        assert broker.admission.reason is not None
        ack(entries[50].seq)  # under it: producers go on
        broker.admission.check()
        assert broker.admission.reason is None
        assert woken == ["go"]
        again, _ = send_until_refused(producer, "queue:q")  # room for what got it under low
        assert again == 51
    waits = [r for r in caplog.records if "producers wait" in r.getMessage()]
    resumes = [r for r in caplog.records if "producers resume" in r.getMessage()]
    assert len(waits) == 2  # the first fill, the second: once each, not per message
    assert len(resumes) == 1
    assert "watermarks: high 0.3 MiB, low 0.1 MiB" in resumes[0].getMessage()


def test_a_producer_and_a_consumer_taking_turns_at_the_line_do_not_flap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the default low watermark (90% of the high): a consumer acks one, a tick, the
    producer tries one, over and over. The producer stays held; it is not let go and held
    again per message."""
    broker = broker_with(high=100 * COST)
    assert broker.memory.low == int(100 * COST * LOW_RATIO)
    producer = BrokerConnection(broker).session(AckMode.CLIENT)
    r, ack = consume(broker, prefetch=1000)
    with caplog.at_level(logging.INFO, logger="chute.broker"):
        send_until_refused(producer, "queue:q")
        entries = r.take()
        admitted = 0
        for entry in entries[:9]:  # 91 held: over the low watermark all along
            ack(entry.seq)
            broker.admission.check()
            try:
                producer.send("queue:q", msg(BODY))
                admitted += 1
            except WouldBlock:
                pass
        assert admitted == 0
        for entry in entries[9:]:
            ack(entry.seq)
        broker.admission.check()
        producer.send("queue:q", msg(BODY))
    messages = [record.getMessage() for record in caplog.records]
    assert len([m for m in messages if "producers wait" in m]) == 1
    assert len([m for m in messages if "producers resume" in m]) == 1


def test_a_writer_behind_holds_producers_until_it_is_well_under_the_line() -> None:
    broker = broker_with()
    store = broker.store
    assert isinstance(store, ShortStore)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(BODY))
    store.behind = BEHIND + 1
    broker.admission.check()
    assert broker.admission.reason is not None
    store.behind = BEHIND  # back at the line that held them: not yet
    broker.admission.check()
    assert broker.admission.reason is not None
    store.behind = BEHIND_RESUME + 1
    broker.admission.check()
    assert broker.admission.reason is not None
    store.behind = BEHIND_RESUME
    broker.admission.check()
    assert broker.admission.reason is None
    s.send("queue:q", msg(BODY))


def test_the_low_watermark_is_under_the_high_one_and_by_default_ninety_percent_of_it() -> None:
    assert MemoryBudget(0, 1000).low == 900
    assert MemoryBudget(0, 1000, 500).low == 500
    assert MemoryBudget(0, 0).low == 0
    assert MemoryBudget(0, 1).low == 1  # never 0: that line could never be got under
    with pytest.raises(ValueError, match="under the high watermark"):
        MemoryBudget(0, 1000, 1000)
    with pytest.raises(ValueError, match="under the high watermark"):
        MemoryBudget(0, 0, 10)
    with pytest.raises(ValueError, match="positive"):
        MemoryBudget(0, 1000, -1)


def test_a_transaction_over_a_given_low_watermark_could_never_be_admitted() -> None:
    broker = broker_with(high=50 * COST, low=20 * COST)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send_many("queue:q", [msg(BODY) for _ in range(50)])
    with pytest.raises(TransactionError) as refused:
        tx.send("queue:q", msg(BODY))
    assert "only once its queues hold under" in refused.value.reason
    assert "memory_low_watermark" in refused.value.reason


def test_a_low_disk_stops_producers_but_not_acks() -> None:
    broker = broker_with()
    s = BrokerConnection(broker).session(AckMode.INDIVIDUAL)
    s.send("queue:q", msg(BODY))
    store = broker.store
    assert isinstance(store, ShortStore)
    store.short = "the disk has 1 MiB free, under disk_free_limit (64 MiB)"
    broker.admission.check()
    with pytest.raises(WouldBlock, match="disk_free_limit") as refused:
        s.send("queue:q", msg(BODY))
    assert refused.value.address is None
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.ack(c, r.take()[0].seq)
    assert stats_of(broker, "queue:q")["depth"] == 0
    store.short = None
    broker.admission.check()
    s.send("queue:q", msg(BODY))


def test_the_store_is_asked_every_few_sends_not_only_by_the_timer() -> None:
    broker = broker_with()
    store = broker.store
    assert isinstance(store, ShortStore)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(BODY))
    store.short = "the journal's writer is 17 MiB behind the broker"
    for _ in range(STORE_CHECK_EVERY - 2):
        s.send("queue:q", msg(BODY))  # the store is not asked on every send
    with pytest.raises(WouldBlock, match="behind"):
        s.send("queue:q", msg(BODY))


def test_a_bulk_send_counts_each_of_its_messages_towards_asking_the_store() -> None:
    broker = broker_with()
    store = broker.store
    assert isinstance(store, ShortStore)
    s = BrokerConnection(broker).session(AckMode.CLIENT)
    s.send("queue:q", msg(BODY))
    store.short = "the disk has 90 MiB free, under disk_free_limit"
    s.send_many("queue:q", [msg(BODY) for _ in range(STORE_CHECK_EVERY - 2)])
    with pytest.raises(WouldBlock, match="disk_free_limit"):
        s.send_many("queue:q", [msg(BODY), msg(BODY)])
    assert stats_of(broker, "queue:q")["depth"] == STORE_CHECK_EVERY - 1


def test_a_transaction_counts_what_it_holds_until_it_ends() -> None:
    broker = broker_with(high=50 * COST)
    other = BrokerConnection(broker).session(AckMode.CLIENT)
    for _ in range(25):
        other.send("queue:other", msg(BODY))
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    for _ in range(25):
        tx.send("queue:q", msg(BODY))
    with pytest.raises(WouldBlock):  # an open transaction cannot grow the broker unbounded
        tx.send("queue:q", msg(BODY))
    assert broker.memory.used == 50 * COST
    tx.rollback()
    assert broker.memory.used == 25 * COST
    broker.admission.check()
    for _ in range(10):
        tx.send("queue:q", msg(BODY))
    tx.commit()
    assert broker.memory.used == 35 * COST  # held by the queue now, counted once


@pytest.mark.parametrize("bulk", [False, True])
def test_a_transaction_that_could_never_be_admitted_is_refused_at_once(bulk: bool) -> None:
    # Its own messages hold the broker over the line admission reopens at, and they
    # count until its commit: waiting block_timeout_ms could only end in a refusal.
    broker = broker_with(high=50 * COST)
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    tx.send_many("queue:q", [msg(BODY) for _ in range(50)])
    more = msg(BODY)
    with pytest.raises(TransactionError) as refused:
        tx.send_many("queue:q", [more, more]) if bulk else tx.send("queue:q", more)
    assert "can never be admitted" in refused.value.reason
    assert "commit in smaller transactions" in refused.value.reason
    with pytest.raises(TransactionError) as failed:
        tx.commit()
    assert "rolled back" in failed.value.reason
    assert "smaller transactions" in failed.value.reason
    assert broker.memory.used == 0
    assert stats_of(broker, "queue:q")["depth"] == 0
    broker.admission.check()
    tx.send("queue:q", msg(BODY))  # the session goes on with a smaller one
    tx.commit()
    assert stats_of(broker, "queue:q")["depth"] == 1


def test_a_transaction_waits_while_others_hold_the_memory() -> None:
    broker = broker_with(high=50 * COST)
    other = BrokerConnection(broker).session(AckMode.CLIENT)
    for _ in range(30):
        other.send("queue:other", msg(BODY))
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    sent, refused = send_until_refused(tx, "queue:q")  # consumers of the others may drain
    assert sent == 20
    assert refused.address is None


def test_giving_up_says_what_to_do() -> None:
    broker = broker_with(high=COST)
    _, refused = fill_until_refused(broker)
    final = refused.gave_up()
    assert "not accepted" in final.reason
    assert "5000 ms" in final.reason


def test_a_slow_non_durable_subscriber_loses_its_oldest_messages_to_the_dead_letter_queue(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bound = 20 * msg(BODY).size
    broker = broker_with(subscription_bytes=bound)
    subscriber = BrokerConnection(broker).session(AckMode.CLIENT)
    subscriber.consumer(1, "topic:t", Recorder(), prefetch=1)  # takes one, then stalls
    producer = BrokerConnection(broker).session(AckMode.CLIENT)
    with caplog.at_level(logging.WARNING, logger="chute.broker"):
        for i in range(500):
            producer.send("topic:t", msg(f"{i:04d}".encode() + BODY[4:]))
    sub = next(iter(broker.topics["topic:t"].subscriptions.values()))
    assert sub.held_bytes <= bound
    assert sub.settings.overflow is Overflow.DROP_OLDEST
    newest = [e.message.body[:4] for e in browse_page(sub, max_messages=1000).entries]
    assert newest[-1] == b"0499"  # the newest are kept; the oldest went
    dead = stats_of(broker, DLQ)["depth"]
    assert dead == 500 - sub.held
    assert stats_of(broker, "topic:t")["dead_lettered"] == dead
    moved = [r for r in caplog.records if "moved to" in r.getMessage()]
    assert len(moved) == 1  # logged once, counted in the stats


def test_the_diversion_log_summarises_once_a_minute() -> None:
    bound = 5 * msg(BODY).size
    broker = broker_with(subscription_bytes=bound)
    assert isinstance(broker.clock, FakeClock)
    BrokerConnection(broker).session(AckMode.CLIENT).consumer(1, "topic:t", Recorder(), prefetch=1)
    producer = BrokerConnection(broker).session(AckMode.CLIENT)
    for _ in range(50):
        producer.send("topic:t", msg(BODY))
    broker.clock.advance(61_000)
    logger = logging.getLogger("chute.broker")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    try:
        producer.send("topic:t", msg(BODY))
    finally:
        logger.removeHandler(handler)
    summary = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(summary) == 1
    assert "and 44 more" in summary[0]


def test_a_topic_with_its_own_bound_and_durable_subscriptions_keep_their_settings() -> None:
    own = DestinationSettings(max_messages=3, overflow=Overflow.REJECT)
    broker = Broker(
        MemoryStore(),
        SettingsResolver({"topic:bounded": own}),
        clock=FakeClock(),
        max_subscription_bytes=1000,
    )
    s = BrokerConnection(broker, client_id="c").session(AckMode.CLIENT)
    s.consumer(1, "topic:bounded", Recorder(), prefetch=1)
    s.consumer(2, "topic:free", Recorder(), prefetch=1, subscription="d", durable=True)
    bounded = next(iter(broker.topics["topic:bounded"].subscriptions.values()))
    durable = next(iter(broker.topics["topic:free"].subscriptions.values()))
    assert bounded.settings == own
    assert not durable.settings.bounded  # a durable subscription pages instead
