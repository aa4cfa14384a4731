"""Topics across in-memory nodes: every subscription in the cluster gets a message once."""

from __future__ import annotations

import random

import pytest

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


@pytest.mark.parametrize("seed", range(6))
def test_every_durable_subscription_gets_every_message_once_through_faults(seed: int) -> None:
    """Three nodes, a durable subscription on each, publishes on any node while links are
    cut and healed and nodes crash: each subscription gets every message, and a copy
    delivered twice came flagged the second time."""
    rng = random.Random(seed)
    names = ("a", "b", "c")
    mesh = Mesh(*names)
    subs = {n: mesh[n].consume(T, prefetch=4, subscription=f"s-{n}") for n in names}
    mesh.pump()
    got: dict[str, list[tuple[str, bool]]] = {n: [] for n in names}
    published = 0

    def take(n: str) -> None:
        consumer, recorder = subs[n]
        for entry in recorder.take():
            got[n].append((entry.message.body.decode(), entry.redelivered))
            mesh[n].session.ack(consumer, entry.seq, cumulative=False)
            mesh[n].credit(consumer, 1)

    for _ in range(600):
        node = rng.choice(names)
        roll = rng.random()
        if roll < 0.6:
            mesh[node].send(T, str(published))
            published += 1
        elif roll < 0.7:
            other = rng.choice([n for n in names if n != node])
            if mesh.linked(node, other):
                mesh.cut(node, other)
            else:
                mesh.connect(node, other)
        elif roll < 0.74:
            mesh.crash(node)
            subs[node] = mesh[node].consume(T, prefetch=4, subscription=f"s-{node}")
        for n in names:
            take(n)
        mesh.pump(until=lambda: rng.random() < 0.2)
    for a in names:
        for b in names:
            if a < b and not mesh.linked(a, b):
                mesh.connect(a, b)
    for _ in range(published):
        mesh.pump()
        for n in names:
            take(n)
    for n in names:
        bodies = [body for body, _ in got[n]]
        assert sorted(set(bodies), key=int) == [str(i) for i in range(published)], n
        seen: set[str] = set()
        for body, redelivered in got[n]:
            assert body not in seen or redelivered, (n, body)
            seen.add(body)
