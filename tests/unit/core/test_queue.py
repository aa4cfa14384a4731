"""Queues: order, competing consumers, credit, exclusivity, ack modes, selectors, stats, browse."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.errors import ConsumerError, InvalidAddress, InvalidSelector, NotFound

from .helpers import Recorder, bodies, msg, stats_of, stored


def session(broker: Broker, mode: AckMode = AckMode.CLIENT) -> BrokerSession:
    return BrokerConnection(broker).session(mode)


# -- order ----------------------------------------------------------------------------


def test_higher_priority_first_and_fifo_inside_a_priority(broker: Broker) -> None:
    s = session(broker)
    sent = [(b"a4", 4), (b"b9", 9), (b"c0", 0), (b"d9", 9), (b"e4", 4), (b"f7", 7), (b"g0", 0)]
    for body, priority in sent:
        s.send("queue:q", msg(body, priority=priority))
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=100)
    assert r.bodies == [b"b9", b"d9", b"f7", b"a4", b"e4", b"c0", b"g0"]


def test_fifo_holds_for_many_messages_of_one_priority(broker: Broker) -> None:
    s = session(broker)
    for i in range(200):
        s.send("queue:q", msg(str(i)))
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=1000)
    assert r.bodies == [str(i).encode() for i in range(200)]
    assert [e.seq for e in r.entries] == list(range(1, 201))


def test_a_waiting_high_priority_message_overtakes_while_credit_is_short(broker: Broker) -> None:
    s = session(broker)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"first"))  # pushed at once
    s.send("queue:q", msg(b"low", priority=1))
    s.send("queue:q", msg(b"high", priority=9))
    BrokerSession.add_credit(c, 2)
    assert r.bodies == [b"first", b"high", b"low"]


# -- competing consumers and credit -------------------------------------------------------


def test_competing_consumers_get_distinct_messages_round_robin(broker: Broker) -> None:
    s = session(broker)
    r1, r2, r3 = Recorder(), Recorder(), Recorder()
    s.consumer(1, "queue:q", r1, prefetch=100)
    s.consumer(2, "queue:q", r2, prefetch=100)
    s.consumer(3, "queue:q", r3, prefetch=100)
    for i in range(9):
        s.send("queue:q", msg(str(i)))
    assert r1.bodies == [b"0", b"3", b"6"]
    assert r2.bodies == [b"1", b"4", b"7"]
    assert r3.bodies == [b"2", b"5", b"8"]


def test_round_robin_also_spreads_a_backlog(broker: Broker) -> None:
    s = session(broker)
    for i in range(6):
        s.send("queue:q", msg(str(i)))
    r1, r2 = Recorder(), Recorder()
    c1 = s.consumer(1, "queue:q", r1, prefetch=1)
    c2 = s.consumer(2, "queue:q", r2, prefetch=1)
    assert r1.bodies == [b"0"]
    assert r2.bodies == [b"1"]
    BrokerSession.add_credit(c1, 1)
    BrokerSession.add_credit(c2, 1)
    all_bodies = r1.bodies + r2.bodies
    assert sorted(all_bodies) == [b"0", b"1", b"2", b"3"]
    assert len(set(all_bodies)) == 4


def test_a_consumer_without_credit_is_skipped(broker: Broker) -> None:
    s = session(broker)
    r1, r2 = Recorder(), Recorder()
    s.consumer(1, "queue:q", r1, prefetch=1)
    s.consumer(2, "queue:q", r2, prefetch=10)
    for i in range(5):
        s.send("queue:q", msg(str(i)))
    assert r1.bodies == [b"0"]
    assert r2.bodies == [b"1", b"2", b"3", b"4"]


def test_credit_stops_pushing_at_zero_and_add_credit_resumes(broker: Broker) -> None:
    s = session(broker)
    for i in range(5):
        s.send("queue:q", msg(str(i)))
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=2)
    assert r.bodies == [b"0", b"1"]
    assert c.credit == 0
    s.send("queue:q", msg(b"5"))
    assert len(r.entries) == 2
    BrokerSession.add_credit(c, 0)
    BrokerSession.add_credit(c, -3)
    assert len(r.entries) == 2
    BrokerSession.add_credit(c, 1)
    assert r.bodies[-1] == b"2"
    BrokerSession.add_credit(c, 10)
    assert r.bodies == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert c.credit == 7
    assert stats_of(broker, "queue:q")["inflight"] == 6


def test_credit_granted_to_a_closed_consumer_delivers_nothing(broker: Broker) -> None:
    s = session(broker)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=1)
    s.close_consumer(c)
    s.send("queue:q", msg())
    BrokerSession.add_credit(c, 5)
    assert r.entries == []
    assert stats_of(broker, "queue:q")["depth"] == 1


# -- exclusive consumers --------------------------------------------------------------------


def test_an_exclusive_consumer_gets_everything_and_a_standby_takes_over(broker: Broker) -> None:
    s = session(broker)
    main, standby = Recorder(), Recorder()
    c1 = s.consumer(1, "queue:q", main, prefetch=3, exclusive=True)
    s.consumer(2, "queue:q", standby, prefetch=100)
    for i in range(5):
        s.send("queue:q", msg(str(i)))
    assert main.bodies == [b"0", b"1", b"2"]
    assert standby.entries == []  # even though the exclusive consumer has no credit left
    s.ack(c1, main.entries[0].seq)
    s.close_consumer(c1)
    assert standby.bodies == [b"1", b"2", b"3", b"4"]
    assert [e.redelivered for e in standby.entries] == [True, True, False, False]


def test_the_first_exclusive_consumer_wins_over_a_later_one(broker: Broker) -> None:
    s = session(broker)
    r1, r2 = Recorder(), Recorder()
    s.consumer(1, "queue:q", r1, exclusive=False)
    c2 = s.consumer(2, "queue:q", r2, exclusive=True)
    s.consumer(3, "queue:q", Recorder(), exclusive=True)
    s.send("queue:q", msg())
    s.send("queue:q", msg())
    assert len(r2.entries) == 2
    assert r1.entries == []
    s.close_consumer(c2)
    s.send("queue:q", msg())
    assert r1.entries == []  # the next exclusive consumer is now active


# -- ack modes ------------------------------------------------------------------------------


def test_client_ack_is_cumulative_in_delivery_order(broker: Broker) -> None:
    s = session(broker, AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    for i in range(4):
        s.send("queue:q", msg(str(i)))
    e = r.entries
    assert s.ack(c, e[2].seq) == 3
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["inflight"], st["acked"]) == (1, 1, 3)
    with pytest.raises(ConsumerError):
        s.ack(c, e[0].seq)  # already covered
    assert s.ack(c, e[3].seq) == 1
    assert stats_of(broker, "queue:q")["depth"] == 0
    assert stored(broker, "queue:q") == []


def test_client_ack_follows_delivery_order_not_sequence_order(broker: Broker) -> None:
    s = session(broker, AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=2)
    s.send("queue:q", msg(b"a"))
    s.send("queue:q", msg(b"b"))
    a, b = r.take()
    s.nack(c, a.seq)  # goes back, and comes back after b in this consumer's delivery order
    BrokerSession.add_credit(c, 1)
    [again] = r.take()
    assert again.message.body == b"a"
    assert s.ack(c, b.seq) == 1
    assert list(c.inflight) == [a.seq]


def test_individual_ack_settles_exactly_one(broker: Broker) -> None:
    s = session(broker, AckMode.INDIVIDUAL)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    for i in range(3):
        s.send("queue:q", msg(str(i)))
    e = r.entries
    assert s.ack(c, e[1].seq) == 1
    assert stored(broker, "queue:q") == [b"0", b"2"]
    assert list(c.inflight) == [e[0].seq, e[2].seq]
    with pytest.raises(ConsumerError):
        s.ack(c, e[1].seq)


def test_client_session_may_ack_one_message_individually(broker: Broker) -> None:
    s = session(broker, AckMode.CLIENT)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    for i in range(3):
        s.send("queue:q", msg(str(i)))
    assert s.ack(c, r.entries[1].seq, cumulative=False) == 1
    assert stored(broker, "queue:q") == [b"0", b"2"]


def test_auto_ack_settles_on_push(broker: Broker) -> None:
    s = session(broker, AckMode.AUTO)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=10)
    for i in range(3):
        s.send("queue:q", msg(str(i)))
    assert r.bodies == [b"0", b"1", b"2"]
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["inflight"], st["acked"]) == (0, 0, 3)
    assert stored(broker, "queue:q") == []
    assert c.inflight == {}
    with pytest.raises(ConsumerError):
        s.ack(c, r.entries[0].seq)
    s.close_consumer(c)
    assert stats_of(broker, "queue:q")["depth"] == 0  # nothing comes back


def test_a_consumer_may_override_the_session_ack_mode(broker: Broker) -> None:
    s = session(broker, AckMode.AUTO)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, ack_mode=AckMode.INDIVIDUAL)
    s.send("queue:q", msg())
    assert stats_of(broker, "queue:q")["inflight"] == 1
    s.ack(c, r.entries[0].seq)
    assert stats_of(broker, "queue:q")["depth"] == 0


def test_acking_an_unknown_sequence_is_a_consumer_error(broker: Broker) -> None:
    s = session(broker)
    c = s.consumer(1, "queue:q", Recorder())
    with pytest.raises(ConsumerError, match="not awaiting an ack"):
        s.ack(c, 99)
    with pytest.raises(ConsumerError):
        s.nack(c, 99)


def test_a_message_acked_by_another_consumer_cannot_be_acked_here(broker: Broker) -> None:
    s = session(broker)
    r1, r2 = Recorder(), Recorder()
    c1 = s.consumer(1, "queue:q", r1)
    c2 = s.consumer(2, "queue:q", r2)
    s.send("queue:q", msg())
    with pytest.raises(ConsumerError):
        s.ack(c2, r1.entries[0].seq)
    s.ack(c1, r1.entries[0].seq)


def test_a_receiver_may_ack_while_it_is_being_pushed_to(broker: Broker) -> None:
    s = session(broker, AckMode.INDIVIDUAL)

    class EagerAcker:
        def __init__(self) -> None:
            self.seen: list[bytes] = []

        def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
            self.seen.append(entry.message.body)
            s.ack(consumer, entry.seq)
            BrokerSession.add_credit(consumer, 1)

    for i in range(3):
        s.send("queue:q", msg(str(i)))
    r = EagerAcker()
    s.consumer(1, "queue:q", r, prefetch=1)
    s.send("queue:q", msg(b"3"))
    assert r.seen == [b"0", b"1", b"2", b"3"]
    assert stats_of(broker, "queue:q")["depth"] == 0


# -- consumer options -----------------------------------------------------------------------


def test_consumer_argument_errors(broker: Broker) -> None:
    s = session(broker)
    s.consumer(1, "queue:q", Recorder())
    with pytest.raises(ConsumerError):
        s.consumer(1, "queue:q", Recorder())
    with pytest.raises(ConsumerError):
        s.consumer(2, "queue:q", Recorder(), prefetch=0)
    with pytest.raises(ConsumerError):
        s.consumer(3, "queue:q", Recorder(), subscription="s")
    with pytest.raises(ConsumerError):
        s.consumer(4, "queue:q", Recorder(), durable=True)
    assert stats_of(broker, "queue:q")["consumers"] == 1


# -- selectors ------------------------------------------------------------------------------


def test_a_queue_selector_leaves_other_messages_for_other_consumers(broker: Broker) -> None:
    s = session(broker)
    red = Recorder()
    s.consumer(1, "queue:q", red, selector="color = 'red'")
    for i, color in enumerate(["blue", "red", "blue", "red", "green"]):
        s.send("queue:q", msg(f"{i}{color}", properties={"color": color}))
    assert red.bodies == [b"1red", b"3red"]
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["ready"]) == (5, 3)
    rest = Recorder()
    s.consumer(2, "queue:q", rest)
    assert rest.bodies == [b"0blue", b"2blue", b"4green"]


def test_selectors_see_headers_and_keep_priority_order(broker: Broker) -> None:
    s = session(broker)
    for i, priority in enumerate([1, 8, 3, 9]):
        s.send("queue:q", msg(str(i), priority=priority, properties={"n": i}))
    r = Recorder()
    s.consumer(1, "queue:q", r, selector="JMSPriority > 2 AND n >= 1")
    assert r.bodies == [b"3", b"1", b"2"]


def test_selective_and_plain_consumers_compete(broker: Broker) -> None:
    s = session(broker)
    sel, plain = Recorder(), Recorder()
    s.consumer(1, "queue:q", sel, selector="n > 1")
    s.consumer(2, "queue:q", plain)
    for n in range(6):
        s.send("queue:q", msg(str(n), properties={"n": n}))
    assert not set(sel.bodies) & set(plain.bodies)
    assert sorted(sel.bodies + plain.bodies) == [str(n).encode() for n in range(6)]
    assert all(int(e.message.properties["n"]) > 1 for e in sel.entries)


def test_a_bad_selector_is_refused_and_attaches_nothing(broker: Broker) -> None:
    s = session(broker)
    with pytest.raises(InvalidSelector):
        s.consumer(1, "queue:q", Recorder(), selector="color = ")
    with pytest.raises(InvalidSelector):
        s.consumer(1, "topic:t", Recorder(), selector="AND AND")
    assert s.consumers == {}
    c = s.consumer(1, "queue:q", Recorder())
    assert c.id == 1


# -- stats ----------------------------------------------------------------------------------


def test_stats_count_depth_inflight_consumers_and_flows(broker: Broker) -> None:
    s = session(broker)
    r = Recorder()
    c = s.consumer(1, "queue:q", r, prefetch=2)
    s.consumer(2, "queue:q", Recorder(), prefetch=1, selector="never = 1")
    for i in range(5):
        s.send("queue:q", msg(str(i)))
    st = stats_of(broker, "queue:q")
    assert st["kind"] == "queue"
    assert (st["depth"], st["ready"], st["inflight"]) == (5, 3, 2)
    assert (st["consumers"], st["enqueued"], st["acked"]) == (2, 5, 0)
    assert st["bytes"] == sum(e.message.size for e in looking.browse(broker, "queue:q"))
    s.ack(c, r.entries[1].seq)
    st = stats_of(broker, "queue:q")
    assert (st["depth"], st["inflight"], st["acked"], st["dead_lettered"]) == (3, 0, 2, 0)
    assert looking.stats(broker)["connections"] == 1


def test_stats_count_expired_and_dead_lettered(broker: Broker) -> None:
    s = session(broker)
    r = Recorder()
    c = s.consumer(1, "queue:q", r)
    s.send("queue:q", msg(b"bad"))
    s.nack(c, r.entries[0].seq, requeue=False)
    st = stats_of(broker, "queue:q")
    assert (st["dead_lettered"], st["depth"]) == (1, 0)
    assert stats_of(broker, "queue:__sys__deadLetter")["depth"] == 1


# -- browsing -------------------------------------------------------------------------------


def test_browse_is_a_snapshot_in_sequence_order_that_consumes_nothing(broker: Broker) -> None:
    s = session(broker)
    for body, priority in [(b"a", 4), (b"b", 9), (b"c", 4), (b"d", 0)]:
        s.send("queue:q", msg(body, priority=priority, properties={"p": priority}))
    before = stats_of(broker, "queue:q")
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b", b"c", b"d"]  # priorities: no
    assert bodies(looking.browse(broker, "queue:q", limit=2)) == [b"a", b"b"]
    assert bodies(looking.browse(broker, "queue:q", selector="p = 4")) == [b"a", b"c"]
    assert bodies(looking.browse(broker, "queue:q", selector="p < 5", limit=1)) == [b"a"]
    assert stats_of(broker, "queue:q") == before
    r = Recorder()
    s.consumer(1, "queue:q", r)
    assert r.bodies == [b"b", b"a", b"c", b"d"]
    assert all(not e.redelivered and e.delivery_count == 1 for e in r.entries)


def test_browse_includes_unacked_messages_in_their_place(broker: Broker) -> None:
    s = session(broker)
    r = Recorder()
    s.consumer(1, "queue:q", r, prefetch=1)
    for body in (b"a", b"b", b"c"):
        s.send("queue:q", msg(body))
    assert r.bodies == [b"a"]
    assert bodies(looking.browse(broker, "queue:q")) == [b"a", b"b", b"c"]


def test_browse_errors(broker: Broker) -> None:
    broker.destination("topic:t")
    with pytest.raises(InvalidAddress):
        looking.browse(broker, "topic:t")
    broker.destination("queue:q")
    with pytest.raises(InvalidSelector):
        looking.browse(broker, "queue:q", selector="((")
    broker.destination("queue:empty")
    assert looking.browse(broker, "queue:empty") == []


def test_looking_creates_nothing(broker: Broker) -> None:
    assert looking.browse(broker, "queue:never-made") == []  # holds nothing, and stays unmade
    with pytest.raises(InvalidAddress, match="is a topic"):
        looking.browse(broker, "topic:never-made")
    for address in ("queue:never-made", "topic:never-made"):
        with pytest.raises(NotFound, match=f"destination {address} does not exist"):
            broker.cursors.info(address)
    assert broker.find("queue:never-made") is None
    assert broker.find("topic:never-made") is None
