"""Seed 001's queue types: temporary (session) queues, login-name queues, callback queues."""

from __future__ import annotations

import pytest

from chute.core.model.address import user_queue
from chute.core.model.consumer import AckMode
from chute.core.model.settings import DestinationSettings
from chute.core.model.store import AddOp
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.access import Principal
from chute.core.rules.broker import Broker
from chute.core.rules.diversion import DIVERT_REASON, ORIGINAL_DESTINATION
from chute.errors import AccessDenied, ConsumerError, InvalidAddress, NotFound

from .helpers import (
    FakeClock,
    Recorder,
    bodies,
    make_broker,
    memory,
    msg,
    restart,
    stats_of,
    stored,
)

ALICE = user_queue("alice")

# -- temporary queues -----------------------------------------------------------------------


def test_a_temporary_queue_is_consumed_by_its_connection_only(broker: Broker) -> None:
    owner = BrokerConnection(broker)
    address = owner.temporary_queue()
    assert address.startswith("queue:__tmp__.")
    assert owner.temporary_queue() != address
    other = BrokerConnection(broker)
    with pytest.raises(AccessDenied):
        other.session().consumer(1, address, Recorder())
    other.session().send(address, msg(b"reply"))  # anyone may send (it is the usual reply-to)
    r = Recorder()
    owner.session(AckMode.AUTO).consumer(1, address, r)
    assert r.bodies == [b"reply"]


def test_a_temporary_queue_is_gone_with_its_connection(broker: Broker) -> None:
    owner = BrokerConnection(broker)
    address = owner.temporary_queue()
    s = owner.session(AckMode.CLIENT)
    s.consumer(1, address, Recorder(), prefetch=1)
    s.send(address, msg())
    s.send(address, msg())
    owner.close()
    assert address not in broker.queues
    other = BrokerConnection(broker).session()
    with pytest.raises(NotFound):
        other.send(address, msg())
    with pytest.raises(NotFound):
        other.consumer(1, address, Recorder())
    assert all(d["address"] != address for d in looking.stats(broker)["destinations"])


def test_a_temporary_queue_is_never_stored(broker: Broker) -> None:
    owner = BrokerConnection(broker)
    address = owner.temporary_queue()
    owner.session().send(address, msg())
    assert stored(broker, address) == []
    assert address not in memory(broker).definitions
    assert address not in restart(broker).queues


def test_a_temporary_queue_that_never_existed_is_not_found(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    with pytest.raises(NotFound):
        s.send("queue:__tmp__.c999.1", msg())
    with pytest.raises(NotFound):
        s.consumer(1, "queue:__tmp__.c999.1", Recorder())


# -- login-name queues ----------------------------------------------------------------------


def test_only_the_user_may_consume_from_a_login_queue(broker: Broker) -> None:
    with pytest.raises(AccessDenied):
        BrokerConnection(broker, Principal("bob")).session().consumer(1, ALICE, Recorder())
    with pytest.raises(AccessDenied):
        BrokerConnection(broker).session().consumer(1, ALICE, Recorder())
    BrokerConnection(broker, Principal("alice")).session().consumer(1, ALICE, Recorder())


def test_messages_wait_until_the_user_has_a_session(broker: Broker) -> None:
    BrokerConnection(broker, Principal("bob")).session().send(ALICE, msg(b"hi alice"))
    BrokerConnection(broker, Principal("bob")).session().send(ALICE, msg(b"again"))
    assert stats_of(broker, ALICE)["depth"] == 2
    r = Recorder()
    BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(1, ALICE, r)
    assert r.bodies == [b"hi alice", b"again"]
    assert [(e.redelivered, e.delivery_count) for e in r.entries] == [(False, 1), (False, 1)]


def test_every_live_session_of_the_user_gets_every_message(broker: Broker) -> None:
    r1, r2 = Recorder(), Recorder()
    BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(1, ALICE, r1)
    BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(1, ALICE, r2)
    producer = BrokerConnection(broker).session()
    producer.send(ALICE, msg(b"1"))
    producer.send(ALICE, msg(b"2"))
    assert r1.bodies == r2.bodies == [b"1", b"2"]
    assert all(e.delivery_count == 1 and not e.redelivered for e in r1.entries + r2.entries)


def test_a_copy_settles_once_one_was_acked_and_all_are_finished(broker: Broker) -> None:
    a1 = BrokerConnection(broker, Principal("alice"))
    a2 = BrokerConnection(broker, Principal("alice"))
    r1, r2 = Recorder(), Recorder()
    s1 = a1.session(AckMode.CLIENT)
    s2 = a2.session(AckMode.CLIENT)
    c1 = s1.consumer(1, ALICE, r1)
    s2.consumer(1, ALICE, r2)
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    s1.ack(c1, r1.entries[0].seq)
    assert stored(broker, ALICE) == [b"x"]  # the other copy is still out
    a2.close()  # its copy finishes without an ack
    assert stored(broker, ALICE) == []
    assert stats_of(broker, ALICE)["depth"] == 0
    r3 = Recorder()
    BrokerConnection(broker, Principal("alice")).session().consumer(1, ALICE, r3)
    assert r3.entries == []


def test_both_copies_acked_settles_once(broker: Broker) -> None:
    r1, r2 = Recorder(), Recorder()
    s1 = BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT)
    s2 = BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT)
    c1 = s1.consumer(1, ALICE, r1)
    c2 = s2.consumer(1, ALICE, r2)
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    s1.ack(c1, r1.entries[0].seq)
    s2.ack(c2, r2.entries[0].seq)
    st = stats_of(broker, ALICE)
    assert (st["depth"], st["acked"]) == (0, 1)
    assert stored(broker, ALICE) == []


def test_a_message_comes_back_if_every_session_closed_without_acking(broker: Broker) -> None:
    a1 = BrokerConnection(broker, Principal("alice"))
    a2 = BrokerConnection(broker, Principal("alice"))
    a1.session(AckMode.CLIENT).consumer(1, ALICE, Recorder())
    a2.session(AckMode.CLIENT).consumer(1, ALICE, Recorder())
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    a1.close()
    a2.close()
    assert stored(broker, ALICE) == [b"x"]
    assert stats_of(broker, ALICE)["depth"] == 1
    r = Recorder()
    BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(1, ALICE, r)
    [e] = r.entries
    assert e.message.body == b"x"
    assert e.redelivered
    assert e.delivery_count == 2


def test_a_returned_message_goes_to_a_session_that_is_still_live(broker: Broker) -> None:
    a1 = BrokerConnection(broker, Principal("alice"))
    a1.session(AckMode.CLIENT).consumer(1, ALICE, Recorder())
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    late = Recorder()
    a2 = BrokerConnection(broker, Principal("alice"))
    a2.session(AckMode.CLIENT).consumer(1, ALICE, late)  # logged in after the fan-out
    assert late.entries == []
    a1.close()
    assert late.bodies == [b"x"]
    assert late.entries[0].redelivered


def test_two_consumers_of_one_connection_share_its_copy(broker: Broker) -> None:
    s = BrokerConnection(broker, Principal("alice")).session(AckMode.AUTO)
    r1, r2 = Recorder(), Recorder()
    s.consumer(1, ALICE, r1)
    s.consumer(2, ALICE, r2)
    for i in range(4):
        BrokerConnection(broker).session().send(ALICE, msg(str(i)))
    assert sorted(r1.bodies + r2.bodies) == [b"0", b"1", b"2", b"3"]
    assert stats_of(broker, ALICE)["depth"] == 0


def test_a_rejected_copy_is_dead_lettered_once_and_not_sent_again(broker: Broker) -> None:
    s = BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, ALICE, r, prefetch=5)
    BrokerConnection(broker).session().send(ALICE, msg(b"no"))
    s.nack(c, r.entries[0].seq, requeue=False)
    assert len(r.entries) == 1
    [dead] = looking.browse(broker, "queue:__sys__deadLetter")
    assert dead.message.properties[ORIGINAL_DESTINATION] == ALICE
    assert dead.message.properties[DIVERT_REASON] == "rejected"
    assert stats_of(broker, ALICE)["depth"] == 0


def test_a_copy_rejected_by_one_session_and_acked_by_another_is_settled(broker: Broker) -> None:
    s1 = BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT)
    s2 = BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT)
    r1, r2 = Recorder(), Recorder()
    c1 = s1.consumer(1, ALICE, r1)
    c2 = s2.consumer(1, ALICE, r2)
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    s1.nack(c1, r1.entries[0].seq, requeue=False)
    s2.ack(c2, r2.entries[0].seq)
    assert looking.browse(broker, "queue:__sys__deadLetter") == []
    assert stats_of(broker, ALICE)["depth"] == 0
    assert stored(broker, ALICE) == []


def test_browsing_a_login_queue_shows_messages_out_with_sessions(broker: Broker) -> None:
    BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(
        1, ALICE, Recorder(), prefetch=1
    )
    producer = BrokerConnection(broker).session()
    producer.send(ALICE, msg(b"low", priority=1))
    producer.send(ALICE, msg(b"high", priority=8))
    assert bodies(looking.browse(broker, ALICE)) == [b"low", b"high"]  # in sequence order


def test_an_expired_login_message_is_moved_once() -> None:
    clock = FakeClock()
    broker = make_broker(clock=clock)
    for _ in range(2):
        BrokerConnection(broker, Principal("alice")).session(AckMode.CLIENT).consumer(
            1, ALICE, Recorder(), prefetch=1
        )
    producer = BrokerConnection(broker).session()
    producer.send(ALICE, msg(b"first"))
    producer.send(ALICE, msg(b"brief"), ttl=10)
    clock.advance(10)
    assert broker.expire_due() == 1
    assert bodies(looking.browse(broker, "queue:__sys__expired")) == [b"brief"]


def test_login_queue_messages_survive_a_restart(broker: Broker) -> None:
    a = BrokerConnection(broker, Principal("alice"))
    a.session(AckMode.CLIENT).consumer(1, ALICE, Recorder())
    BrokerConnection(broker).session().send(ALICE, msg(b"delivered"))
    BrokerConnection(broker).session().send(ALICE, msg(b"transient", persistent=False))
    broker2 = restart(broker)
    r = Recorder()
    BrokerConnection(broker2, Principal("alice")).session(AckMode.CLIENT).consumer(1, ALICE, r)
    assert r.bodies == [b"delivered"]
    assert r.entries[0].redelivered


def test_a_login_queue_uses_its_destination_settings() -> None:
    broker = make_broker({"queue:__user__.*": DestinationSettings(max_deliveries=1)})
    alice = BrokerConnection(broker, Principal("alice"))
    s = alice.session(AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, ALICE, r)
    BrokerConnection(broker).session().send(ALICE, msg(b"x"))
    s.close_consumer(c)  # its copy goes back to the connection's pipe
    alice.close()  # and the connection's end makes it a failed delivery
    assert bodies(looking.browse(broker, "queue:__sys__deadLetter")) == [b"x"]


# -- callback queues ------------------------------------------------------------------------


def test_a_callback_forwards_every_message_to_its_destination(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.callback("topic:prices", "toaster", "queue:toaster.in")
    s.send("topic:prices", msg(b"1"))
    s.send("topic:prices", msg(b"2"))
    assert bodies(looking.browse(broker, "queue:toaster.in")) == [b"1", b"2"]
    st = stats_of(broker, "topic:prices")
    assert st["depth"] == 0
    assert st["subscriptions"][0]["kind"] == "callback"


def test_a_callback_with_a_selector_forwards_only_matches(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.callback("topic:prices", "eu", "queue:eu", selector="region = 'eu'")
    for region in ("us", "eu", "asia", "eu"):
        s.send("topic:prices", msg(region, properties={"region": region}))
    assert bodies(looking.browse(broker, "queue:eu")) == [b"eu", b"eu"]


def test_a_callback_survives_a_restart(broker: Broker) -> None:
    conn = BrokerConnection(broker)
    s = conn.session()
    s.callback("topic:prices", "toaster", "queue:toaster.in")
    s.send("topic:prices", msg(b"before"))
    conn.close()
    broker2 = restart(broker)
    BrokerConnection(broker2).session().send("topic:prices", msg(b"after"))
    assert bodies(looking.browse(broker2, "queue:toaster.in")) == [b"before", b"after"]
    assert [e.seq for e in looking.browse(broker2, "queue:toaster.in")] == [1, 2]


def test_a_callback_can_forward_to_a_topic(broker: Broker) -> None:
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r = Recorder()
    s.consumer(1, "topic:b", r)
    s.callback("topic:a", "bridge", "topic:b")
    s.send("topic:a", msg(b"hop"))
    assert r.bodies == [b"hop"]


def test_callback_errors(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    with pytest.raises(InvalidAddress):
        s.callback("topic:t", "loop", "topic:t")
    with pytest.raises(InvalidAddress):
        s.callback("queue:q", "x", "queue:out")
    with pytest.raises(InvalidAddress):
        s.callback("topic:t", "x", "a/b")


def test_a_callback_that_cannot_forward_dead_letters() -> None:
    broker = make_broker({"queue:out": DestinationSettings(max_messages=1)})
    s = BrokerConnection(broker).session()
    s.callback("topic:t", "cb", "queue:out")
    s.send("topic:t", msg(b"1"))
    s.send("topic:t", msg(b"2"))
    assert bodies(looking.browse(broker, "queue:out")) == [b"1"]
    [dead] = looking.browse(broker, "queue:__sys__deadLetter")
    assert dead.message.body == b"2"
    assert dead.message.properties[DIVERT_REASON] == "forward-failed"


def test_forwarding_loops_end_in_the_dead_letter_queue(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.callback("topic:a", "ab", "topic:b")
    s.callback("topic:b", "ba", "topic:a")
    s.send("topic:a", msg(b"round and round"))
    [dead] = looking.browse(broker, "queue:__sys__deadLetter")
    assert dead.message.properties[DIVERT_REASON] == "forward-failed"
    assert looking.stats(broker)["discarded"] == 0


def test_a_callback_can_be_replaced_and_unsubscribed(broker: Broker) -> None:
    s = BrokerConnection(broker).session()
    s.callback("topic:t", "cb", "queue:one")
    s.callback("topic:t", "cb", "queue:two")
    s.send("topic:t", msg(b"x"))
    assert looking.browse(broker, "queue:one") == []
    assert bodies(looking.browse(broker, "queue:two")) == [b"x"]
    s.unsubscribe("cb")
    s.send("topic:t", msg(b"y"))
    assert bodies(looking.browse(broker, "queue:two")) == [b"x"]
    assert stats_of(broker, "topic:t")["subscriptions"] == []
    with pytest.raises(NotFound):
        s.unsubscribe("cb")


def test_a_callback_does_not_take_a_durable_subscriptions_name(broker: Broker) -> None:
    s = BrokerConnection(broker, client_id="app").session()
    s.callback("topic:t", "same", "queue:out")
    c = s.consumer(1, "topic:t", Recorder(), subscription="same", durable=True)
    with pytest.raises(ConsumerError):
        s.unsubscribe("same")
    s.close_consumer(c)
    s.unsubscribe("same")  # the durable subscription first
    s.send("topic:t", msg())
    assert len(looking.browse(broker, "queue:out")) == 1


def test_recovery_forwards_pending_callback_messages_without_reusing_sequences() -> None:
    """A crash between a callback's add and its forward leaves work for recovery."""
    broker = make_broker()
    s = BrokerConnection(broker).session()
    s.send("queue:out", msg(b"already there"))
    s.callback("topic:t", "cb", "queue:out")
    store = broker.store
    pending = msg(b"pending")
    store.add(AddOp("topic:t", ("callback:cb",), 7, pending))
    broker2 = restart(broker)
    out = looking.browse(broker2, "queue:out")
    assert bodies(out) == [b"already there", b"pending"]
    assert [e.seq for e in out] == [1, 2]
    assert stored(broker2, "queue:out") == [b"already there", b"pending"]
    assert stored(broker2, "callback:cb") == []
