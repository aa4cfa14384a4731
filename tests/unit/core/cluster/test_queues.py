"""Distributed queues across in-memory nodes: where a message goes, exactly once."""

from __future__ import annotations

from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.operations import looking

from ..helpers import stats_of
from .mesh import Mesh

Q = "queue:work"


def depth(mesh: Mesh, node: str, address: str = Q) -> int:
    queue = mesh[node].broker.queues.get(address)
    return queue.held if queue is not None else 0


def test_a_local_consumer_that_can_take_it_comes_first() -> None:
    mesh = Mesh("a", "b")
    ca, ra = mesh["a"].consume(Q)
    mesh["b"].consume(Q)
    mesh.pump()
    for i in range(5):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    assert mesh["a"].ack_all(ca, ra) == ["0", "1", "2", "3", "4"]
    assert mesh.count("handover") == 0


def test_a_message_goes_to_a_node_with_a_consumer_and_leaves_the_sender() -> None:
    mesh = Mesh("a", "b")
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    for i in range(10):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    assert mesh["b"].ack_all(cb, rb) == [str(i) for i in range(10)]
    assert depth(mesh, "a") == depth(mesh, "b") == 0
    assert not mesh["a"].memory.messages.get(Q)
    assert not mesh["b"].memory.messages.get(Q)
    # the ledgers are empty once the keys were released
    assert not any(mesh["a"].memory.messages.get("cluster.out:b", {}).values())
    assert not any(mesh["b"].memory.messages.get("cluster.in:a", {}).values())


def test_never_to_a_node_without_a_consumer() -> None:
    mesh = Mesh("a", "b", "c")
    for i in range(3):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    assert mesh.count("handover") == 0
    assert depth(mesh, "a") == 3


def test_round_robin_over_the_nodes_with_consumers() -> None:
    mesh = Mesh("a", "b", "c")
    cb, rb = mesh["b"].consume(Q)
    cc, rc = mesh["c"].consume(Q)
    mesh.pump()
    for i in range(10):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    got_b, got_c = mesh["b"].ack_all(cb, rb), mesh["c"].ack_all(cc, rc)
    assert got_b == ["0", "2", "4", "6", "8"]
    assert got_c == ["1", "3", "5", "7", "9"]


def test_a_busy_local_consumer_keeps_its_backlog() -> None:
    mesh = Mesh("a", "b")
    ca, ra = mesh["a"].consume(Q, prefetch=2)
    _cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    for i in range(5):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    assert mesh["a"].ack_all(ca, ra) == ["0", "1"]
    assert rb.take() == []
    assert mesh.count("handover") == 0
    mesh["a"].credit(ca, 3)
    assert mesh["a"].ack_all(ca, ra) == ["2", "3", "4"]


def test_what_no_local_selector_takes_goes_to_a_node_that_takes_it() -> None:
    mesh = Mesh("a", "b")
    ca, ra = mesh["a"].consume(Q, prefetch=1, selector="color = 'red'")
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    for color in ("red", "blue", "red", "green"):
        mesh["a"].send(Q, color, properties={"color": color})
    mesh.pump()
    assert mesh["a"].ack_all(ca, ra) == ["red"]  # the second red waits for a's credit
    assert mesh["b"].ack_all(cb, rb) == ["blue", "green"]
    mesh["a"].credit(ca, 1)
    assert mesh["a"].ack_all(ca, ra) == ["red"]


def test_messages_waiting_move_to_a_node_whose_consumer_arrives() -> None:
    mesh = Mesh("a", "b")
    for i in range(4):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    assert mesh["b"].ack_all(cb, rb) == ["0", "1", "2", "3"]
    assert depth(mesh, "a") == 0


def test_redistribution_when_the_local_consumers_leave() -> None:
    mesh = Mesh("a", "b")
    ca, ra = mesh["a"].consume(Q, prefetch=3)
    _cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    for i in range(3):
        mesh["a"].send(Q, str(i))
    mesh.pump()
    assert [e.message.body for e in ra.entries] == [b"0", b"1", b"2"]
    assert rb.take() == []
    mesh["a"].session.ack(ca, ra.take()[0].seq, cumulative=False)  # "0" consumed on a
    mesh["a"].session.close_consumer(ca)  # "1" and "2" were delivered, not acked
    mesh.pump()
    mesh["a"].send(Q, "3")
    mesh.pump()
    got = rb.take()
    assert [e.message.body for e in got] == [b"1", b"2", b"3"]
    assert [(e.redelivered, e.delivery_count) for e in got] == [(True, 2), (True, 2), (False, 1)]
    assert depth(mesh, "a") == 0


def test_selectors_choose_the_node() -> None:
    mesh = Mesh("a", "b", "c")
    cb, rb = mesh["b"].consume(Q, selector="color = 'red'")
    cc, rc = mesh["c"].consume(Q, selector="color = 'blue'")
    mesh.pump()
    for color in ("red", "blue", "green", "red"):
        mesh["a"].send(Q, color, properties={"color": color})
    mesh.pump()
    assert mesh["b"].ack_all(cb, rb) == ["red", "red"]
    assert mesh["c"].ack_all(cc, rc) == ["blue"]
    assert [e.message.body for e in looking.browse(mesh["a"].broker, Q)] == [b"green"]


def test_a_node_with_several_selectors_takes_what_any_of_them_takes() -> None:
    mesh = Mesh("a", "b")
    cr, rr = mesh["b"].consume(Q, selector="color = 'red'")
    cbl, rbl = mesh["b"].consume(Q, selector="color = 'blue'")
    mesh.pump()
    for color in ("red", "blue", "green"):
        mesh["a"].send(Q, color, properties={"color": color})
    mesh.pump()
    assert mesh["b"].ack_all(cr, rr) == ["red"]
    assert mesh["b"].ack_all(cbl, rbl) == ["blue"]
    assert depth(mesh, "a") == 1
    # one consumer leaves: b's demand narrows, and the other's messages stay on a
    mesh["b"].session.close_consumer(cbl)
    mesh.pump()
    mesh["a"].send(Q, "blue2", properties={"color": "blue"})
    mesh.pump()
    assert depth(mesh, "a") == 2


def test_priorities_keep_their_order_across_nodes() -> None:
    mesh = Mesh("a", "b")
    for body, priority in (("low", 1), ("high", 9), ("mid", 4), ("high2", 9)):
        mesh["a"].send(Q, body, priority=priority)
    mesh.pump()
    _cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    got = rb.take()
    assert [e.message.body for e in got] == [b"high", b"high2", b"mid", b"low"]
    assert [e.message.priority for e in got] == [9, 9, 4, 1]


def test_expiration_keeps_its_meaning_across_nodes() -> None:
    mesh = Mesh("a", "b")
    _cb, _rb = mesh["b"].consume(Q, prefetch=1)
    mesh.pump()
    mesh["a"].send(Q, "first")  # holds b's consumer's one credit
    mesh["a"].send(Q, "soon", ttl=1000)
    mesh.pump()
    sent = [c[3] for c in mesh.sent if c[2] == "handover"]
    assert [h.message.expiration for h in sent] == [0, mesh.clock.now + 1000]  # type: ignore[attr-defined]
    assert depth(mesh, "b") == 2
    mesh.clock.advance(2000)
    assert mesh["b"].broker.expire_due() == 1
    expired = looking.browse(mesh["b"].broker, "queue:__sys__expired")
    assert [e.message.body for e in expired] == [b"soon"]


def test_a_hand_over_is_not_a_delivery_for_max_deliveries() -> None:
    settings = {Q: DestinationSettings(max_deliveries=1)}
    mesh = Mesh("a", "b", settings=settings)
    mesh["a"].send(Q, "x")
    _cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    [entry] = rb.take()
    assert (entry.delivery_count, entry.redelivered) == (1, False)


def test_a_full_queue_refuses_and_takes_it_later() -> None:
    settings = {Q: DestinationSettings(max_messages=2, overflow=Overflow.REJECT)}
    mesh = Mesh("a", "b", settings=settings)
    cb, rb = mesh["b"].consume(Q, prefetch=1)
    mesh.pump()
    for i in range(3):
        mesh["a"].send(Q, str(i))
        mesh.pump()  # (what is in doubt counts against a's own bound too)
    assert (depth(mesh, "a"), depth(mesh, "b")) == (1, 2)
    assert mesh.count("refuse") == 1
    assert mesh["b"].ack_all(cb, rb) == ["0"]
    mesh["b"].credit(cb, 1)
    mesh.pump()  # room on b: it announces its consumers again, a hands the refused one over
    assert mesh["b"].ack_all(cb, rb) == ["1"]
    mesh["b"].credit(cb, 1)
    mesh.pump()
    assert mesh["b"].ack_all(cb, rb) == ["2"]
    assert depth(mesh, "a") == depth(mesh, "b") == 0


def test_a_transactions_sends_are_handed_over_only_after_its_commit() -> None:
    mesh = Mesh("a", "b")
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    tx = mesh["a"].connection.session(mesh["a"].session.ack_mode, transacted=True)
    from chute.message import Message

    tx.send(Q, Message.create(b"t1"))
    tx.send(Q, Message.create(b"t2"))
    mesh.pump()
    assert mesh.count("handover") == 0
    tx.commit()
    mesh.pump()
    assert mesh["b"].ack_all(cb, rb) == ["t1", "t2"]


def test_a_nodes_statistics_count_its_own_consumers_only() -> None:
    mesh = Mesh("a", "b")
    mesh["a"].consume(Q)
    mesh["b"].consume(Q)
    mesh["b"].consume(Q)
    mesh.pump()
    assert stats_of(mesh["a"].broker, Q)["consumers"] == 1
    assert stats_of(mesh["b"].broker, Q)["consumers"] == 2


def test_a_message_may_come_back_to_a_node_it_left() -> None:
    mesh = Mesh("a", "b")
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump()
    [entry] = rb.take()
    mesh["b"].session.close_consumer(cb)  # unacked: back on b's queue, flagged
    _, ra = mesh["a"].consume(Q)
    mesh.pump()  # b has no consumer now: it moves back to a (the same message id)
    [back] = ra.take()
    assert back.message.id == entry.message.id
    assert (back.redelivered, back.delivery_count) == (True, 2)
    assert depth(mesh, "b") == 0


def test_max_deliveries_counts_deliveries_on_every_node() -> None:
    settings = {Q: DestinationSettings(max_deliveries=2)}
    mesh = Mesh("a", "b", settings=settings)
    ca, _ = mesh["a"].consume(Q)
    mesh["a"].send(Q, "x")
    mesh["a"].session.close_consumer(ca)  # delivered once on a
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    assert [(e.delivery_count, e.redelivered) for e in rb.take()] == [(2, True)]
    mesh["b"].session.close_consumer(cb)  # the second delivery failed too
    dead = looking.browse(mesh["b"].broker, "queue:__sys__deadLetter")
    assert [e.message.body for e in dead] == [b"x"]
    assert depth(mesh, "a") == depth(mesh, "b") == 0
