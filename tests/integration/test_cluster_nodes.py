"""A cluster of ``chute serve`` nodes on one real etcd: distributed queues and topics over
the links between nodes, seen through real clients (the native client, stomp.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.client.blocking import BlockingConnection, BlockingConsumer, connect
from chute.client.received import Received
from tests.integration.conftest import ChuteServer, start_server
from tests.integration.etcd_fixture import EtcdProcess, start_etcd

CLUSTER = "t"
DEADLINE = 30.0


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    process = start_etcd(tmp_path)
    yield process
    process.kill()


class Nodes:
    """The nodes started for one test (stopped at its end)."""

    def __init__(self, tmp_path: Path, etcd: EtcdProcess) -> None:
        self.tmp_path = tmp_path
        self.etcd = etcd
        self.started: dict[str, ChuteServer] = {}
        self.config = tmp_path / "cluster.toml"
        self.config.write_text("[cluster]\nttl = 2\n")

    @property
    def url(self) -> str:
        return f"etcd://{self.etcd.address}/{CLUSTER}"

    def start(self, name: str, *extra: str) -> ChuteServer:
        server = start_server(
            self.tmp_path,
            "--config",
            str(self.config),
            "--cluster",
            self.url,
            "--node",
            name,
            *extra,
            data_dir=self.tmp_path / f"data-{name}",
        )
        self.started[name] = server
        return server

    def start_linked(self, *names: str) -> list[ChuteServer]:
        """Start ``names`` and wait until every pair is linked."""
        servers = [self.start(name) for name in names]
        for server, name in zip(servers, names, strict=True):
            for other in names:
                if other != name:
                    server.wait_for_line(f"linked to node {other}", timeout=DEADLINE)
        return servers

    def stop(self) -> None:
        for server in self.started.values():
            if server.process.poll() is None:
                server.stop()


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def send(server: ChuteServer, address: str, bodies: list[str]) -> None:
    with connect(server.url) as conn, conn.session() as session:
        for body in bodies:
            session.send(address, body)


def until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def take(consumer: BlockingConsumer, count: int, timeout: float = DEADLINE) -> list[Received]:
    """``count`` messages, each acked (fails past ``timeout``)."""
    got: list[Received] = []
    end = time.monotonic() + timeout
    while len(got) < count:
        left = end - time.monotonic()
        assert left > 0, f"got {len(got)} of {count} messages"
        item = consumer.receive(timeout=left)
        if item is not None:
            item.ack()
            got.append(item)
    return got


def nothing_more(consumer: BlockingConsumer, within: float = 0.5) -> None:
    extra = consumer.receive(timeout=within)
    assert extra is None, f"one more message: {extra.body if extra else None!r}"


def bodies(items: list[Received]) -> list[str]:
    return [bytes(r.body).decode() if isinstance(r.body, bytes) else str(r.body) for r in items]


def open_consumer(
    server: ChuteServer, address: str, **kw: Any
) -> tuple[BlockingConnection, BlockingConsumer]:
    conn = connect(server.url)
    session = conn.session(ack="individual")
    return conn, session.consumer(address, **kw)


# -- queues --------------------------------------------------------------------------


def test_a_producer_on_one_node_and_a_consumer_on_another_get_every_message_once(
    nodes: Nodes,
) -> None:
    a, b, _c = nodes.start_linked("a", "b", "c")
    conn, consumer = open_consumer(b, "queue:work")
    with conn:
        sent = [f"m{i}" for i in range(200)]
        send(a, "queue:work", sent)
        got = take(consumer, len(sent))
        assert sorted(bodies(got)) == sorted(sent)
        assert not any(r.redelivered for r in got)
        nothing_more(consumer)
