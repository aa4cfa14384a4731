"""A distributed queue at the depth users reach: a backlog of 100,000 persistent messages,
paged to disk on the node they were sent to, handed over to a consumer that joins on
another node, every one once and none lost on the way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.client.blocking import connect
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.test_cluster_nodes import Nodes, until
from tests.integration.test_cluster_view import by_address, stat_json

DEEP = 100_000
BODY = 1024
TIMEOUT = 180.0


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    # a small memory budget: the backlog pages to disk on the node it waits on
    made.config.write_text('[server]\nmax_memory = "4MB"\n\n[cluster]\nttl = 2\n')
    yield made
    made.stop()


def _body(i: int) -> bytes:
    return b"%08d" % i + b"x" * (BODY - 8)


def test_a_deep_paged_backlog_is_handed_over_once_to_a_consumer_on_another_node(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as conn, conn.session(confirm_window=256) as session:
        for i in range(DEEP):
            session.send("queue:deep", _body(i))
        session.flush()  # every one confirmed: stored on a
    waiting = by_address(stat_json(b))["queue:deep"]
    assert waiting["nodes"]["a"]["depth"] == DEEP  # seen from b: the backlog waits on a
    assert waiting["total"]["depth"] == DEEP
    seen = bytearray(DEEP)
    redelivered = 0
    end = time.monotonic() + TIMEOUT
    with connect(b.url) as conn, conn.session(ack="auto") as session:
        consumer = session.consumer("queue:deep", prefetch=1000)
        got = 0
        while got < DEEP:
            left = end - time.monotonic()
            assert left > 0, f"got {got} of {DEEP} messages on b"
            item = consumer.receive(timeout=left)
            if item is None:
                continue
            body = bytes(item.body)
            assert len(body) == BODY
            index = int(body[:8])
            assert not seen[index], f"message {index} came twice"
            seen[index] = 1
            redelivered += item.redelivered
            got += 1
        assert consumer.receive(timeout=0.5) is None  # nothing more: each came once
    assert redelivered == 0

    def drained() -> bool:  # a removes its copies once b confirmed them stored
        total = by_address(stat_json(a))["queue:deep"]["total"]
        return bool(total["depth"] == 0)

    until(drained, "queue:deep empty on both nodes")


def test_a_thousand_queues_each_hand_over_to_their_consumer_on_another_node(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    queues = [f"queue:many-{i}" for i in range(1000)]
    with connect(a.url) as conn, conn.session(confirm_window=256) as session:
        for address in queues:
            for n in range(3):
                session.send(address, f"{address}/{n}".encode())
        session.flush()
    got: dict[str, list[str]] = {address: [] for address in queues}
    end = time.monotonic() + TIMEOUT
    with connect(b.url) as conn, conn.session(ack="auto") as session:
        consumers = [(address, session.consumer(address, prefetch=10)) for address in queues]
        for address, consumer in consumers:
            while len(got[address]) < 3:
                left = end - time.monotonic()
                assert left > 0, f"{address}: got {got[address]}"
                item = consumer.receive(timeout=left)
                if item is not None:
                    got[address].append(bytes(item.body).decode())
        for address, consumer in consumers[:50]:
            assert consumer.receive(timeout=0.01) is None, f"{address}: one more"
    assert all(got[address] == [f"{address}/{n}" for n in range(3)] for address in queues)
