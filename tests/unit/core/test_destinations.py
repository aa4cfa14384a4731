"""Destinations' lives (chute.core.rules.destinations): delete, purge, limits on making, idle ones.

Deleting and purging go through a core connection (BrokerConnection) as every protocol does; the
limits are the broker's ``Limits``; idle removal runs in the broker's sweep
(``expire_due``) on a FakeClock.
"""

from __future__ import annotations

import pytest

from chute.core.model.address import DEAD_LETTER, EXPIRED, user_queue
from chute.core.model.consumer import AckMode, BrokerConsumer
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection, connect
from chute.core.rules.access import ADMIN_ROLE, Access, Action, Role, User
from chute.core.rules.broker import Broker
from chute.core.rules.destinations import RECLAIM_RETRY_MS, Limits
from chute.errors import (
    AccessDenied,
    ChuteError,
    ConsumerError,
    DestinationDeleted,
    DestinationFull,
    InvalidAddress,
    NotFound,
    TransactionError,
)
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, bodies, memory, msg, stored

EVERYTHING: dict[Action, tuple[str, ...]] = {a: ("*",) for a in Action if a is not Action.MANAGE}
NO_DELETE: dict[Action, tuple[str, ...]] = {
    a: ("*",) for a in Action if a not in (Action.MANAGE, Action.DELETE)
}
ROLES = {
    "admin": ADMIN_ROLE,
    "user": Role("user", EVERYTHING),
    "no-delete": Role("no-delete", NO_DELETE),
}
USERS = {
    "alice": User("alice", "pw", ("user",)),
    "bob": User("bob", "pw", ("user",)),
    "carol": User("carol", "pw", ("no-delete",)),
    "root": User("root", "pw", ("admin",)),
}


class Told(Recorder):
    """A client's receiver: records deliveries, and the error it was closed with."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[ChuteError] = []

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        self.errors.append(error)


def make(
    limits: Limits | None = None,
    *,
    users: bool = False,
    store: MemoryStore | None = None,
    clock: FakeClock | None = None,
    settings: dict[str, DestinationSettings] | None = None,
    predefined: tuple[str, ...] = (),
) -> Broker:
    """A broker with ``limits`` (and USERS if ``users``), recovered from ``store``."""
    broker = Broker(
        store if store is not None else MemoryStore(),
        SettingsResolver(settings or {}),
        clock=clock or FakeClock(),
        predefined=predefined,
        access=Access(USERS, ROLES) if users else None,
        limits=limits,
    )
    broker.recover()
    return broker


def restarted(broker: Broker) -> Broker:
    """The same broker after a restart on its store, with the same settings and limits."""
    fresh = Broker(
        memory(broker),
        broker.settings,
        clock=broker.clock,
        access=broker.access,
        limits=broker.destinations.limits,
    )
    fresh.recover()
    return fresh


def login(broker: Broker, user: str) -> BrokerConnection:
    return connect(broker, user, "pw", peer="127.0.0.1:1")


# -- deleting ---------------------------------------------------------------------------------


def test_deleting_a_queue_discards_its_messages_and_tells_its_consumers(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    producer = conn.session()
    for body in (b"a", b"b", b"c"):
        producer.send("queue:q", msg(body))
    told = Told()
    conn.session(AckMode.CLIENT).consumer(1, "queue:q", told, prefetch=1)
    assert told.bodies == [b"a"]  # one in flight, two waiting
    assert conn.delete("queue:q") == 3
    [error] = told.errors
    assert isinstance(error, DestinationDeleted)
    assert error.reason == "queue:q was deleted by anonymous: this consumer is closed"
    assert "queue:q" not in broker.queues
    assert "queue:q" not in memory(broker).definitions
    assert stored(broker, "queue:q") == []
    assert broker.memory.used == 0
    assert "queue:q" not in restarted(broker).queues


def test_a_deleted_queue_is_made_anew_by_its_next_use(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    conn.session().send("queue:q", msg(b"old"))
    conn.delete("queue:q")
    conn.session().send("queue:q", msg(b"new"))
    assert bodies(looking.browse(broker, "queue:q")) == [b"new"]
    assert bodies(looking.browse(restarted(broker), "queue:q")) == [b"new"]


def test_an_ack_a_transaction_held_never_settles_the_next_queue_of_that_name(
    broker: Broker,
) -> None:
    conn = BrokerConnection(broker)
    conn.session().send("queue:q", msg(b"old"))
    tx = conn.session(AckMode.CLIENT, transacted=True)
    taker = Told()
    consumer = tx.consumer(1, "queue:q", taker)
    [entry] = taker.take()
    tx.ack(consumer, entry.seq)  # out of flight, settled at commit
    conn.delete("queue:q")
    conn.session().send("queue:q", msg(b"new"))
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"new"]
    assert stored(broker, "queue:q") == [b"new"]


def test_what_the_broker_needs_is_not_deleted(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="c")
    temporary = conn.temporary_queue()
    conn.session().send(user_queue("alice"), msg())
    for address, why in (
        (DEAD_LETTER, "purged, not deleted"),
        (EXPIRED, "purged, not deleted"),
        (temporary, "goes with its connection"),
        (user_queue("alice"), "login-name queue"),
    ):
        with pytest.raises(InvalidAddress, match=why):
            conn.delete(address)
        assert broker.find(address) is not None
    with pytest.raises(NotFound, match="does not exist"):
        conn.delete("queue:never-made")


def test_a_destination_in_the_configuration_is_purged_not_deleted() -> None:
    broker = make(predefined=("orders",))
    conn = BrokerConnection(broker)
    conn.session().send("queue:orders", msg())
    with pytest.raises(InvalidAddress, match=r"declared in the configuration"):
        conn.delete("orders")
    assert conn.purge("orders") == 1


def test_a_topic_with_durable_subscriptions_goes_only_when_forced(broker: Broker) -> None:
    conn = BrokerConnection(broker, client_id="c")
    s = conn.session(AckMode.CLIENT)
    live, durable = Told(), Told()
    s.consumer(1, "topic:t", live)
    s.consumer(2, "topic:t", durable, subscription="keep", durable=True)
    s.send("topic:t", msg(b"x"))
    with pytest.raises(ConsumerError, match=r"1 durable subscriptions \(durable:c.keep\)"):
        conn.delete("topic:t")
    assert live.errors == []
    assert "topic:t" in broker.topics
    assert conn.delete("topic:t", force=True) == 2  # one copy in each subscription
    assert [type(e) for e in live.errors + durable.errors] == [DestinationDeleted] * 2
    assert "topic:t" not in broker.topics
    assert len(broker.subscriptions) == 0
    assert broker.memory.used == 0
    assert restarted(broker).subscriptions == {}


def test_another_users_durable_subscription_needs_manage_to_be_forced_away() -> None:
    broker = make(users=True)
    bob = connect(broker, "bob", "pw", client_id="bob-1")
    bob.session().consumer(1, "topic:t", Told(), subscription="mine", durable=True)
    alice = login(broker, "alice")
    with pytest.raises(AccessDenied, match="belongs to another user"):
        alice.delete("topic:t", force=True)
    assert len(broker.subscriptions) == 1
    assert login(broker, "root").delete("topic:t", force=True) == 0


def test_deleting_and_purging_need_the_delete_permission() -> None:
    broker = make(users=True)
    carol = login(broker, "carol")
    carol.session().send("queue:carol", msg())
    with pytest.raises(AccessDenied, match="may not delete queue:carol"):
        carol.delete("queue:carol")
    with pytest.raises(AccessDenied, match="may not delete queue:carol"):
        carol.purge("queue:carol")
    assert bodies(looking.browse(broker, "queue:carol")) == [b"x"]
    assert login(broker, "alice").delete("queue:carol") == 1


def test_a_queue_prepared_transactions_hold_is_not_deleted(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    tx = conn.session(transacted=True)
    tx.send("queue:q", msg())
    tx.prepare("x1")
    with pytest.raises(TransactionError, match="prepared transactions hold 1 messages"):
        conn.delete("queue:q")
    conn.rollback_prepared("x1")
    assert conn.delete("queue:q") == 0


def test_a_queue_a_part_of_the_broker_consumes_is_not_deleted(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    conn.session().consumer(1, "queue:q", Recorder())  # a receiver that cannot be told
    with pytest.raises(ConsumerError, match="consumed by a part of the broker"):
        conn.delete("queue:q")
    assert "queue:q" in broker.queues


def test_a_deleted_queues_cursor_is_gone(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    conn.session().send("queue:q", msg())
    conn.cursor_open("queue:q", "spark")
    assert conn.delete("queue:q") == 1
    with pytest.raises(NotFound, match="cursor 'spark' on queue:q is not open"):
        conn.cursor_fetch("queue:q", "spark", 0, 10)


# -- purging ------------------------------------------------------------------------------------


def test_purge_removes_what_waits_and_leaves_what_is_in_flight(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    for body in (b"a", b"b", b"c", b"d"):
        conn.session().send("queue:q", msg(body))
    taker = Recorder()
    s = conn.session(AckMode.INDIVIDUAL)
    consumer = s.consumer(1, "queue:q", taker, prefetch=2)
    assert conn.purge("queue:q") == 2
    assert stored(broker, "queue:q") == [b"a", b"b"]
    first, _in_flight = taker.take()
    s.ack(consumer, first.seq)
    s.close_consumer(consumer)  # b goes back: it was never acked
    assert bodies(looking.browse(broker, "queue:q")) == [b"b"]
    assert bodies(looking.browse(restarted(broker), "queue:q")) == [b"b"]


def test_the_dead_letters_can_be_purged_and_a_topic_cannot(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    conn.session().send(DEAD_LETTER, msg())
    assert conn.purge(DEAD_LETTER) == 1
    conn.session().send("topic:t", msg())
    with pytest.raises(InvalidAddress, match="is a topic"):
        conn.purge("topic:t")
    with pytest.raises(NotFound):
        conn.purge("queue:never-made")


# -- limits on making --------------------------------------------------------------------------


def test_a_user_past_their_limit_is_refused_and_another_is_not() -> None:
    broker = make(Limits(max_per_user=3), users=True)
    alice = login(broker, "alice")
    s = alice.session()
    s.send("queue:a1", msg())
    s.consumer(1, "queue:a2", Told())
    s.consumer(2, "topic:a3", Told())
    with pytest.raises(DestinationFull, match=r"user alice has made 3 destinations.*raised"):
        s.send("queue:a4", msg())
    with pytest.raises(DestinationFull, match="max_destinations_per_user"):
        s.consumer(3, "queue:a4", Told())
    assert broker.find("queue:a4") is None
    s.send("queue:a1", msg())  # what exists is still hers to use
    login(broker, "bob").session().send("queue:b1", msg())
    login(broker, "root").session().send("queue:r1", msg())  # one who manages everything
    assert alice.stats()["made"]["by_user"] == {"alice": 3}
    assert looking.stats(broker)["made"]["by_user"] == {"alice": 3, "bob": 1, "root": 1}
    alice.delete("queue:a1")
    s.send("queue:a4", msg())  # the slot is free again


def test_the_counts_of_queues_survive_a_restart_and_topics_count_while_they_exist() -> None:
    broker = make(Limits(max_per_user=2), users=True)
    alice = login(broker, "alice")
    alice.session().send("queue:a1", msg())
    alice.session().send("topic:a2", msg())
    again = restarted(broker)
    assert looking.stats(again)["made"]["by_user"] == {"alice": 1}  # the topic is not back
    s = login(again, "alice").session()
    s.send("queue:a3", msg())
    with pytest.raises(DestinationFull):
        s.send("queue:a4", msg())


def test_max_destinations_counts_every_maker_together_anonymous_ones_too() -> None:
    broker = make(Limits(max_total=2), predefined=("declared",))
    conn = BrokerConnection(broker)
    s = conn.session()
    assert looking.stats(broker)["made"]["total"] == 0  # declared and reserved ones do not count
    assert conn.browse("queue:looked-at") == []  # looking makes nothing
    s.send("queue:one", msg())
    s.consumer(1, "topic:two", Told())  # in use: not reclaimed to make room
    with pytest.raises(DestinationFull, match=r"made 2 destinations.*max_destinations allows"):
        s.send("queue:three", msg())
    with pytest.raises(DestinationFull):
        BrokerConnection(broker).session(transacted=True).send("queue:three", msg())
    s.send("queue:declared", msg())
    stats = looking.stats(broker)
    assert stats["made"] == {
        "total": 2,
        "max_destinations": 2,
        "max_destinations_per_user": 0,
        "by_user": {"anonymous": 2},
    }
    assert stats["destination_count"] == 5  # + the declared one and the two reserved ones


def test_at_the_limit_unused_made_destinations_are_reclaimed_oldest_first() -> None:
    broker = make(Limits(max_total=32))
    flood = BrokerConnection(broker).session()
    for i in range(32):  # a flood of names, each made by a consumer that went
        flood.close_consumer(flood.consumer(i, f"queue:flood.{i:02}", Told()))
    busy = BrokerConnection(broker).session()
    busy.send("queue:flood.00", msg(b"kept"))  # the oldest, but it holds a message
    busy.send("queue:other", msg(b"made"))  # room made: two (32 // 16) went
    assert broker.find("queue:flood.00") is not None
    assert broker.find("queue:flood.01") is None
    assert broker.find("queue:flood.02") is None
    assert broker.find("queue:flood.03") is not None
    assert bodies(looking.browse(broker, "queue:other")) == [b"made"]
    assert looking.stats(broker)["made"]["total"] == 31


def test_a_restored_flood_is_reclaimed_too_but_messages_bind(clock: FakeClock) -> None:
    broker = make(Limits(max_total=4), clock=clock)
    s = BrokerConnection(broker).session()
    for i in range(4):
        s.send(f"queue:full.{i}", msg())
    with pytest.raises(DestinationFull, match="each holds messages or has consumers"):
        s.send("queue:more", msg())
    again = restarted(broker)
    conn = BrokerConnection(again)
    t = conn.session()
    with pytest.raises(DestinationFull):  # still full of messages: the limit binds
        t.send("queue:more", msg())
    conn.purge("queue:full.0")
    with pytest.raises(DestinationFull):  # a futile reclaim is not tried again at once
        t.send("queue:more", msg())
    clock.advance(RECLAIM_RETRY_MS)
    t.send("queue:more", msg())  # the emptied one is reclaimed for it
    assert again.find("queue:full.0") is None
    assert looking.stats(again)["made"]["total"] == 4


def test_a_user_at_their_limit_reclaims_only_their_own() -> None:
    broker = make(Limits(max_per_user=2), users=True)
    bob = login(broker, "bob").session()
    bob.close_consumer(bob.consumer(1, "queue:b.idle", Told()))
    alice = login(broker, "alice").session()
    alice.send("queue:a.full", msg())
    alice.close_consumer(alice.consumer(1, "queue:a.idle", Told()))
    alice.send("queue:a.new", msg())
    assert broker.find("queue:a.idle") is None
    assert broker.find("queue:b.idle") is not None
    with pytest.raises(DestinationFull, match="user alice has made 2"):
        alice.send("queue:a.more", msg())


# -- idle destinations --------------------------------------------------------------------------


def test_a_made_destination_left_unused_goes_after_auto_delete_after_ms(
    clock: FakeClock,
) -> None:
    broker = make(Limits(max_total=10, idle_after_ms=1000), clock=clock)
    conn = BrokerConnection(broker)
    conn.session().send("queue:q", msg())
    conn.session().send("topic:t", msg())
    s = conn.session(AckMode.AUTO)
    s.close_consumer(s.consumer(1, "queue:q", Recorder()))  # consumed: empty now
    broker.expire_due()
    clock.advance(999)
    broker.expire_due()
    assert {"queue:q", "topic:t"} <= set(broker.queues) | set(broker.topics)
    clock.advance(1)
    broker.expire_due()
    assert broker.find("queue:q") is None
    assert broker.find("topic:t") is None
    assert "queue:q" not in memory(broker).definitions
    assert looking.stats(broker)["made"]["total"] == 0
    conn.session().send("queue:q", msg(b"again"))  # made anew by its next use
    assert bodies(looking.browse(broker, "queue:q")) == [b"again"]


def test_use_holds_an_idle_destination_back(clock: FakeClock) -> None:
    broker = make(Limits(idle_after_ms=1000), clock=clock)
    conn = BrokerConnection(broker)
    conn.session().send("topic:t", msg())
    for step in range(3):  # a publish every 600 ms: never idle for 1000 ms
        broker.expire_due()
        clock.advance(600)
        conn.session().send("topic:t", msg())
        assert broker.find("topic:t") is not None, step
    consumer = conn.session().consumer(1, "queue:busy", Recorder())
    holding = conn.session()
    holding.send("queue:full", msg())
    for _ in range(3):
        broker.expire_due()
        clock.advance(1000)
    assert broker.find("queue:busy") is not None  # a consumer keeps it
    assert broker.find("queue:full") is not None  # a message keeps it
    assert broker.find("topic:t") is None
    assert consumer.queue.address == "queue:busy"


def test_what_was_not_made_by_use_never_goes_idle(clock: FakeClock) -> None:
    broker = make(
        Limits(idle_after_ms=1000),
        clock=clock,
        predefined=("declared",),
        settings={"queue:keep.*": DestinationSettings(auto_delete_after_ms=0)},
    )
    conn = BrokerConnection(broker, client_id="c")
    temporary = conn.temporary_queue()
    conn.session().consumer(1, "topic:durable", Recorder(), subscription="s", durable=True)
    s = conn.session()
    s.close_consumer(s.consumer(2, "queue:keep.this", Recorder()))  # made, then left empty
    for _ in range(3):
        broker.expire_due()
        clock.advance(5000)
    for address in ("queue:declared", DEAD_LETTER, EXPIRED, temporary, "queue:keep.this"):
        assert broker.find(address) is not None, address
    assert broker.find("topic:durable") is not None  # its durable subscription keeps it


def test_a_destination_setting_can_turn_idle_removal_on(clock: FakeClock) -> None:
    broker = make(
        clock=clock, settings={"queue:scratch.*": DestinationSettings(auto_delete_after_ms=50)}
    )
    s = BrokerConnection(broker).session()
    s.close_consumer(s.consumer(1, "queue:scratch.1", Told()))  # made by a consumer
    s.close_consumer(s.consumer(2, "queue:other", Told()))
    for _ in range(2):
        broker.expire_due()
        clock.advance(50)
    broker.expire_due()
    assert broker.find("queue:scratch.1") is None
    assert broker.find("queue:other") is not None  # the server's default: never


def test_idle_removal_logs_one_line_per_sweep(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make(Limits(idle_after_ms=10), clock=clock)
    s = BrokerConnection(broker).session()
    for i in range(7):
        s.send(f"topic:t{i}", msg())
    broker.expire_due()
    clock.advance(10)
    with caplog.at_level("INFO", logger="chute.broker"):
        broker.expire_due()
    [line] = [r.getMessage() for r in caplog.records if "idle" in r.getMessage()]
    assert line.startswith("removed 7 idle destinations")
    assert line.endswith(", ...")
