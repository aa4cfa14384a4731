"""Seeing the cluster from any node: ``chute stat``, the admin API and ``/metrics`` of real
``chute serve`` nodes on one real etcd show every node, its state and links, and each
destination's depth per node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.client.blocking import connect
from tests.integration.conftest import ChuteServer
from tests.integration.etcd_fixture import EtcdProcess, start_etcd
from tests.integration.test_cluster_nodes import DEADLINE, Nodes, send, until


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    process = start_etcd(tmp_path)
    yield process
    process.kill()


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def stat_json(server: ChuteServer) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", "--json", "--url", server.url],
        capture_output=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def by_address(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["address"]: d for d in stats["destinations"]}


def states(stats: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n["state"] for n in stats["cluster"]["nodes"]}


def test_stat_from_any_node_shows_every_node_and_the_depth_on_each(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    send(a, "queue:orders", ["1", "2", "3"])
    send(b, "queue:orders", ["4"])
    send(b, "queue:only-b", ["x", "y"])
    for server, name in ((a, "a"), (b, "b"), (c, "c")):
        stats = stat_json(server)
        cluster = stats["cluster"]
        assert cluster["name"] == "t"
        assert cluster["node"] == name
        assert [n["name"] for n in cluster["nodes"]] == ["a", "b", "c"]
        assert states(stats) == {"a": "up", "b": "up", "c": "up"}
        for node in cluster["nodes"]:
            assert node["address"].endswith(f":{nodes.started[node['name']].port}")
            assert node["links"] == sorted({"a", "b", "c"} - {node["name"]})
        rows = by_address(stats)
        orders = rows["queue:orders"]
        assert orders["nodes"]["a"] == {"depth": 3, "consumers": 0}
        assert orders["nodes"]["b"] == {"depth": 1, "consumers": 0}
        assert orders["depth"] == 4
        only_b = rows["queue:only-b"]
        assert only_b["nodes"]["b"] == {"depth": 2, "consumers": 0}
        assert only_b["depth"] == 2


def test_a_consumer_shows_on_its_node(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(b.url) as conn, conn.session() as session:
        session.consumer("queue:work")
        until(
            lambda: by_address(stat_json(a)).get("queue:work", {}).get("consumers") == 1,
            "the consumer on b seen from a",
        )
        row = by_address(stat_json(a))["queue:work"]
        assert row["nodes"]["b"]["consumers"] == 1
        assert row["nodes"]["a"]["consumers"] == 0


def test_a_killed_node_shows_down(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    send(c, "queue:on-c", ["1"])
    assert "queue:on-c" in by_address(stat_json(a))
    c.stop(signal.SIGKILL)
    until(lambda: states(stat_json(a))["c"] == "down", "c shown down from a")
    stats = stat_json(b)
    assert states(stats) == {"a": "up", "b": "up", "c": "down"}
    down = next(n for n in stats["cluster"]["nodes"] if n["name"] == "c")
    assert down["reason"]
    assert down["links"] == []
    a_row = next(n for n in stats["cluster"]["nodes"] if n["name"] == "a")
    assert a_row["links"] == ["b"]
    assert "queue:on-c" not in by_address(stats)  # what a down node holds is not known


def test_thousands_of_destinations_answer(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    count = 3000
    with connect(b.url) as conn, conn.session() as session:
        for i in range(count):
            session.send(f"queue:many.{i:05d}", "x")
    stats = stat_json(a)
    rows = by_address(stats)
    many = [r for address, r in rows.items() if address.startswith("queue:many.")]
    assert len(many) == count
    assert all(r["nodes"]["b"] == {"depth": 1, "consumers": 0} for r in many)
    assert states(stats) == {"a": "up", "b": "up"}
