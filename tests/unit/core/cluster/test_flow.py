"""Flow control on a link, in the core: however many queues and topics a node feeds to
another, what it has unconfirmed there stays within the link's window
(chute.core.rules.cluster_window), and nothing is lost or doubled by the holding."""

from __future__ import annotations

from .mesh import Mesh

WINDOW = 8


def on_wire(mesh: Mesh, what: str, src: str = "a") -> int:
    return sum(1 for c in mesh.wire if c[2] == what and c[0] == src)


def test_a_receiver_that_does_not_answer_gets_no_more_than_the_links_window() -> None:
    mesh = Mesh("a", "b", link_window=WINDOW)
    queues = [f"queue:q{i}" for i in range(20)]
    consumers = [mesh["b"].consume(q) for q in queues]
    mesh.pump()
    for q in queues:  # 200 messages for b, which answers nothing meanwhile
        for i in range(10):
            mesh["a"].send(q, f"{q}/{i}")
    assert on_wire(mesh, "handover") == WINDOW
    peer = mesh["a"].cluster.peers["b"]
    assert len(peer.in_doubt) == WINDOW
    assert sum(mesh["a"].broker.queues[q].ready for q in queues) == 200 - WINDOW
    mesh.pump()  # b answers: the window opens and closes until everything went
    got = [body for c, r in consumers for body in mesh["b"].ack_all(c, r)]
    assert sorted(got) == sorted(f"{q}/{i}" for q in queues for i in range(10))
    assert not peer.in_doubt
    assert not peer.window.full


def test_topic_copies_share_the_links_window() -> None:
    mesh = Mesh("a", "b", link_window=WINDOW)
    topics = [f"topic:t{i}" for i in range(5)]
    subscribers = [mesh["b"].consume(t, subscription=f"s{i}") for i, t in enumerate(topics)]
    mesh.pump()
    for t in topics:
        for i in range(10):
            mesh["a"].send(t, f"{t}/{i}")
    assert on_wire(mesh, "handover") == WINDOW
    mesh.pump()
    got = [body for c, r in subscribers for body in mesh["b"].ack_all(c, r)]
    assert sorted(got) == sorted(f"{t}/{i}" for t in topics for i in range(10))


def test_a_consumer_held_for_its_own_reason_stays_held_when_the_window_opens() -> None:
    mesh = Mesh("a", "b", link_window=WINDOW)
    cb, rb = mesh["b"].consume("queue:one")
    gone, _ = mesh["b"].consume("queue:two")
    mesh.pump()
    for i in range(WINDOW):
        mesh["a"].send("queue:one", str(i))
    assert mesh["a"].cluster.peers["b"].window.full
    mesh["b"].session.close_consumer(gone)  # b no longer wants queue:two
    mesh.pump()
    assert not mesh["a"].cluster.peers["b"].window.full
    mesh["a"].send("queue:two", "stays")
    mesh.pump()
    assert mesh["a"].broker.queues["queue:two"].ready == 1
    assert len(mesh["b"].ack_all(cb, rb)) == WINDOW


def test_a_consumer_announced_while_the_window_is_full_waits_for_it_to_open() -> None:
    mesh = Mesh("a", "b", link_window=WINDOW)
    cb, rb = mesh["b"].consume("queue:one")
    mesh.pump()
    for i in range(WINDOW):
        mesh["a"].send("queue:one", str(i))
    mesh["a"].send("queue:two", "later")
    mesh["b"].consume("queue:two")
    # b's demand for queue:two reaches a behind the hand-overs: a's peer consumer for it
    # comes while the window is full, and waits
    mesh.pump(until=lambda: "queue:two" in mesh["a"].cluster.peers["b"].consumers)
    assert mesh["a"].broker.queues["queue:two"].ready == 1
    mesh.pump()
    assert mesh["a"].broker.queues["queue:two"].ready == 0
    assert len(mesh["b"].ack_all(cb, rb)) == WINDOW


def test_the_window_holds_across_a_cut_link_and_opens_once_it_is_up_again() -> None:
    mesh = Mesh("a", "b", link_window=WINDOW)
    cb, rb = mesh["b"].consume("queue:one")
    mesh.pump()
    for i in range(3 * WINDOW):
        mesh["a"].send("queue:one", str(i))
    mesh.cut("a", "b")
    mesh.connect("a", "b")
    mesh.pump()
    assert sorted(mesh["b"].ack_all(cb, rb), key=int) == [str(i) for i in range(3 * WINDOW)]
    assert not mesh["a"].cluster.peers["b"].in_doubt


def test_large_messages_are_bounded_by_the_links_bytes() -> None:
    mesh = Mesh("a", "b", link_bytes=1000)
    cb, rb = mesh["b"].consume("queue:big")
    mesh.pump()
    for i in range(50):
        mesh["a"].send("queue:big", f"{i:03d}" + "x" * 297)  # each of one size
    window = mesh["a"].cluster.peers["b"].window
    sent = on_wire(mesh, "handover")
    one = window.nbytes // sent
    assert window.full
    assert window.nbytes - one < 1000 <= window.nbytes  # closed by the one that reached it
    mesh.pump()
    assert len(mesh["b"].ack_all(cb, rb)) == 50
    assert window.count == window.nbytes == 0


def test_a_message_larger_than_the_links_bytes_goes_alone() -> None:
    mesh = Mesh("a", "b", link_bytes=100)
    cb, rb = mesh["b"].consume("queue:big")
    mesh.pump()
    for i in range(5):
        mesh["a"].send("queue:big", str(i) * 300)
    assert on_wire(mesh, "handover") == 1
    mesh.pump()
    assert [body[0] for body in mesh["b"].ack_all(cb, rb)] == ["0", "1", "2", "3", "4"]
