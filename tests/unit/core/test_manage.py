"""Management (chute.core.operations.manage): looking at a broker and acting on it, as an operator.

Moves are checked as a user would: nothing lost or doubled (across a restart of
the journal too), waiting messages only, in sequence order, paged ones
included; and who may do what.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.core.model.address import DEAD_LETTER
from chute.core.model.consumer import AckMode, BrokerConsumer
from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.model.store import AckOp, AddOp, Store
from chute.core.operations import looking, manage, transfer
from chute.core.operations.connection import BrokerConnection, connect
from chute.core.rules.access import ADMIN_ROLE, Access, Action, Role, User
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION
from chute.errors import (
    AccessDenied,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    NotFound,
)
from chute.message import Message
from chute.store.journal import Journal
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, RecordingStore, make_broker, msg, stats_of

BODY = b"m" * 200


def fill(broker: Broker, address: str, n: int, **fields: Any) -> list[Message]:
    session = BrokerConnection(broker).session()
    sent = [Message.create(f"{address}-{i}", **fields) for i in range(n)]
    for message in sent:
        session.send(address, message)
    return sent


def waiting(broker: Broker, address: str) -> list[str]:
    """The bodies a walk over ``address`` shows, in sequence order."""
    return [e.message.body.decode() for e in looking.browse(broker, address)]


def consume(broker: Broker, address: str, prefetch: int) -> tuple[BrokerConsumer, Recorder]:
    recorder = Recorder()
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    return session.consumer(1, address, recorder, prefetch=prefetch), recorder


@pytest.fixture
def admin(broker: Broker) -> BrokerConnection:
    return BrokerConnection(broker)  # no users configured: everybody manages everything


# -- counters -------------------------------------------------------------------------


def test_deliveries_and_redeliveries_are_counted(broker: Broker, admin: BrokerConnection) -> None:
    fill(broker, "queue:q", 3)
    consumer, recorder = consume(broker, "queue:q", 10)
    assert len(recorder.take()) == 3
    consumer.queue.detach(consumer)  # back, redelivered
    consume(broker, "queue:q", 2)
    stats = stats_of(broker, "queue:q")
    assert (stats["delivered"], stats["redelivered"]) == (5, 2)
    sub = BrokerConnection(broker).session()
    sub.consumer(1, "topic:t", Recorder())
    sub.consumer(2, "topic:t", Recorder())
    fill(broker, "topic:t", 2)
    topic = manage.destination(admin, "topic:t")
    assert (topic["delivered"], topic["redelivered"]) == (4, 0)
    assert [s["delivered"] for s in topic["subscriptions"]] == [2, 2]


# -- destinations ---------------------------------------------------------------------


def test_a_destination_shows_its_counters_and_consumers(
    broker: Broker, admin: BrokerConnection
) -> None:
    fill(broker, "queue:q", 5)
    consume(broker, "queue:q", 2)
    detail = manage.destination(admin, "q")
    assert detail["address"] == "queue:q"
    assert (detail["kind"], detail["depth"], detail["ready"], detail["inflight"]) == (
        "queue",
        5,
        3,
        2,
    )
    [shown] = detail["consumers_detail"]
    assert shown["unacked"] == 2
    assert shown["prefetch"] == 2
    assert shown["ack_mode"] == "client"
    assert shown["delivered"] == 2
    assert shown["connection"] in {c["id"] for c in manage.connections(admin)}
    with pytest.raises(NotFound):
        manage.destination(admin, "queue:nothing")
    assert broker.find("queue:nothing") is None  # looking makes nothing


def test_create_makes_a_destination_once(broker: Broker, admin: BrokerConnection) -> None:
    assert manage.create(admin, "queue:made") is True
    assert manage.create(admin, "queue:made") is False
    assert manage.create(admin, "topic:made") is True
    assert broker.find("topic:made") is not None
    with pytest.raises(InvalidAddress):
        manage.create(admin, "queue:__tmp__.abc")
    with pytest.raises(InvalidAddress):
        manage.create(admin, "queue:bad name")


# -- moving ---------------------------------------------------------------------------


def test_a_move_goes_a_step_at_a_time_so_a_driver_can_serve_others_between(
    broker: Broker, admin: BrokerConnection
) -> None:
    count = transfer.STEP * 3 + 5
    fill(broker, "queue:a", count)
    manage.create(admin, "queue:b")
    steps = transfer.move_steps(admin, "queue:a", "queue:b")
    depths = []
    for _ in steps:
        depths.append(len(waiting(broker, "queue:b")))
    assert depths == [transfer.STEP * n for n in range(1, 4)] + [count]
    assert waiting(broker, "queue:a") == []


def test_move_takes_every_waiting_message_in_order_and_keeps_it_whole(
    broker: Broker, admin: BrokerConnection, clock: FakeClock
) -> None:
    sent = fill(
        broker, "queue:a", 4, priority=7, properties={"k": "v"}, expiration=clock.now + 10**6
    )
    consumer, recorder = consume(broker, "queue:a", 1)  # the first is in flight: it stays
    manage.create(admin, "queue:b")
    assert transfer.move(admin, "queue:a", "queue:b") == 3
    assert waiting(broker, "queue:a") == ["queue:a-0"]
    assert waiting(broker, "queue:b") == ["queue:a-1", "queue:a-2", "queue:a-3"]
    for entry, original in zip(looking.browse(broker, "queue:b"), sent[1:], strict=True):
        moved = entry.message
        assert (moved.id, moved.priority, moved.timestamp, moved.expiration) == (
            original.id,
            original.priority,
            original.timestamp,
            original.expiration,
        )
        assert moved.properties == {"k": "v"}
        assert (entry.delivery_count, entry.redelivered) == (0, False)
    assert stats_of(broker, "queue:a")["depth"] == 1
    consumer.queue.ack(consumer, recorder.entries[0].seq, cumulative=False)
    assert stats_of(broker, "queue:a")["depth"] == 0


def test_move_picks_by_selector_seqs_and_limit(broker: Broker, admin: BrokerConnection) -> None:
    session = BrokerConnection(broker).session()
    for i in range(10):
        session.send("queue:a", msg(f"{i}", properties={"n": i}))
    manage.create(admin, "queue:b")
    assert transfer.move(admin, "queue:a", "queue:b", selector="n >= 5", limit=2) == 2
    assert waiting(broker, "queue:b") == ["5", "6"]
    assert transfer.move(admin, "queue:a", "queue:b", seqs=[9, 1, 1, 999]) == 2
    assert waiting(broker, "queue:b") == ["5", "6", "0", "8"]  # seqs are 1-based
    assert transfer.move(admin, "queue:a", "queue:b", seqs=[3, 4, 8], selector="n > 2") == 2
    assert waiting(broker, "queue:b")[4:] == ["3", "7"]  # seq 3 is n=2: not matched
    assert waiting(broker, "queue:a") == ["1", "2", "4", "9"]


def test_move_refuses_what_makes_no_sense(broker: Broker, admin: BrokerConnection) -> None:
    fill(broker, "queue:a", 1)
    with pytest.raises(InvalidAddress):
        transfer.move(admin, "queue:a", "a")
    with pytest.raises(NotFound):
        transfer.move(admin, "queue:nowhere", "queue:a")
    assert broker.find("queue:nowhere") is None
    manage.create(admin, "topic:t")
    with pytest.raises(InvalidAddress, match="topic"):
        transfer.move(admin, "topic:t", "queue:a")
    assert waiting(broker, "queue:a") == ["queue:a-0"]


def test_a_move_makes_a_target_that_does_not_exist_yet(
    broker: Broker, admin: BrokerConnection
) -> None:
    fill(broker, "queue:a", 2)
    assert transfer.move(admin, "queue:a", "queue:made.by.move") == 2
    assert waiting(broker, "queue:made.by.move") == ["queue:a-0", "queue:a-1"]


def test_a_move_to_a_topic_publishes_to_its_subscriptions(
    broker: Broker, admin: BrokerConnection
) -> None:
    fill(broker, "queue:a", 2)
    recorder = Recorder()
    BrokerConnection(broker).session().consumer(1, "topic:t", recorder)
    assert transfer.move(admin, "queue:a", "topic:t") == 2
    assert recorder.bodies == [b"queue:a-0", b"queue:a-1"]


def test_a_move_into_a_full_target_stops_and_says_how_many_moved(clock: FakeClock) -> None:
    broker = make_broker(
        {"queue:small": DestinationSettings(max_messages=3, overflow=Overflow.REJECT)}, clock=clock
    )
    admin = BrokerConnection(broker)
    fill(broker, "queue:small", 1)
    fill(broker, "queue:a", 5)
    with pytest.raises(DestinationFull, match="2 messages had moved"):
        transfer.move(admin, "queue:a", "queue:small")
    assert waiting(broker, "queue:small") == ["queue:small-0", "queue:a-0", "queue:a-1"]
    assert waiting(broker, "queue:a") == ["queue:a-2", "queue:a-3", "queue:a-4"]
    assert not any(e.redelivered for e in looking.browse(broker, "queue:a"))


def test_each_message_moves_in_one_atomic_commit(clock: FakeClock) -> None:
    store = RecordingStore()
    broker = make_broker(store=store, clock=clock)
    admin = BrokerConnection(broker)
    fill(broker, "queue:a", 3)
    manage.create(admin, "queue:b")
    store.calls.clear()
    transfer.move(admin, "queue:a", "queue:b")
    commits = [ops for kind, ops in store.calls if kind == "commit"]
    assert store.kinds() == ["commit"] * len(commits)  # no add or ack outside a commit
    ops = [op for batch in commits for op in batch]
    assert [type(op) for op in ops] == [AddOp, AckOp] * 3
    assert all(op.queues == ("queue:b",) for op in ops if isinstance(op, AddOp))
    assert all(op.queue == "queue:a" for op in ops if isinstance(op, AckOp))


def test_a_move_survives_a_restart_without_loss_or_duplicates(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", sync="never")
    broker = Broker(journal, memory_limit=32 << 10)  # most of queue:a is paged
    broker.recover()
    admin = BrokerConnection(broker)
    session = BrokerConnection(broker).session()
    for i in range(600):
        session.send("queue:a", Message.create(BODY + str(i).encode()))
    assert broker.queues["queue:a"].paged > 400
    manage.create(admin, "queue:b")
    assert transfer.move(
        admin, "queue:a", "queue:b", selector="JMSMessageID IS NOT NULL", limit=420
    )
    before = (waiting(broker, "queue:a"), waiting(broker, "queue:b"))
    assert len(before[1]) == 420
    journal.close()
    journal = Journal(tmp_path / "journal", sync="never")
    try:
        again = Broker(journal)
        again.recover()
        assert (waiting(again, "queue:a"), waiting(again, "queue:b")) == before
    finally:
        journal.close()


@pytest.fixture(params=["memory", "journal"])
def paging_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store: Store
    if request.param == "memory":
        store = MemoryStore()
    else:
        store = Journal(tmp_path / "journal", sync="never", segment_size=256 << 10)
    yield store
    store.close()


def test_moving_finds_paged_messages(paging_store: Store) -> None:
    broker = Broker(paging_store, memory_limit=32 << 10)
    broker.recover()
    admin = BrokerConnection(broker)
    session = BrokerConnection(broker).session()
    for i in range(1200):
        session.send("queue:a", Message.create(BODY + str(i).encode(), properties={"n": i}))
    session.send("queue:a", Message.create(b"transient", persistent=False, properties={"n": -1}))
    source = broker.queues["queue:a"]
    assert source.paged > 1000
    manage.create(admin, "queue:b")
    assert transfer.move(admin, "queue:a", "queue:b", selector="n >= 1100 OR n < 0") == 101
    assert transfer.move(admin, "queue:a", "queue:b", seqs=[1000, 5]) == 2
    transfer.delete_message(admin, "queue:a", 999)
    assert source.held == 1200 - 101 - 2 - 1 + 1
    assert [e.message.properties["n"] for e in looking.browse(broker, "queue:b")] == [
        *range(1100, 1200),
        -1,
        4,
        999,
    ]
    left = [e.message.properties["n"] for e in looking.browse(broker, "queue:a")]
    assert left == [n for n in range(1100) if n not in (4, 998, 999)]
    consumer, recorder = consume(broker, "queue:a", 5000)  # a consumer drains the rest
    assert [e.message.properties["n"] for e in recorder.entries] == left
    consumer.queue.ack(consumer, recorder.entries[-1].seq, cumulative=True)
    assert source.held == 0
    assert broker.queues["queue:b"].held == 103


@pytest.mark.parametrize("selector", [None, "even = TRUE"])
def test_moving_a_paged_queue_reads_the_store_a_window_at_a_time(
    paging_store: Store, selector: str | None
) -> None:
    reads = records = 0
    page_in = paging_store.page_in

    def counted(queue: str, after: int, limit: int) -> Any:
        nonlocal reads, records
        found = page_in(queue, after, limit)
        reads += 1
        records += len(found)
        return found

    paging_store.page_in = counted  # type: ignore[method-assign]
    broker = Broker(paging_store, memory_limit=32 << 10)
    broker.recover()
    admin = BrokerConnection(broker)
    session = BrokerConnection(broker).session()
    for i in range(3000):
        session.send("queue:a", Message.create(BODY, properties={"n": i, "even": i % 2 == 0}))
    source = broker.queues["queue:a"]
    assert source.paged > 2800
    manage.create(admin, "queue:b")
    reads = records = 0
    picked = list(range(0, 3000, 2)) if selector else list(range(3000))

    assert transfer.move(admin, "queue:a", "queue:b", selector=selector) == len(picked)

    assert reads < 3000 // 4  # a read per browse step and one per move step, not per message
    assert records < 3 * 3000  # each about twice (browse, move), not once more per one moved
    if selector is None:
        assert source.pager.skip == set()  # nothing left for a read-back to step over
    moved = [e.message.properties["n"] for e in looking.browse(broker, "queue:b")]
    assert moved == picked
    left = [e.message.properties["n"] for e in looking.browse(broker, "queue:a")]
    assert left == [n for n in range(3000) if n not in picked]
    _, recorder = consume(broker, "queue:a", 5000)  # read back past what moved
    assert [e.message.properties["n"] for e in recorder.entries] == left


# -- dead letters ---------------------------------------------------------------------


def dead_letter(broker: Broker, address: str, n: int) -> None:
    """Send ``n`` messages to ``address`` and reject each: they go to the dead letters."""
    fill(broker, address, n, properties={"kept": address})
    consumer, recorder = consume(broker, address, n)
    session = BrokerConnection(broker).session()
    for entry in recorder.take():
        session.nack(consumer, entry.seq, requeue=False)
    consumer.queue.detach(consumer)


def test_retry_sends_dead_letters_back_where_they_came_from(
    broker: Broker, admin: BrokerConnection
) -> None:
    dead_letter(broker, "queue:a", 2)
    dead_letter(broker, "queue:b", 1)
    BrokerConnection(broker).session().send(DEAD_LETTER, msg(b"stray"))  # no origin recorded
    ids = [e.message.id for e in looking.browse(broker, DEAD_LETTER)]
    assert transfer.retry_dead_letters(admin) == {"queue:a": 2, "queue:b": 1, "": 1}
    assert waiting(broker, DEAD_LETTER) == ["stray"]
    back = looking.browse(broker, "queue:a") + looking.browse(broker, "queue:b")
    assert sorted(e.message.id for e in back) == sorted(ids[:3])
    for entry in back:
        assert entry.message.properties == {"kept": entry.message.properties["kept"]}
        assert ORIGINAL_DESTINATION not in entry.message.properties
        assert DIVERT_REASON not in entry.message.properties
        assert (entry.delivery_count, entry.redelivered) == (0, False)
    assert stats_of(broker, "queue:a")["depth"] == 2


def test_retry_makes_a_deleted_origin_again_and_honours_a_selector(
    broker: Broker, admin: BrokerConnection
) -> None:
    dead_letter(broker, "queue:gone", 1)
    dead_letter(broker, "queue:kept", 1)
    admin.delete("queue:gone")
    assert transfer.retry_dead_letters(admin, selector="kept = 'queue:gone'") == {"queue:gone": 1}
    assert waiting(broker, "queue:gone") == ["queue:gone-0"]
    assert len(looking.browse(broker, DEAD_LETTER)) == 1


# -- deleting one message -------------------------------------------------------------


def test_delete_message_takes_a_waiting_one_only(broker: Broker, admin: BrokerConnection) -> None:
    fill(broker, "queue:a", 3)
    consume(broker, "queue:a", 1)  # seq 1 in flight
    transfer.delete_message(admin, "queue:a", 2)
    assert waiting(broker, "queue:a") == ["queue:a-0", "queue:a-2"]
    with pytest.raises(NotFound, match="in flight"):
        transfer.delete_message(admin, "queue:a", 1)
    with pytest.raises(NotFound):
        transfer.delete_message(admin, "queue:a", 2)
    with pytest.raises(NotFound):
        transfer.delete_message(admin, "queue:none", 1)
    assert stats_of(broker, "queue:a")["depth"] == 2


# -- connections ----------------------------------------------------------------------


def test_connections_are_listed_and_closed_through_their_driver(
    broker: Broker, admin: BrokerConnection, clock: FakeClock
) -> None:
    fill(broker, "queue:a", 3)
    client = BrokerConnection(broker, client_id="app", protocol="native", peer="10.0.0.1:1")
    told: list[str] = []
    client.on_closed_by_broker = told.append
    client.session(AckMode.CLIENT).consumer(1, "queue:a", Recorder(), prefetch=2)
    [listed] = [c for c in manage.connections(admin) if c["id"] == client.id]
    assert listed == {
        "id": client.id,
        "protocol": "native",
        "user": None,
        "peer": "10.0.0.1:1",
        "client_id": "app",
        "connected_at": clock.now,
        "sessions": 1,
        "consumers": 1,
        "unacked": 2,
    }
    manage.close_connection(admin, client.id, "maintenance")
    assert told == ["maintenance"]
    assert client.closed
    assert stats_of(broker, "queue:a")["ready"] == 3  # in flight went back
    assert client.id not in {c["id"] for c in manage.connections(admin)}
    with pytest.raises(NotFound):
        manage.close_connection(admin, client.id)


def test_a_driver_may_refuse_to_be_closed(broker: Broker, admin: BrokerConnection) -> None:
    bridge = BrokerConnection(broker, protocol="dropbox")

    def refuse(reason: str) -> None:
        raise ConsumerError("a bridge is closed by its configuration")

    bridge.on_closed_by_broker = refuse
    with pytest.raises(ConsumerError):
        manage.close_connection(admin, bridge.id)
    assert not bridge.closed
    plain = BrokerConnection(broker)  # no driver: the core connection closes
    manage.close_connection(admin, plain.id)
    assert plain.closed


# -- consumers, subscriptions, cursors ------------------------------------------------


def test_consumers_subscriptions_and_cursors_are_listed(
    broker: Broker, admin: BrokerConnection
) -> None:
    fill(broker, "queue:a", 1)
    owner = BrokerConnection(broker, client_id="app")
    session = owner.session(AckMode.INDIVIDUAL)
    session.consumer(1, "queue:a", Recorder(), prefetch=5, selector="x IS NULL")
    session.consumer(2, "topic:t", Recorder(), subscription="s1", durable=True, selector="y = 1")
    owner.callback("topic:t", "cb", "queue:fwd")
    listed = manage.consumers(admin)
    by_address = {(c["address"], c["id"]) for c in listed}
    assert {("queue:a", 1), ("topic:t", 2)} <= by_address
    [on_a] = manage.consumers(admin, "queue:a")
    assert (on_a["connection"], on_a["selector"], on_a["unacked"], on_a["credit"]) == (
        owner.id,
        "x IS NULL",
        1,
        4,
    )
    on_t = manage.consumers(admin, "topic:t")
    assert {(c["subscription"], c["connection"]) for c in on_t} == {("s1", owner.id), ("cb", None)}
    subs = {s["name"]: s for s in manage.subscriptions(admin)}
    assert subs["s1"]["kind"] == "durable"
    assert (subs["s1"]["client_id"], subs["s1"]["selector"], subs["s1"]["consumers"]) == (
        "app",
        "y = 1",
        1,
    )
    assert (subs["cb"]["kind"], subs["cb"]["forward_to"]) == ("callback", "queue:fwd")
    reader = BrokerConnection(broker)
    reader.cursor_open("queue:c", "spark", lease_ms=5000)
    fill(broker, "queue:c", 2)
    [cursor] = manage.cursors(admin)
    assert (cursor["address"], cursor["name"], cursor["position"]) == ("queue:c", "spark", 1)
    assert cursor["lease"]["held"] is True
    assert cursor["lease"]["openers"] == [reader.id]
    reader.close()
    [cursor] = manage.cursors(admin)
    assert cursor["lease"]["openers"] == []


# -- who may ------------------------------------------------------------------------------

ROLES = {
    "admin": ADMIN_ROLE,
    "orders": Role(
        "orders",
        {
            Action.SEND: ("queue:orders.*",),
            Action.CONSUME: ("queue:orders.*",),
            Action.CREATE: ("queue:orders.*",),
            Action.MANAGE: ("queue:orders.*",),
        },
    ),
    "user": Role("user", {a: ("*",) for a in Action if a is not Action.MANAGE}),
    "managers": Role("managers", {Action.MANAGE: ("*",)}),
    "dlq": Role("dlq", {Action.MANAGE: ("queue:__sys__*", "queue:orders.*")}),
}
USERS = {
    "alice": User("alice", "a", ("orders",)),
    "bob": User("bob", "b", ("user",)),
    "root": User("root", "r", ("admin",)),
    "mia": User("mia", "m", ("managers",)),
    "dan": User("dan", "d", ("dlq",)),
}


@pytest.fixture
def secured(clock: FakeClock) -> Broker:
    broker = make_broker(clock=clock)
    broker.access = Access(USERS, ROLES)
    return broker


def as_user(broker: Broker, user: str) -> BrokerConnection:
    return connect(broker, user, USERS[user].password)


def test_without_manage_nothing_is_shown_or_done(secured: Broker) -> None:
    root = as_user(secured, "root")
    fill(secured, "queue:orders.a", 2)
    manage.create(root, "queue:orders.b")
    bob = as_user(secured, "bob")
    for act in (
        lambda: manage.destination(bob, "queue:orders.a"),
        lambda: manage.create(bob, "queue:x"),
        lambda: transfer.move(bob, "queue:orders.a", "queue:orders.b"),
        lambda: transfer.retry_dead_letters(bob),
        lambda: transfer.delete_message(bob, "queue:orders.a", 1),
        lambda: manage.connections(bob),
        lambda: manage.close_connection(bob, root.id),
        lambda: manage.cursors(bob),
        lambda: manage.consumers(bob, "queue:orders.a"),
    ):
        with pytest.raises(AccessDenied):
            act()
    assert manage.consumers(bob) == []
    assert manage.subscriptions(bob) == []
    assert waiting(secured, "queue:orders.a") == ["queue:orders.a-0", "queue:orders.a-1"]
    assert not root.closed


def test_manage_on_some_addresses_reaches_those_only(secured: Broker) -> None:
    root = as_user(secured, "root")
    alice = as_user(secured, "alice")
    fill(secured, "queue:orders.a", 3)
    fill(secured, "queue:other", 1)
    manage.create(alice, "queue:orders.b")
    assert transfer.move(alice, "queue:orders.a", "queue:orders.b", limit=1) == 1
    with pytest.raises(AccessDenied):
        transfer.move(alice, "queue:orders.a", "queue:other")
    with pytest.raises(AccessDenied):
        transfer.retry_dead_letters(alice)  # a wildcard never reaches the dead letters
    with pytest.raises(AccessDenied, match=r"manage = \[\"\*\"\]"):
        manage.connections(alice)
    consume(secured, "queue:other", 1)
    consume(secured, "queue:orders.a", 1)
    assert {c["address"] for c in manage.consumers(alice)} == {"queue:orders.a"}
    assert {c["address"] for c in manage.consumers(root)} == {"queue:orders.a", "queue:other"}


def test_who_manages_everything_manages_the_reserved_queues_too(secured: Broker) -> None:
    mia = as_user(secured, "mia")
    dead_letter(secured, "queue:orders.a", 1)
    assert manage.destination(mia, DEAD_LETTER)["depth"] == 1
    assert transfer.retry_dead_letters(mia) == {"queue:orders.a": 1}
    assert mia.id in {c["id"] for c in manage.connections(mia)}
    assert manage.cursors(mia) == []


def test_a_retry_stops_at_an_origin_its_user_may_not_manage(secured: Broker) -> None:
    dan = as_user(secured, "dan")
    dead_letter(secured, "queue:orders.a", 2)
    dead_letter(secured, "queue:other", 1)
    dead_letter(secured, "queue:orders.b", 1)
    with pytest.raises(AccessDenied, match="2 messages had moved before"):
        transfer.retry_dead_letters(dan)
    assert waiting(secured, "queue:orders.a") == ["queue:orders.a-0", "queue:orders.a-1"]
    assert waiting(secured, DEAD_LETTER) == ["queue:other-0", "queue:orders.b-0"]
    assert transfer.retry_dead_letters(dan, selector="kept LIKE 'queue:orders.%'") == {
        "queue:orders.b": 1
    }


def test_one_log_line_per_action(
    broker: Broker, admin: BrokerConnection, caplog: pytest.LogCaptureFixture
) -> None:
    fill(broker, "queue:a", 50)
    manage.create(admin, "queue:b")
    with caplog.at_level(logging.INFO, logger="chute.manage"):
        transfer.move(admin, "queue:a", "queue:b")
        transfer.delete_message(admin, "queue:b", 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "chute.manage"]
    assert len(lines) == 2
    assert lines[0] == "anonymous moved 50 messages from queue:a to queue:b"
    assert lines[1].startswith("anonymous deleted message 1 (")
