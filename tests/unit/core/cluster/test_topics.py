"""Topics across in-memory nodes: every subscription in the cluster gets a message once."""

from __future__ import annotations

from chute.core.model.cluster import Handover
from chute.core.model.settings import DestinationSettings, Overflow

from .mesh import Mesh

T = "topic:news"


def handed_to(mesh: Mesh, node: str) -> list[bytes]:
    return [
        c[3].message.body
        for c in mesh.sent
        if c[2] == "handover" and c[1] == node and isinstance(c[3], Handover)
    ]


def test_a_message_reaches_every_subscription_in_the_cluster_once() -> None:
    mesh = Mesh("a", "b", "c")
    _, ra = mesh["a"].consume(T)
    _, rb1 = mesh["b"].consume(T)
    _, rb2 = mesh["b"].consume(T, subscription="keep")
    _, rc = mesh["c"].consume(T)
    mesh.pump()
    mesh["a"].send(T, "1")
    mesh["b"].send(T, "2")
    mesh.pump()
    for recorder in (ra, rb1, rb2, rc):
        assert sorted(recorder.bodies) == [b"1", b"2"]
    # one copy per node with subscriptions, not one per subscription, and nothing back
    assert handed_to(mesh, "b") == [b"1"]
    assert handed_to(mesh, "c") == [b"1", b"2"]
    assert handed_to(mesh, "a") == [b"2"]


def test_a_node_without_a_subscription_that_wants_it_gets_no_copy() -> None:
    mesh = Mesh("a", "b")
    _, rb = mesh["b"].consume(T, selector="color = 'red'")
    mesh.pump()
    mesh["a"].send(T, "blue", properties={"color": "blue"})
    mesh["a"].send(T, "red", properties={"color": "red"})
    mesh.pump()
    assert handed_to(mesh, "b") == [b"red"]
    assert rb.bodies == [b"red"]


def test_a_durable_subscription_on_another_node_gets_what_was_published_while_cut() -> None:
    mesh = Mesh("a", "b")
    cb, rb = mesh["b"].consume(T, subscription="keep")
    mesh.pump()
    mesh.cut("a", "b")
    mesh["a"].send(T, "while cut")
    mesh.connect("a", "b")
    assert rb.bodies == [b"while cut"]
    mesh["b"].session.ack(cb, rb.entries[0].seq, cumulative=False)
    assert not any(mesh["a"].memory.messages.get("cluster.out:b", {}).values())


def test_a_subscription_gone_stops_the_copies() -> None:
    mesh = Mesh("a", "b")
    cb, _ = mesh["b"].consume(T)
    mesh.pump()
    mesh["b"].session.close_consumer(cb)  # the non-durable subscription goes with it
    mesh.pump()
    mesh["a"].send(T, "x")
    mesh.pump()
    assert handed_to(mesh, "b") == []
    assert not [k for k in mesh["a"].broker.subscriptions if k.startswith("cluster.peer:")]


def test_a_subscription_gone_while_the_link_was_down_stops_the_copies_too() -> None:
    mesh = Mesh("a", "b")
    cb, _ = mesh["b"].consume(T)
    mesh.pump()
    mesh.cut("a", "b")
    mesh["b"].session.close_consumer(cb)
    mesh["a"].send(T, "x")  # kept for b while its link is down
    mesh.connect("a", "b")  # b says what it wants: no longer this topic
    assert not [k for k in mesh["a"].broker.subscriptions if k.startswith("cluster.peer:")]
    assert mesh["b"].broker.topics[T].subscriptions == {}


def test_a_published_message_survives_the_publishers_crash_for_the_other_nodes() -> None:
    mesh = Mesh("a", "b")
    _, rb = mesh["b"].consume(T, subscription="keep")
    mesh.pump()
    mesh.cut("a", "b")
    mesh["a"].send(T, "x")
    mesh.crash("a")  # the link comes back with a's restart
    mesh.connect("a", "b")
    assert rb.bodies == [b"x"]


def test_a_full_subscription_refuses_and_takes_it_later() -> None:
    settings = {T: DestinationSettings(max_messages=2, overflow=Overflow.REJECT)}
    mesh = Mesh("a", "b", settings=settings)
    cb, rb = mesh["b"].consume(T, prefetch=1, subscription="keep")
    mesh.pump()
    for i in range(3):
        mesh["a"].send(T, str(i))
        mesh.pump()
    assert mesh.count("refuse") == 1
    got = []
    for _ in range(3):
        [entry] = rb.take()
        got.append(entry.message.body)
        mesh["b"].session.ack(cb, entry.seq, cumulative=False)
        mesh["b"].credit(cb, 1)
        mesh.pump()
    assert got == [b"0", b"1", b"2"]
