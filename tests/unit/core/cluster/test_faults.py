"""Store-and-forward across nodes: cut links, crashes and repeated hand-overs."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from chute.core.model.cluster import Demand, Handover, HandoverKey
from chute.core.model.consumer import BrokerConsumer
from chute.core.model.settings import DestinationSettings, Overflow
from chute.core.operations import looking
from chute.core.operations.session import BrokerSession
from chute.message import Message

from ..helpers import Recorder
from .mesh import Mesh

Q = "queue:work"


def held(mesh: Mesh, node: str) -> int:
    queue = mesh[node].broker.queues.get(Q)
    return queue.held if queue is not None else 0


def stored_bodies(mesh: Mesh, node: str, name: str = Q) -> list[bytes]:
    kept = mesh[node].memory.messages.get(name, {})
    return [kept[seq].message.body for seq in sorted(kept)]


def stored_in(mesh: Mesh) -> Callable[[], bool]:
    """Stop pumping once a node stored a hand-over (its confirm on the wire, not yet read)."""
    return lambda: any(c[2] == "confirm" for c in mesh.wire)


def idle_consumer(mesh: Mesh, node: str) -> None:
    """A consumer that announces demand and takes nothing (its credit spent)."""
    consumer, _ = mesh[node].consume(Q, prefetch=1)
    BrokerSession.stop(consumer)


def test_a_hand_over_repeated_after_a_lost_confirm_is_not_stored_twice() -> None:
    mesh = Mesh("a", "b")
    idle_consumer(mesh, "b")
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.cut("a", "b")  # the confirm is lost
    assert stored_bodies(mesh, "a") == [b"x"]
    assert stored_bodies(mesh, "b") == [b"x"]
    mesh.connect("a", "b")
    handovers = [c[3] for c in mesh.sent if c[2] == "handover"]
    assert len(handovers) == 2
    assert isinstance(handovers[0], Handover)
    assert isinstance(handovers[1], Handover)
    assert handovers[0].key == handovers[1].key  # the same hand-over, sent again
    assert stored_bodies(mesh, "b") == [b"x"]  # not twice
    assert stored_bodies(mesh, "a") == []  # the confirm came this time
    assert held(mesh, "a") == 0
    assert held(mesh, "b") == 1


def test_the_sender_crashing_before_the_confirm_sends_it_again_once() -> None:
    mesh = Mesh("a", "b")
    cb, rb = mesh["b"].consume(Q)
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.crash("a")  # a restarts: the hand-over was recorded, not confirmed
    assert stored_bodies(mesh, "a") == []
    assert mesh["b"].ack_all(cb, rb) == ["x"]  # once: the resend was recognised
    assert stored_bodies(mesh, "b") == []
    assert held(mesh, "a") == 0


def test_the_receiver_crashing_after_storing_recognises_the_resend() -> None:
    mesh = Mesh("a", "b")
    mesh["b"].consume(Q)
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.crash("b")  # b stored it (and its key), its confirm never left
    # b's consumer went with the crash: the message waits on b, once, marked delivered
    assert stored_bodies(mesh, "b") == [b"x"]
    assert stored_bodies(mesh, "a") == []
    _cb, rb = mesh["b"].consume(Q)
    [entry] = rb.take()
    assert entry.redelivered  # b had delivered it before the crash


def test_what_is_in_doubt_survives_both_journals_restarting(tmp_path: Path) -> None:
    mesh = Mesh("a", "b", directory=tmp_path)
    try:
        idle_consumer(mesh, "b")
        mesh.pump()
        mesh["a"].send(Q, "x")
        mesh["a"].send(Q, "y", persistent=False)
        mesh.pump(until=lambda: mesh.count("confirm") == 1)  # b stored x; y is on the wire
        mesh.cut("a", "b")
        mesh["b"].restart()  # b's key of x comes back from its journal
        mesh["a"].restart()  # a's record of x too; y was never stored anywhere
        assert mesh["a"].cluster.peers["b"].in_doubt
        assert mesh["b"].cluster.peers["a"].received
        mesh.connect("a", "b")
        _, rb = mesh["b"].consume(Q)
        assert rb.bodies == [b"x"]  # once
        assert held(mesh, "a") == 0
        assert not mesh["a"].cluster.peers["b"].in_doubt
        assert not mesh["b"].cluster.peers["a"].received
    finally:
        mesh.close()


def test_a_cut_link_keeps_hand_overs_in_doubt_until_it_is_back() -> None:
    mesh = Mesh("a", "b")
    idle_consumer(mesh, "b")
    mesh.pump()
    mesh["a"].send(Q, "x")
    # cut before b read the hand-over: b never had it
    mesh.cut("a", "b")
    assert held(mesh, "a") == 1
    assert held(mesh, "b") == 0
    mesh["a"].send(Q, "y")  # b's demand is on hold: y waits on a
    assert mesh.count("handover") == 1
    mesh.connect("a", "b")
    assert held(mesh, "a") == 0
    assert held(mesh, "b") == 2
    assert sorted(stored_bodies(mesh, "b")) == [b"x", b"y"]


def test_a_node_gone_for_good_gives_back_what_was_in_doubt_flagged_redelivered() -> None:
    mesh = Mesh("a", "b", "c")
    idle_consumer(mesh, "b")
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.cut("a", "b")
    mesh.cut("b", "c")
    mesh["a"].cluster.node_gone("b")
    mesh["c"].cluster.node_gone("b")
    assert held(mesh, "a") == 1
    _cc, rc = mesh["c"].consume(Q)
    mesh.pump()
    [entry] = rc.take()
    assert entry.message.body == b"x"
    assert entry.redelivered
    assert stored_bodies(mesh, "a", "cluster.out:b") == []


def test_a_node_seen_gone_while_alive_sends_again_what_was_in_doubt_and_it_is_known() -> None:
    """a sees b leave (b's lease ran out while it was cut off) though b is alive, holding
    in doubt what a stored: when they link again b sends it again, same key, and a
    confirms it without storing it twice."""
    mesh = Mesh("a", "b")
    idle_consumer(mesh, "a")
    mesh.pump()
    mesh["b"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.cut("a", "b")  # the confirm is lost
    mesh["a"].cluster.node_gone("b")
    assert stored_bodies(mesh, "a") == [b"x"]
    mesh.connect("a", "b")
    assert stored_bodies(mesh, "a") == [b"x"]  # not twice
    assert stored_bodies(mesh, "b") == []  # the confirm came this time
    assert not mesh["b"].cluster.peers["a"].in_doubt


def test_a_node_seen_gone_while_alive_gets_new_keys_after_it_comes_back() -> None:
    """a sees b leave while b, alive, remembers the keys it stored from a: what a hands
    over after they link again never reuses one of those keys."""
    mesh = Mesh("a", "b")
    idle_consumer(mesh, "b")
    mesh.pump()
    mesh["a"].send(Q, "x")
    mesh.pump(until=stored_in(mesh))
    mesh.cut("a", "b")
    mesh["a"].cluster.node_gone("b")  # x is a's again, flagged redelivered
    mesh.connect("a", "b")
    mesh["a"].send(Q, "y")
    mesh.pump()
    keys = [c[3].key for c in mesh.sent if c[2] == "handover" and isinstance(c[3], Handover)]
    assert len(keys) == len(set(keys)), keys


def test_a_queue_whose_only_consumers_are_cut_off_does_not_push_back_on_producers() -> None:
    """Producer flow control waits for consumers that lag, not for a node's peer consumer
    on hold: with b's link down, a's queue is consumed by nobody, and its producers go
    on at full speed (as on one node, where a queue without consumers never pushes back)."""
    mesh = Mesh("a", "b")
    mesh["a"].broker.flow_backlog = 10
    idle_consumer(mesh, "b")
    mesh.pump()
    mesh.cut("a", "b")
    for n in range(300):  # past the window and the backlog
        mesh["a"].send(Q, f"m{n}")
    assert mesh["a"].broker.pressure == []


def test_a_queue_whose_remote_consumers_left_does_not_push_back_on_producers() -> None:
    mesh = Mesh("a", "b")
    mesh["a"].broker.flow_backlog = 10
    consumer, _ = mesh["b"].consume(Q, prefetch=1)
    mesh.pump()
    mesh["b"].session.close_consumer(consumer)
    mesh.pump()
    for n in range(300):
        mesh["a"].send(Q, f"m{n}")
    assert mesh["a"].broker.pressure == []


def test_a_local_consumer_that_lags_still_pushes_back_in_a_cluster() -> None:
    mesh = Mesh("a", "b")
    mesh["a"].broker.flow_backlog = 10
    mesh["a"].consume(Q, prefetch=1)
    mesh.pump()
    for n in range(20):
        mesh["a"].send(Q, f"m{n}")
    assert mesh["a"].broker.pressure


class Soak:
    """Three nodes, random work on them, and what their consumers got."""

    names = ("a", "b", "c")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mesh = Mesh(*self.names)
        self.consumers: dict[str, list[tuple[BrokerConsumer, Recorder]]] = {
            n: [] for n in self.names
        }
        self.got: list[str] = []
        self.redelivered: set[str] = set()
        self.sent = 0

    def step(self) -> None:
        rng, mesh, node = self.rng, self.mesh, self.rng.choice(self.names)
        roll = rng.random()
        mine = self.consumers[node]
        if roll < 0.45:
            mesh[node].send(Q, str(self.sent), priority=rng.randrange(10))
            self.sent += 1
        elif roll < 0.55:
            mine.append(mesh[node].consume(Q, prefetch=rng.randrange(1, 5)))
        elif roll < 0.62 and mine:
            consumer, _ = mine.pop(rng.randrange(len(mine)))
            mesh[node].session.close_consumer(consumer)
        elif roll < 0.66:
            other = rng.choice([n for n in self.names if n != node])
            if mesh.linked(node, other):
                mesh.cut(node, other)
            else:
                mesh.connect(node, other)
        elif roll < 0.70:
            mine.clear()  # a crash closes them
            mesh.crash(node)
        self.take(ack_share=0.9)
        mesh.pump(until=lambda: rng.random() < 0.2)

    def take(self, ack_share: float) -> None:
        """What the consumers got: acked (most of it), and a credit back for each."""
        for n in self.names:
            for consumer, recorder in self.consumers[n]:
                for entry in recorder.take():
                    body = entry.message.body.decode()
                    if entry.redelivered:
                        self.redelivered.add(body)
                    self.got.append(body)
                    if self.rng.random() < ack_share:
                        self.mesh[n].session.ack(consumer, entry.seq, cumulative=False)
                    self.mesh[n].credit(consumer, 1)

    def drain(self) -> None:
        """Heal every link, and consume everything with one consumer per node."""
        mesh = self.mesh
        for a in self.names:
            for b in self.names:
                if a < b and not mesh.linked(a, b):
                    mesh.connect(a, b)
        for n in self.names:
            for consumer, _ in self.consumers[n]:
                mesh[n].session.close_consumer(consumer)
            self.consumers[n] = [mesh[n].consume(Q, prefetch=1000)]
        mesh.pump()
        self.take(ack_share=1.0)


@pytest.mark.parametrize("seed", range(6))
def test_exactly_once_across_three_nodes_with_consumers_joining_and_leaving(seed: int) -> None:
    """Sends, consumers coming and going, links cut and healed, nodes crashing, the links
    carrying a random part of what they hold between steps: at the end every message was
    consumed, and any message delivered twice came flagged the second time."""
    soak = Soak(seed)
    for _ in range(1000):
        soak.step()
    soak.drain()
    mesh = soak.mesh
    assert mesh.count("handover") > mesh.count("release")  # some were sent again
    assert sorted(set(soak.got), key=int) == [str(i) for i in range(soak.sent)]  # none lost
    seen: set[str] = set()
    for body in soak.got:  # a message delivered again came flagged
        if body in seen:
            assert body in soak.redelivered, body
        seen.add(body)
    for n in soak.names:
        assert held(mesh, n) == 0
        ledgers = {k: v for k, v in mesh[n].memory.messages.items() if k.startswith("cluster.")}
        assert not any(ledgers.values()), ledgers  # every key released or resumed past
        assert not any(peer.received for peer in mesh[n].cluster.peers.values())
        assert looking.browse(mesh[n].broker, "queue:__sys__deadLetter") == []


def test_nonsense_from_a_node_is_logged_and_refused_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mesh = Mesh("a", "b")
    cluster = mesh["a"].cluster
    cluster.on_demand("b", Demand(Q, ("color = = 'red'",)))
    cluster.on_demand("b", Demand("nonsense", (None,)))
    cluster.on_handover("b", Handover(HandoverKey("r", 1), "stream:", Message.create(b"x")))
    assert [c[2] for c in mesh.wire] == ["refuse"]
    assert "ignored node b's consumers of queue:work" in caplog.text
    assert "refused node b's message for stream:" in caplog.text
    assert held(mesh, "a") == 0


def test_a_hand_over_refused_then_a_crash_leaves_the_message_never_delivered() -> None:
    """A hand-over is no delivery: its record alone says what is in doubt (no delivery
    mark is stored for it), so a message refused and then recovered from the store is
    not flagged redelivered."""
    settings = {Q: DestinationSettings(max_messages=1, overflow=Overflow.REJECT)}
    mesh = Mesh("a", "b", settings=settings)
    mesh["b"].consume(Q, prefetch=1)
    mesh.pump()
    mesh["a"].send(Q, "0")
    mesh.pump()  # b takes it: b is full
    mesh["a"].send(Q, "1")
    mesh.pump()
    assert mesh.count("refuse") == 1
    assert held(mesh, "a") == 1
    assert [s.delivery_count for s in mesh["a"].memory.messages[Q].values()] == [0]
    mesh.crash("a")
    queue = mesh["a"].broker.queues[Q]
    [entry] = [e for lane in queue.lanes for e in lane]
    assert (entry.message.body, entry.delivery_count, entry.redelivered) == (b"1", 0, False)
