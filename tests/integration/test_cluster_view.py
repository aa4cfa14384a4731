"""Seeing the cluster from any node: ``chute stat``, the admin API and ``/metrics`` of real
``chute serve`` nodes on one real etcd show every node, its state and links, and each
destination's depth per node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from chute.admin.openapi import document
from chute.client.blocking import connect
from chute.server.cluster_stats import ANSWER_TIMEOUT
from tests.integration.conftest import ChuteServer, free_port, start_server
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.freeze import freeze, thaw
from tests.integration.test_cluster_nodes import DEADLINE, Nodes, send, until


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def stat_json(server: ChuteServer, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", *args, "--json", "--url", server.url],
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
        assert orders["total"] == {"depth": 4, "consumers": 0}
        assert orders["depth"] == {"a": 3, "b": 1, "c": 0}[name]  # the node's own
        only_b = rows["queue:only-b"]
        assert only_b["nodes"]["b"] == {"depth": 2, "consumers": 0}
        assert only_b["total"] == {"depth": 2, "consumers": 0}
        named = stat_json(server, "queue:only-*")  # a pattern keeps the other nodes' too
        assert [d["address"] for d in named["destinations"]] == ["queue:only-b"]
    table = subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", "--url", c.url],
        capture_output=True,
        timeout=DEADLINE,
        check=True,
        text=True,
    ).stdout
    assert "cluster t, seen from node c (*)" in table
    assert "  node b" in table


def test_a_consumer_shows_on_its_node(nodes: Nodes) -> None:
    a, b = nodes.start_linked("a", "b")
    with connect(b.url) as conn, conn.session() as session:
        session.consumer("queue:work")
        until(
            lambda: (
                by_address(stat_json(a)).get("queue:work", {}).get("total", {}).get("consumers")
                == 1
            ),
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


def start_with_http(nodes: Nodes, *names: str) -> dict[str, str]:
    """Start ``names`` with their HTTP listeners, linked pairwise: each one's base URL."""
    bases: dict[str, str] = {}
    for name in names:
        port = free_port()
        nodes.start(name, "--http-port", str(port))
        bases[name] = f"http://127.0.0.1:{port}"
    for name in names:
        for other in names:
            if other != name:
                nodes.started[name].wait_for_line(f"linked to node {other}", timeout=DEADLINE)
    return bases


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as answer:  # noqa: S310
            body = answer.read().decode()
            status = answer.status
            kind = answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    return status, json.loads(body) if "json" in kind else body


def _json_schema(schema: Any) -> Any:
    """OpenAPI 3.0's schema as JSON Schema: ``nullable`` becomes a "null" type."""
    if isinstance(schema, list):
        return [_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _json_schema(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable") and "type" in schema:
        out["type"] = [schema["type"], "null"]
    return out


def conforms(instance: Any, schema: str) -> None:
    """``instance`` is what the admin API's own document says of ``schema`` (with the
    JSON Schema validator schemathesis brings)."""
    components = _json_schema(document()["components"])
    root = {"$ref": f"#/components/schemas/{schema}", "components": components}
    jsonschema_rs.validate(root, instance)


def test_the_admin_api_shows_the_cluster_from_any_node(nodes: Nodes) -> None:
    bases = start_with_http(nodes, "a", "b")
    send(nodes.started["a"], "queue:orders", ["1", "2"])
    send(nodes.started["b"], "queue:orders", ["3"])
    send(nodes.started["b"], "queue:only-b", ["x"])
    for name, base in bases.items():
        status, cluster = get(f"{base}/api/cluster")
        assert status == 200
        conforms(cluster, "Cluster")
        assert cluster["node"] == name
        assert [(n["name"], n["state"]) for n in cluster["nodes"]] == [("a", "up"), ("b", "up")]
        status, page = get(f"{base}/api/destinations?contains=o")
        assert status == 200
        conforms(page, "DestinationPage")
        rows = by_address(page)
        assert rows["queue:orders"]["total"] == {"depth": 3, "consumers": 0}
        assert rows["queue:orders"]["nodes"] == {
            "a": {"depth": 2, "consumers": 0},
            "b": {"depth": 1, "consumers": 0},
        }
        assert rows["queue:only-b"]["nodes"] == {"b": {"depth": 1, "consumers": 0}}
        status, detail = get(f"{base}/api/destinations/queue:only-b")
        assert status == 200
        conforms(detail, "DestinationDetail")
        assert detail["nodes"] == {"b": {"depth": 1, "consumers": 0}}
    status, error = get(f"{bases['a']}/api/destinations/queue:nowhere")
    assert (status, error["error"]) == (404, "not-found")


def test_a_broker_alone_has_no_cluster_resource(tmp_path: Path) -> None:
    port = free_port()
    server = start_server(tmp_path, "--http-port", str(port))
    try:
        status, error = get(f"http://127.0.0.1:{port}/api/cluster")
        assert (status, error["error"]) == (404, "not-found")
        send(server, "queue:x", ["1"])
        status, page = get(f"http://127.0.0.1:{port}/api/destinations")
        assert "nodes" not in by_address(page)["queue:x"]
        status, text = get(f"http://127.0.0.1:{port}/metrics")
        assert 'node="' not in text
        assert "chute_cluster_peer_up" not in text
    finally:
        server.stop()


def test_metrics_carry_the_node_and_the_other_nodes_state(nodes: Nodes) -> None:
    bases = start_with_http(nodes, "a", "b", "c")
    send(nodes.started["b"], "queue:orders", ["1", "2"])
    status, text = get(f"{bases['b']}/metrics")
    assert status == 200
    samples = [line for line in text.splitlines() if line.startswith("chute_")]
    assert samples
    assert all('node="b"' in line for line in samples)
    assert (
        'chute_destination_messages{address="queue:orders",kind="queue",node="b",'
        'subscription=""} 2.0' in samples
    )
    assert 'chute_cluster_peer_up{node="b",peer="a"} 1.0' in samples
    assert 'chute_cluster_peer_up{node="b",peer="c"} 1.0' in samples
    _, on_a = get(f"{bases['a']}/metrics")  # a's own figures only: b's queue is not there
    assert 'address="queue:orders"' not in on_a
    nodes.started["c"].stop(signal.SIGKILL)

    def c_down() -> bool:
        _, now = get(f"{bases['b']}/metrics")
        return 'chute_cluster_peer_up{node="b",peer="c"} 0.0' in now

    until(c_down, "c shown down in b's metrics")


def test_a_node_that_does_not_answer_is_shown_down_without_holding_the_request(
    nodes: Nodes,
) -> None:
    nodes.config.write_text("[cluster]\nttl = 60\n")  # c stays a member while stopped
    a, b, c = nodes.start_linked("a", "b", "c")
    send(b, "queue:on-b", ["1"])
    freeze(c.process)  # its links stay open; it answers nothing
    try:
        started = time.monotonic()
        stats = stat_json(a)
        took = time.monotonic() - started
        assert states(stats) == {"a": "up", "b": "up", "c": "down"}
        down = next(n for n in stats["cluster"]["nodes"] if n["name"] == "c")
        assert down["reason"] == f"no answer within {ANSWER_TIMEOUT:g} s"
        assert by_address(stats)["queue:on-b"]["nodes"]["b"]["depth"] == 1  # b's answer kept
        assert took < DEADLINE / 2, f"stat took {took:.1f} s"
    finally:
        thaw(c.process)
    until(lambda: states(stat_json(a))["c"] == "up", "c up again once it answers")
