"""The in-memory cluster of :mod:`.mesh` with streams: each node's ClusterStreams over a
port that carries stream reads and records on the same links, and homes given by the
test (``Mesh.homes``: a stream's home known at once; one not listed waits until the
test calls :meth:`StreamMesh.agree`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chute.core.model.consumer import AckMode
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.core.rules.cluster_streams import ClusterStreams
from chute.message import Message

from ..helpers import Recorder
from .mesh import Mesh, Node, _Port, _runs


def _copy(m: Message) -> Message:
    return Message(
        m.body,
        id=m.id,
        priority=m.priority,
        timestamp=m.timestamp,
        expiration=m.expiration,
        persistent=m.persistent,
        properties=dict(m.properties),
    )


class _StreamPort(_Port):
    mesh: StreamMesh

    def want_home(self, address: str) -> str | None:
        self.mesh.asked.append((self.node, address))
        return self.mesh.homes.get(address)

    def send_stream_read(self, peer: str, address: str, start: int, limit: int) -> None:
        self._put(peer, "stream_read", (address, start, limit))

    def send_stream_records(
        self, peer: str, address: str, following: int, records: Sequence[tuple[int, Message]]
    ) -> None:
        copied = [(offset, _copy(m)) for offset, m in records]
        self._put(peer, "stream_records", (address, following, copied))


class StreamNode(Node):
    mesh: StreamMesh

    def start(self) -> None:
        self.broker = Broker(self.store, self.settings, clock=self.mesh.clock)
        self.broker.recover()
        port = _StreamPort(self.mesh, self.name)
        self.cluster = Cluster(self.broker, port, node=self.name, run=f"run{next(_runs)}")
        self.streams = ClusterStreams(self.broker, self.cluster, port, node=self.name)
        self.streams.recover()
        self.cluster.recover()
        self.connection = BrokerConnection(self.broker)
        self.session = self.connection.session(AckMode.CLIENT)

    def read(self, address: str, start: int = 1) -> list[tuple[int, str]]:
        """Everything stream ``address`` holds here from ``start``: (offset, body)."""
        stream = self.broker.streams[address]
        _, entries = stream.read(start, stream.head)
        return [(e.seq, e.message.body.decode()) for e in entries]

    def reader(self, address: str, offset: str = "first") -> Recorder:
        """What a consumer reading stream ``address`` from ``offset`` gets."""
        recorder = Recorder()
        self.session.consumer(next(self.mesh.ids), address, recorder, prefetch=1000, offset=offset)
        return recorder


class StreamMesh(Mesh):
    def __init__(self, *names: str, homes: dict[str, str] | None = None, **kw: Any) -> None:
        self.homes = dict(homes or {})
        self.asked: list[tuple[str, str]] = []
        super().__init__(*names, **kw)

    def _node(self, name: str, settings: Any) -> Node:
        return StreamNode(self, name, settings)

    def __getitem__(self, name: str) -> StreamNode:
        node = self.nodes[name]
        assert isinstance(node, StreamNode)
        return node

    def agree(self, address: str, home: str) -> None:
        """The home of ``address`` is agreed: every node that asked is told."""
        self.homes[address] = home
        for node in self.nodes.values():
            assert isinstance(node, StreamNode)
            if any(a == address for _, a in self.asked):
                node.streams.home_known(address, home)
        self.pump()

    def connect(self, a: str, b: str) -> None:
        self.up.add(frozenset((a, b)))
        for x, y in ((a, b), (b, a)):
            node = self.nodes[x]
            node.cluster.link_up(y)
            if isinstance(node, StreamNode):
                node.streams.link_up(y)
        self.pump()

    def cut(self, a: str, b: str) -> None:
        super().cut(a, b)
        for x, y in ((a, b), (b, a)):
            node = self.nodes[x]
            if isinstance(node, StreamNode):
                node.streams.link_down(y)

    def deliver(self, src: str, dst: str, what: str, arg: object) -> bool:
        node = self.nodes[dst]
        assert isinstance(node, StreamNode)
        if what == "stream_read":
            assert isinstance(arg, tuple)
            node.streams.on_read(src, *arg)
            return True
        if what == "stream_records":
            assert isinstance(arg, tuple)
            node.streams.on_records(src, *arg)
            return True
        return False
