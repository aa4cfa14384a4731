"""The statistics exchange between two nodes' links, over in-memory wires: pages asked for
one at a time, a node that does not answer shown down once the deadline passed, a link
lost while asking; and a view merged into a page of statistics."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from chute.config import ServerConfig
from chute.config.sections import ClusterSettings
from chute.core.model.settings import SettingsResolver
from chute.core.operations.connection import connect as connect_user
from chute.core.rules.access import Access, Action, Role, User
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.peer_stats import PAGE_DESTINATIONS
from chute.sansio import NeedData
from chute.server.cluster_stats import page_filter
from chute.server.cluster_view import DOWN, UP, ClusterView, NodeView
from chute.server.peers import PeerLink, PeerLinks
from chute.store.memory import MemoryStore


class Host:
    def __init__(self) -> None:
        self.config = ServerConfig()
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    def request_sync(
        self, callback: Callable[[BaseException | None], None], seal: Any = None
    ) -> None:
        callback(None)


class Node:
    def __init__(self, name: str) -> None:
        self.links = PeerLinks(Host(), ClusterSettings(node=name), "c")
        self.broker = Broker(MemoryStore(), SettingsResolver({}))
        self.broker.recover()
        self.links.cluster = Cluster(self.broker, self.links, node=name, run=name)
        self.stats = self.links.stats
        self.stats.timeout = 0.5
        self.links.joined(name, f"{name}:5445")  # this node's own address
        self.seen: list[type] = []  # what arrived, in order
        self.asked = asyncio.Event()  # a statistics request arrived


def wire(
    sender: Node, receiver: Node, link: Callable[[], PeerLink], *, mute: bool = False
) -> Callable[[bytes], None]:
    codec = PacketCodec()
    codec.version = p.PEER_VERSION
    loop = asyncio.get_running_loop()

    def deliver(packet: object) -> None:
        receiver.links.received(link(), packet)

    def write(data: bytes) -> None:
        codec.receive_data(data)
        while not isinstance(item := codec.next_packet(), NeedData):
            packet = item[1]
            receiver.seen.append(type(packet))
            if isinstance(packet, p.PeerStatsFetch):
                receiver.asked.set()
            if mute and isinstance(packet, p.PeerStatsFetch):
                continue
            loop.call_soon(deliver, packet)

    return write


def connect(a: Node, b: Node, *, b_mute: bool = False) -> None:
    """Link a and b both ways (``b_mute``: b never answers a statistics request)."""
    a_name, b_name = a.links.node, b.links.node
    for node, other in ((a, b), (b, a)):
        node.links.members[other.links.node] = f"{other.links.node}:5445"  # no dialing
    links: dict[str, PeerLink] = {}
    links["a"] = a.links.up(b_name, wire(a, b, lambda: links["b"], mute=b_mute), lambda: None)
    links["b"] = b.links.up(a_name, wire(b, a, lambda: links["a"]), lambda: None)


def fill(node: Node, count: int, prefix: str = "queue:q.") -> None:
    for i in range(count):
        node.broker.destination(f"{prefix}{i:05d}", create=True)


def test_a_view_gathers_every_page_of_the_other_node() -> None:
    async def run() -> ClusterView:
        a, b = Node("a"), Node("b")
        connect(a, b)
        count = 2 * PAGE_DESTINATIONS + 10
        fill(b, count)
        view = await a.stats.view()
        assert b.seen.count(p.PeerStatsFetch) == 3  # asked page by page
        return view

    view = asyncio.run(run())
    assert [n.name for n in view.nodes] == ["a", "b"]
    a_node, b_node = view.nodes
    assert (a_node.state, a_node.links, a_node.address) == (UP, ("b",), "a:5445")
    assert (b_node.state, b_node.links) == (UP, ("a",))
    assert len(b_node.figures) == 2 * PAGE_DESTINATIONS + 10 + 2  # the dead-letter, expired
    assert b_node.figures["queue:q.00000"] == (0, 0)


def test_a_node_that_does_not_answer_is_down_once_the_deadline_passed() -> None:
    async def run() -> ClusterView:
        a, b = Node("a"), Node("b")
        connect(a, b, b_mute=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        view = await a.stats.view()
        assert loop.time() - started < 5 * a.stats.timeout
        assert not a.stats._waiting  # nothing left behind
        return view

    view = asyncio.run(run())
    b_node = view.nodes[1]
    assert (b_node.name, b_node.state, b_node.reason) == ("b", DOWN, "no answer within 0.5 s")
    assert b_node.address == "b:5445"


def test_destinations_made_or_deleted_during_a_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[ClusterView, ClusterView]:
        a, b = Node("a"), Node("b")
        connect(a, b)
        fill(b, 3 * PAGE_DESTINATIONS)  # and the 2 system queues: they sort first
        on_page = a.stats.on_page
        pages = 0

        def first_page_changes_b(name: str, page: p.PeerStatsPage) -> None:
            nonlocal pages
            pages += 1
            if pages == 1:  # b's walk began: delete its whole second page, make one more
                for i in range(PAGE_DESTINATIONS - 2, 2 * PAGE_DESTINATIONS):
                    b.broker.delete_queue(b.broker.queues[f"queue:q.{i:05d}"])
                fill(b, 1, "queue:q.late")
            on_page(name, page)

        monkeypatch.setattr(a.stats, "on_page", first_page_changes_b)
        during = await a.stats.view()
        monkeypatch.setattr(a.stats, "on_page", on_page)
        return during, await a.stats.view()

    during, after = asyncio.run(run())
    walked = during.nodes[1].figures
    assert "queue:q.00500" in walked
    deleted = {f"queue:q.{i:05d}" for i in range(PAGE_DESTINATIONS - 2, 2 * PAGE_DESTINATIONS)}
    assert not deleted & set(walked)  # deleted before their page: none shown
    assert "queue:q.02500" in walked  # the walk went on past the deleted page
    assert "queue:q.late00000" not in walked  # made after the walk began
    assert "queue:q.late00000" in after.nodes[1].figures


def test_a_node_whose_pages_take_too_long_in_all_is_down() -> None:
    async def run() -> ClusterView:
        a, b = Node("a"), Node("b")
        connect(a, b)
        fill(b, 3 * PAGE_DESTINATIONS)
        a.stats.gather_timeout = 0.0  # each page in time, never all of them
        return await a.stats.view()

    view = asyncio.run(run())
    assert (view.nodes[1].state, view.nodes[1].reason) == (
        DOWN,
        "not all its figures within 0 s",
    )


def test_a_link_lost_while_asking_shows_the_node_down_at_once() -> None:
    async def run() -> ClusterView:
        a, b = Node("a"), Node("b")
        connect(a, b, b_mute=True)
        asking = asyncio.ensure_future(a.stats.view())

        await asyncio.wait_for(b.asked.wait(), 0.4)
        a.links.lost(a.links.links["b"])
        return await asyncio.wait_for(asking, 0.4)  # before the deadline

    view = asyncio.run(run())
    assert view.nodes[1].state == DOWN
    assert "went down" in view.nodes[1].reason


def test_nodes_not_linked_and_nodes_that_left_are_down() -> None:
    async def run() -> ClusterView:
        a = Node("a")
        a.links.members["b"] = a.links.known["b"] = "b:5445"  # a member, not linked yet
        a.links.known["c"] = "c:5445"  # was a member, left
        return await a.stats.view()

    view = asyncio.run(run())
    assert [(n.name, n.state, n.reason) for n in view.nodes] == [
        ("a", UP, ""),
        ("b", DOWN, "not linked"),
        ("c", DOWN, "left the cluster"),
    ]


def test_requests_during_a_round_share_it_and_pages_of_a_walk_reuse_it() -> None:
    async def run() -> None:
        a, b = Node("a"), Node("b")
        connect(a, b)
        first, second = await asyncio.gather(a.stats.view(), a.stats.view())
        assert first is second
        assert b.seen.count(p.PeerStatsFetch) == 1
        assert await a.stats.view(fresh=False) is first
        assert await a.stats.view() is not first

    asyncio.run(run())


def view_of(figures: dict[str, tuple[int, int]]) -> ClusterView:
    return ClusterView(
        "c",
        "a",
        [
            NodeView("a", "a:1", UP, ("b",)),
            NodeView("b", "b:1", UP, ("a",), figures=figures),
            NodeView("c", "c:1", DOWN, reason="not linked"),
        ],
    )


def row(address: str, depth: int, consumers: int = 0) -> dict[str, Any]:
    return {"address": address, "kind": "queue", "depth": depth, "consumers": consumers, "acked": 5}


def test_merge_sums_the_nodes_and_keeps_this_nodes_counters() -> None:
    view = view_of({"queue:x": (4, 1)})
    rows, after = view.merge([row("queue:x", 3, 2)], "", None, 10, lambda a: True)
    assert after is None
    assert rows == [
        {
            "address": "queue:x",
            "kind": "queue",
            "depth": 3,  # this node's, as on a broker alone
            "consumers": 2,
            "acked": 5,
            "nodes": {"a": {"depth": 3, "consumers": 2}, "b": {"depth": 4, "consumers": 1}},
            "total": {"depth": 7, "consumers": 3},
        }
    ]
    assert view.document()["nodes"][2] == {
        "name": "c",
        "address": "c:1",
        "state": "down",
        "links": [],
        "reason": "not linked",
    }


def test_merge_places_the_other_nodes_destinations_in_address_order_within_the_page() -> None:
    view = view_of({"queue:b": (1, 0), "queue:d": (2, 0), "queue:f": (3, 0), "topic:z": (0, 1)})
    local = [row("queue:a", 0), row("queue:c", 0), row("queue:e", 0)]
    # a page that covered up to queue:e: queue:f lies in the next one
    rows, after = view.merge(local, "", "queue:e", 10, lambda a: True)
    assert [r["address"] for r in rows] == ["queue:a", "queue:b", "queue:c", "queue:d", "queue:e"]
    assert after == "queue:e"
    assert rows[1] == {
        "address": "queue:b",
        "kind": "queue",
        **dict.fromkeys(
            (
                "depth",
                "ready",
                "inflight",
                "consumers",
                "enqueued",
                "delivered",
                "acked",
                "expired",
                "dead_lettered",
            ),
            0,
        ),
        "nodes": {"b": {"depth": 1, "consumers": 0}},
        "total": {"depth": 1, "consumers": 0},
    }
    assert view.holds("queue:d")
    assert not view.holds("queue:c")
    # the last page takes what is left, as far as the filter keeps it
    rows, after = view.merge([], "queue:e", None, 10, lambda a: a.startswith("queue:"))
    assert [r["address"] for r in rows] == ["queue:f"]
    assert after is None


def test_merge_keeps_the_page_limit() -> None:
    view = view_of({f"queue:{i:03d}": (1, 0) for i in range(0, 100, 2)})
    local = [row(f"queue:{i:03d}", 1) for i in range(1, 100, 2)]
    seen: list[str] = []
    after = ""
    while True:  # walk as a client does: local pages of 20 from `after`
        page = [r for r in local if r["address"] > after][:20]
        local_next = page[-1]["address"] if len(page) == 20 else None
        rows, next_after = view.merge(
            [dict(r) for r in page], after, local_next, 20, lambda a: True
        )
        assert len(rows) <= 20
        seen += [r["address"] for r in rows]
        if next_after is None:
            break
        after = next_after
    assert seen == [f"queue:{i:03d}" for i in range(100)]


def test_the_other_nodes_destinations_are_filtered_as_this_nodes_are() -> None:
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    mine = Role("mine", {Action.BROWSE: ("queue:mine.*",)})
    broker.access = Access({"alice": User("alice", "pw", ("mine",))}, {"mine": mine})
    alice = connect_user(broker, "alice", "pw")
    view = view_of({"queue:mine.x": (1, 0), "queue:theirs.x": (2, 0), "queue:mine.y": (3, 0)})
    rows, _ = view.merge([], "", None, 10, page_filter(alice, None, ""))
    assert [r["address"] for r in rows] == ["queue:mine.x", "queue:mine.y"]
    rows, _ = view.merge([], "", None, 10, page_filter(alice, "queue:*.y", ""))
    assert [r["address"] for r in rows] == ["queue:mine.y"]
    rows, _ = view.merge([], "", None, 10, page_filter(alice, "queue:mine.x", ""))
    assert [r["address"] for r in rows] == ["queue:mine.x"]
    rows, _ = view.merge([], "", None, 10, page_filter(alice, None, "X"))
    assert [r["address"] for r in rows] == ["queue:mine.x"]
