"""An in-memory cluster for the core's unit tests: nodes (a Broker and its Cluster over a
MemoryStore each) joined by links that carry what the PeerPort sends, in order, until
the test pumps them. A link can be cut (what is on it is lost), a node restarted over
its store (what a crash and a restart look like: a MemoryStore keeps everything it was
told, so every record counts as durable; a journal is closed and opened again).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import count
from pathlib import Path
from typing import Any

from chute.core.model.cluster import Demand, Handover, HandoverKey, KeyPairs
from chute.core.model.consumer import AckMode, BrokerConsumer
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.model.store import Store
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.core.rules.cluster_window import DEFAULT_LINK_BYTES, DEFAULT_LINK_WINDOW
from chute.message import Message
from chute.store.journal import Journal
from chute.store.memory import MemoryStore

from ..helpers import FakeClock, Recorder

Call = tuple[str, str, str, object]  # (from, to, what, argument)

_runs = count(1)


class _Port:
    def __init__(self, mesh: Mesh, node: str) -> None:
        self.mesh = mesh
        self.node = node

    def _put(self, peer: str, what: str, arg: object) -> None:
        if self.mesh.linked(self.node, peer):
            self.mesh.wire.append((self.node, peer, what, arg))
            self.mesh.sent.append((self.node, peer, what, arg))

    def send_handover(self, peer: str, handover: Handover) -> None:
        # a copy, as bytes on a wire would give: the two brokers never share a message
        self._put(peer, "handover", _copied(handover))

    def send_confirm(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._put(peer, "confirm", list(keys))

    def send_refuse(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._put(peer, "refuse", list(keys))

    def send_release(self, peer: str, keys: KeyPairs) -> None:
        self._put(peer, "release", list(keys))

    def send_resume(
        self, peer: str, keys: Sequence[HandoverKey], demands: Sequence[Demand]
    ) -> None:
        self._put(peer, "resume", (list(keys), list(demands)))

    def send_demand(self, peer: str, demand: Demand) -> None:
        self._put(peer, "demand", demand)


def _copied(handover: Handover) -> Handover:
    m = handover.message
    message = Message(
        m.body,
        id=m.id,
        priority=m.priority,
        timestamp=m.timestamp,
        expiration=m.expiration,
        persistent=m.persistent,
        properties=dict(m.properties),
    )
    return Handover(
        handover.key, handover.address, message, handover.delivery_count, handover.redelivered
    )


class Node:
    def __init__(
        self, mesh: Mesh, name: str, settings: dict[str, DestinationSettings] | None
    ) -> None:
        self.link_window = mesh.link_window
        self.link_bytes = mesh.link_bytes
        self.mesh = mesh
        self.name = name
        self.store: Store = self._open()
        self.settings = SettingsResolver(settings or {})
        self.start()

    def _open(self) -> Store:
        if self.mesh.directory is None:
            return MemoryStore()
        return Journal(self.mesh.directory / self.name, segment_size=64 * 1024)

    @property
    def memory(self) -> MemoryStore:
        """The node's store, when it is a MemoryStore (to look at what it holds)."""
        if not isinstance(self.store, MemoryStore):
            raise TypeError("this node keeps a journal")
        return self.store

    def restart(self) -> None:
        """Start again over the store (a journal is closed and opened again)."""
        if self.mesh.directory is not None:
            self.store.close()
            self.store = self._open()
        self.start()

    def start(self) -> None:
        self.broker = Broker(self.store, self.settings, clock=self.mesh.clock)
        self.broker.recover()
        self.cluster = Cluster(
            self.broker,
            _Port(self.mesh, self.name),
            node=self.name,
            run=f"run{next(_runs)}",
            link_window=self.link_window,
            link_bytes=self.link_bytes,
        )
        self.cluster.recover()
        self.connection = BrokerConnection(self.broker)
        self.session = self.connection.session(AckMode.CLIENT)

    def send(self, address: str, body: str, *, ttl: int = 0, **fields: Any) -> None:
        self.session.send(address, Message.create(body.encode(), **fields), ttl=ttl)

    def consume(
        self,
        address: str,
        *,
        prefetch: int = 100,
        selector: str | None = None,
        subscription: str | None = None,
    ) -> tuple[BrokerConsumer, Recorder]:
        """A consumer (with ``subscription``, a durable subscription's)."""
        recorder = Recorder()
        consumer = self.session.consumer(
            next(self.mesh.ids),
            address,
            recorder,
            prefetch=prefetch,
            selector=selector,
            subscription=subscription,
            durable=subscription is not None,
            shared=subscription is not None,
        )
        return consumer, recorder

    def ack_all(self, consumer: BrokerConsumer, recorder: Recorder) -> list[str]:
        """Ack everything ``recorder`` got; the bodies, in order."""
        got = recorder.take()
        for entry in got:
            self.session.ack(consumer, entry.seq, cumulative=False)
        return [e.message.body.decode() for e in got]

    def credit(self, consumer: BrokerConsumer, n: int) -> None:
        BrokerSession.add_credit(consumer, n)


class Mesh:
    """Nodes and the links between them (all up once joined, until cut)."""

    def __init__(
        self,
        *names: str,
        settings: dict[str, DestinationSettings] | None = None,
        directory: Path | None = None,
        link_window: int = DEFAULT_LINK_WINDOW,
        link_bytes: int = DEFAULT_LINK_BYTES,
    ) -> None:
        """``directory``: each node keeps a journal under it (else a MemoryStore);
        ``link_window``, ``link_bytes``: each link's bounds on unconfirmed hand-overs."""
        self.directory = directory
        self.link_window = link_window
        self.link_bytes = link_bytes
        self.clock = FakeClock()
        self.ids = count(1)
        self.wire: deque[Call] = deque()
        self.sent: list[Call] = []
        self.up: set[frozenset[str]] = set()
        self.batches = True  # consecutive hand-overs on a link arrive as one batch
        self.handover_batches: list[int] = []  # the size of each batch carried
        self.nodes = {name: self._node(name, settings) for name in names}
        for a in names:
            for b in names:
                if a < b:
                    self.connect(a, b)

    def _node(self, name: str, settings: dict[str, DestinationSettings] | None) -> Node:
        return Node(self, name, settings)

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def linked(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.up

    def connect(self, a: str, b: str) -> None:
        self.up.add(frozenset((a, b)))
        self.nodes[a].cluster.link_up(b)
        self.nodes[b].cluster.link_up(a)
        self.pump()

    def cut(self, a: str, b: str) -> None:
        """The link is lost, with what was on it."""
        self.up.discard(frozenset((a, b)))
        self.wire = deque(c for c in self.wire if {c[0], c[1]} != {a, b})
        self.nodes[a].cluster.link_down(b)
        self.nodes[b].cluster.link_down(a)

    def crash(self, name: str) -> None:
        """``name`` stops (its links with it, and what was on them) and starts again over
        its store; the links come up again."""
        others = [n for n in self.nodes if n != name and self.linked(name, n)]
        for other in others:
            self.cut(name, other)
        self.nodes[name].restart()
        for other in others:
            self.connect(name, other)

    def pump(self, until: Callable[[], bool] | None = None) -> None:
        """Carry what the links hold until they are quiet (or ``until()``); hand-overs one
        after the other on a link go as one batch (:attr:`batches`)."""
        steps = 0
        while self.wire and not (until is not None and until()):
            steps += 1
            assert steps < 100_000, "the links never went quiet"
            src, dst, what, arg = self.wire.popleft()
            cluster = self.nodes[dst].cluster
            if self.deliver(src, dst, what, arg):
                continue
            if what == "handover":
                # hand-overs one after the other on a link arrive together, as the links
                # send them (one packet of those that waited for the same sync)
                assert isinstance(arg, Handover)
                batch = [arg]
                while self.batches and self.wire and self.wire[0][:3] == (src, dst, what):
                    following = self.wire.popleft()[3]
                    assert isinstance(following, Handover)
                    batch.append(following)
                self.handover_batches.append(len(batch))
                cluster.on_handovers(src, batch)
            elif what == "demand":
                assert isinstance(arg, Demand)
                cluster.on_demand(src, arg)
            elif what == "resume":
                assert isinstance(arg, tuple)
                cluster.on_resume(src, *arg)
            else:
                assert isinstance(arg, list)
                getattr(cluster, f"on_{what}")(src, arg)

    def deliver(self, src: str, dst: str, what: str, arg: object) -> bool:
        """Carry a call of a kind a subclass adds; False if it is not one."""
        return False

    def count(self, what: str) -> int:
        return sum(1 for c in self.sent if c[2] == what)

    def close(self) -> None:
        for node in self.nodes.values():
            node.store.close()
