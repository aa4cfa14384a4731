"""Hand-overs in batches: those that arrive together are stored in one atomic commit (their
messages and one in ledger record naming all their keys) and confirmed in one confirm;
the record goes once every key it names is released, and names them after a crash."""

from __future__ import annotations

from pathlib import Path

from chute.core.model.cluster import Handover, record_keys
from chute.core.operations.session import BrokerSession

from .mesh import Mesh

Q = "queue:work"
IN_A = "cluster.in:a"


def _idle(mesh: Mesh) -> None:
    consumer, _ = mesh["b"].consume(Q, prefetch=1)
    BrokerSession.stop(consumer)
    mesh.pump()


def _send(mesh: Mesh, *bodies: str) -> None:
    for body in bodies:
        mesh["a"].send(Q, body)


def test_hand_overs_arriving_together_are_stored_in_one_commit_and_confirmed_once() -> None:
    mesh = Mesh("a", "b")
    _idle(mesh)
    _send(mesh, "1", "2", "3", "4")
    mesh.pump(until=lambda: any(c[2] == "confirm" for c in mesh.wire))
    assert mesh.handover_batches == [4]
    confirms = [c[3] for c in mesh.wire if c[2] == "confirm"]
    assert len(confirms) == 1
    assert isinstance(confirms[0], list)
    assert len(confirms[0]) == 4
    [record] = mesh["b"].memory.messages[IN_A].values()  # one record for the four keys
    assert record_keys(record.message) == confirms[0]
    mesh.pump()
    assert mesh["b"].memory.messages[IN_A] == {}  # released: erased
    assert mesh["b"].broker.queues[Q].held == 4
    assert mesh["a"].broker.queues[Q].held == 0


def test_a_batch_record_goes_only_once_every_key_it_names_is_released() -> None:
    mesh = Mesh("a", "b")
    _idle(mesh)
    _send(mesh, "1", "2", "3")
    mesh.pump(until=lambda: any(c[2] == "confirm" for c in mesh.wire))
    mesh.cut("a", "b")  # the confirm is lost: b holds the three keys
    b = mesh["b"].cluster
    keys = sorted(b.peers["a"].received)
    b.on_release("a", keys[:2])
    assert len(mesh["b"].memory.messages[IN_A]) == 1
    assert sorted(b.peers["a"].received) == keys[2:]
    b.on_release("a", keys[2:])
    assert mesh["b"].memory.messages[IN_A] == {}


def test_a_batch_stored_before_a_crash_is_recognised_key_by_key(tmp_path: Path) -> None:
    mesh = Mesh("a", "b", directory=tmp_path)
    try:
        _idle(mesh)
        _send(mesh, "1", "2", "3")
        mesh.pump(until=lambda: any(c[2] == "confirm" for c in mesh.wire))
        mesh.cut("a", "b")  # b stored the three; its confirm never left
        stored = sorted(mesh["b"].cluster.peers["a"].received)
        mesh["b"].restart()  # its one record of the three keys comes back from its journal
        assert sorted(mesh["b"].cluster.peers["a"].received) == stored
        mesh.connect("a", "b")  # a sends the three again, with the same keys
        resent = [c[3] for c in mesh.sent if c[2] == "handover"][-3:]
        assert sorted(h.key for h in resent if isinstance(h, Handover)) == stored
        _, rb = mesh["b"].consume(Q)
        assert sorted(rb.bodies) == [b"1", b"2", b"3"]  # once each
        assert not mesh["a"].cluster.peers["b"].in_doubt
        assert not mesh["b"].cluster.peers["a"].received
        assert mesh["a"].broker.queues[Q].held == 0
    finally:
        mesh.close()


def test_a_confirm_releases_only_the_keys_it_found_in_doubt_and_each_once() -> None:
    mesh = Mesh("a", "b")
    _idle(mesh)
    _send(mesh, "1", "2", "3")
    mesh.pump(until=lambda: any(c[2] == "confirm" for c in mesh.wire))
    [confirm] = [c for c in mesh.wire if c[2] == "confirm"]
    mesh.wire.remove(confirm)
    first, second, third = sorted(mesh["a"].cluster.peers["b"].in_doubt)
    a = mesh["a"].cluster
    a.on_confirm("b", [first])
    # repeated, unknown and new keys together (as a repeated hand-over's confirm may come):
    # only the one still in doubt, once
    a.on_confirm("b", [first, ("other-run", 7), second, second])
    a.on_confirm("b", [(third.run, third.n)])  # a plain (run, n) pair finds its key
    releases = [c[3] for c in mesh.wire if c[2] == "release"]
    assert releases == [[first], [second], [third]]
    assert not a.peers["b"].in_doubt
    assert mesh["a"].broker.queues[Q].held == 0  # each copy removed once
