"""Streams in a cluster: one home gives the offsets; sends elsewhere are handed over to
it, reads elsewhere read a copy with the same offsets (chute.core.rules.cluster_streams)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.core.rules.cluster_streams import FORWARD_PREFIX

from .stream_mesh import StreamMesh

S = "stream:orders"


def test_sends_on_every_node_get_their_offsets_from_the_home_and_every_copy_agrees() -> None:
    mesh = StreamMesh("a", "b", "c", homes={S: "a"})
    mesh["a"].send(S, "a1")
    mesh["b"].send(S, "b1")
    mesh["c"].send(S, "c1")
    mesh["b"].send(S, "b2")
    mesh.pump()
    on_a = mesh["a"].read(S)
    assert sorted(body for _, body in on_a) == ["a1", "b1", "b2", "c1"]
    assert [offset for offset, _ in on_a] == [1, 2, 3, 4]
    assert mesh["b"].read(S) == on_a
    assert mesh["c"].read(S) == on_a
    assert mesh["b"].read(S).index((4, on_a[3][1])) == 3  # b1 before b2: one path, in order
    assert [b for _, b in on_a if b.startswith("b")] == ["b1", "b2"]


def test_a_reader_on_another_node_sees_the_homes_offsets_as_they_come() -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"})
    mesh["a"].send(S, "one")
    mesh.pump()
    reader = mesh["b"].reader(S, "first")
    mesh.pump()
    mesh["a"].send(S, "two")
    mesh["b"].send(S, "three")
    mesh.pump()
    got = [(e.seq, e.message.body.decode()) for e in reader.entries]
    assert got == [(1, "one"), (2, "two"), (3, "three")]
    assert got == mesh["a"].read(S)


def test_sends_before_the_home_is_agreed_wait_then_go_to_it() -> None:
    mesh = StreamMesh("a", "b")
    mesh["b"].send(S, "early-b")
    mesh["a"].send(S, "early-a")
    mesh.pump()
    assert mesh["a"].read(S) == []
    assert mesh["b"].read(S) == []
    assert f"{FORWARD_PREFIX}{S}" in mesh["b"].memory.definitions
    mesh.agree(S, "a")
    assert [b for _, b in mesh["a"].read(S)] == ["early-a", "early-b"]
    assert mesh["b"].read(S) == mesh["a"].read(S)
    assert f"{FORWARD_PREFIX}{S}" not in mesh["a"].memory.definitions
    assert not mesh["b"].broker.streams[S].forward.held  # type: ignore[union-attr]


def test_sends_while_the_home_is_cut_off_wait_and_follow_when_it_is_back() -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"})
    mesh["b"].send(S, "before")
    mesh.pump()
    mesh.cut("a", "b")
    mesh["b"].send(S, "while-cut")
    mesh["a"].send(S, "home")
    assert [b for _, b in mesh["b"].read(S)] == ["before"]
    mesh.connect("a", "b")
    assert [b for _, b in mesh["a"].read(S)] == ["before", "home", "while-cut"]
    assert mesh["b"].read(S) == mesh["a"].read(S)


def test_a_send_with_a_time_to_live_waiting_for_the_home_does_not_expire_on_its_way() -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"})
    mesh.cut("a", "b")
    mesh["b"].send(S, "short-lived", ttl=1000)
    mesh.clock.advance(5000)
    mesh.connect("a", "b")
    assert [b for _, b in mesh["a"].read(S)] == ["short-lived"]
    assert mesh["b"].read(S) == mesh["a"].read(S)


def test_a_reader_on_another_node_reads_on_after_the_link_is_cut_and_back() -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"})
    reader = mesh["b"].reader(S, "first")
    mesh["a"].send(S, "1")
    mesh.pump()
    mesh.cut("a", "b")
    mesh["a"].send(S, "2")
    mesh.pump()
    assert [e.seq for e in reader.entries] == [1]
    mesh.connect("a", "b")
    mesh["a"].send(S, "3")
    mesh.pump()
    assert [(e.seq, e.message.body) for e in reader.entries] == [(1, b"1"), (2, b"2"), (3, b"3")]


def test_a_hand_over_repeated_after_the_sender_crashed_is_not_appended_twice(
    tmp_path: Path,
) -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"}, directory=tmp_path)
    try:
        for i in range(5):
            mesh["b"].send(S, f"m{i}")
        # the home stores the hand-overs; its confirms are lost with b's crash
        mesh.pump(until=lambda: not any(c[2] == "handover" for c in mesh.wire))
        mesh.crash("b")
        mesh.pump()
        bodies = [b for _, b in mesh["a"].read(S)]
        assert bodies == [f"m{i}" for i in range(5)]
        assert mesh["b"].read(S) == mesh["a"].read(S)
        assert not mesh["b"].streams.forwards[S].held
    finally:
        mesh.close()


def test_a_home_that_left_the_cluster_and_came_back_gets_what_was_in_doubt_once(
    tmp_path: Path,
) -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"}, directory=tmp_path)
    try:
        for i in range(3):
            mesh["b"].send(S, f"m{i}")
        mesh.pump(until=lambda: not any(c[2] == "handover" for c in mesh.wire))
        mesh.cut("a", "b")  # the confirms are lost
        mesh["b"].cluster.node_gone("a")
        mesh["a"].cluster.node_gone("b")
        mesh.connect("a", "b")
        assert [b for _, b in mesh["a"].read(S)] == ["m0", "m1", "m2"]
        assert not mesh["b"].streams.forwards[S].held
    finally:
        mesh.close()


def test_a_copy_reads_on_from_its_head_after_its_node_restarts(tmp_path: Path) -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"}, directory=tmp_path)
    try:
        mesh["b"].broker.destination(S, create=True)
        mesh["a"].send(S, "1")
        mesh.pump()
        assert mesh["b"].read(S) == [(1, "1")]
        mesh.cut("a", "b")
        mesh["a"].send(S, "2")
        mesh["b"].restart()
        mesh.connect("a", "b")
        assert mesh["b"].read(S) == [(1, "1"), (2, "2")]
        reads = [c[3] for c in mesh.sent if c[2] == "stream_read" and c[0] == "b"]
        assert isinstance(reads[-1], tuple)
        assert reads[-1][1] == 3  # it asked from its head, not from the start
    finally:
        mesh.close()


@pytest.mark.parametrize("home", ["a", "b"])
def test_every_node_asks_for_the_home_once_per_stream(home: str) -> None:
    mesh = StreamMesh("a", "b", homes={S: home})
    for _ in range(3):
        mesh["a"].send(S, "x")
        mesh["b"].send(S, "y")
    mesh.pump()
    assert sorted(mesh.asked) == [("a", S), ("b", S)]
    assert len(mesh[home].read(S)) == 6


def test_a_copy_deleted_and_made_again_reads_on_from_where_it_stopped() -> None:
    mesh = StreamMesh("a", "b", homes={S: "a"})
    mesh["b"].broker.destination(S, create=True)
    mesh["a"].send(S, "1")
    mesh["a"].send(S, "2")
    mesh.pump()
    assert mesh["b"].read(S) == [(1, "1"), (2, "2")]
    mesh["b"].broker.destinations.delete(S, force=True)
    mesh["a"].send(S, "3")
    mesh.pump()
    mesh["b"].broker.destination(S, create=True)
    mesh.pump()
    assert mesh["b"].read(S) == [(3, "3")]
    mesh["a"].send(S, "4")
    mesh.pump()
    assert mesh["b"].read(S) == [(3, "3"), (4, "4")]
    assert mesh["a"].read(S) == [(1, "1"), (2, "2"), (3, "3"), (4, "4")]
