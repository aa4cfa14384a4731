"""Duplicate detection (chute.core.rules.dedup): a producer's resend of a request the
broker stored is dropped; the window per producer and the producers kept are bounded;
what it remembers survives a restart."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.dedup import SentIds
from chute.store.memory import MemoryStore

from .helpers import Recorder, bodies, memory, msg, restart


def producer_session(
    broker: Broker, name: str = "p1", *, transacted: bool = False
) -> BrokerSession:
    session = BrokerConnection(broker).session(transacted=transacted)
    session.name_producer(name)
    return session


def test_a_resend_of_a_stored_message_is_dropped(broker: Broker) -> None:
    s = producer_session(broker)
    first = msg(b"a", id="m-1")
    s.send("queue:q", first)
    s.send("queue:q", msg(b"a", id="m-1"))  # the resend
    s.send("queue:q", msg(b"b", id="m-2"))
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b"]


def test_the_same_id_from_another_producer_or_without_one_is_stored(broker: Broker) -> None:
    producer_session(broker, "p1").send("queue:q", msg(b"a", id="m-1"))
    producer_session(broker, "p2").send("queue:q", msg(b"b", id="m-1"))
    BrokerConnection(broker).session().send("queue:q", msg(b"c", id="m-1"))
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b", b"c"]


def test_transient_and_transacted_sends_are_not_deduplicated(broker: Broker) -> None:
    s = producer_session(broker)
    s.send("queue:q", msg(b"a", id="t", persistent=False))
    s.send("queue:q", msg(b"a", id="t", persistent=False))
    tx = producer_session(broker, "p2", transacted=True)
    tx.send("queue:q", msg(b"b", id="x"))
    tx.send("queue:q", msg(b"b", id="x"))
    tx.commit()
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"a", b"b", b"b"]


def test_a_send_many_is_known_by_its_first_id(broker: Broker) -> None:
    s = producer_session(broker)
    batch = [msg(b"a", id="b-1"), msg(b"b", id="b-2")]
    s.send_many("queue:q", batch)
    s.send_many("queue:q", [msg(b"a", id="b-1"), msg(b"b", id="b-2")])
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b"]


def test_a_consumed_message_resent_is_still_dropped(broker: Broker) -> None:
    s = producer_session(broker)
    r = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"a", id="m-1"))
    s.send("queue:q", msg(b"a", id="m-1"))
    assert r.bodies == [b"a"]


def test_the_window_keeps_the_last_ids_of_each_producer() -> None:
    store = MemoryStore()
    ids = SentIds(store, window=3, producers=10)
    for n in range(5):
        ids.stored("p", f"m-{n}")
    assert [ids.seen("p", f"m-{n}") for n in range(5)] == [False, False, True, True, True]
    assert list(store.sent_ids) == [("p", f"m-{n}") for n in range(5)]


def test_the_producer_that_stored_least_recently_is_forgotten_first() -> None:
    ids = SentIds(MemoryStore(), window=4, producers=2)
    ids.stored("a", "1")
    ids.stored("b", "1")
    ids.stored("a", "2")  # a stored after b: b is now the least recent
    ids.stored("c", "1")
    assert len(ids) == 2
    assert ids.seen("a", "1")
    assert ids.seen("c", "1")
    assert not ids.seen("b", "1")


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        SentIds(MemoryStore(), window=0)


def test_what_was_stored_is_remembered_after_a_restart(broker: Broker) -> None:
    s = producer_session(broker)
    r = Recorder()
    BrokerConnection(broker).session(AckMode.AUTO).consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"a", id="m-1"))  # consumed and acked before the restart
    s.send("queue:other", msg(b"b", id="m-2"))
    broker2 = restart(broker)
    s2 = producer_session(broker2)
    s2.send("queue:q", msg(b"a", id="m-1"))
    s2.send("queue:other", msg(b"b", id="m-2"))
    s2.send("queue:other", msg(b"c", id="m-3"))
    assert bodies(looking.browse(broker2, "queue:q")) == []
    assert bodies(looking.browse(broker2, "queue:other")) == [b"b", b"c"]


def test_a_restart_keeps_the_window_bounds(broker: Broker) -> None:
    s = producer_session(broker)
    for n in range(5):
        s.send("queue:q", msg(id=f"m-{n}"))
    fresh = Broker(memory(broker), broker.settings, clock=broker.clock, dedup_window=2)
    fresh.recover()
    assert [fresh.sent_ids.seen("p1", f"m-{n}") for n in range(5)] == [
        False,
        False,
        False,
        True,
        True,
    ]
