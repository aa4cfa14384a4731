"""A stream with partitions in a cluster: each partition has its own home, spread over the
nodes (agreed in real etcd, or by the fixed rule of ``chute serve --nodes 2``); sends on
any node reach the partition their key picks, and a reader of the whole stream on any
node gets every message, at the offsets its partition's home gave it."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute.cluster.homes import FixedHomes
from tests.integration.conftest import ChuteServer
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.test_cluster_nodes import CLUSTER, DEADLINE, Nodes
from tests.integration.test_serve_nodes import start_nodes

S = "stream:orders"
PARTITIONS = 4
TABLE = f'[destinations."{S}"]\npartitions = {PARTITIONS}\n'

Got = list[tuple[int, int, str]]
"""What a reader got: (partition, offset, body) per message."""


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    made.config.write_text(made.config.read_text() + TABLE)
    yield made
    made.stop()


def send(url: str, prefix: str, count: int) -> dict[str, str | None]:
    """``count`` messages, two in three with a key of six; each confirmed stored."""
    keys: dict[str, str | None] = {}
    with chute.connect(url) as conn:
        session = conn.session(confirm_window=100)
        for i in range(count):
            key = f"k{i % 6}" if i % 3 else None
            body = f"{prefix}{i:03d}"
            session.send(S, body, key=key)
            keys[body] = key
        session.flush()
    return keys


def read(url: str, address: str, count: int) -> Got:
    got: Got = []
    with chute.connect(url) as conn:
        session = conn.session("client")
        with session.consumer(address, offset="first", prefetch=200) as consumer:
            end = time.monotonic() + DEADLINE
            while len(got) < count:
                received = consumer.receive(timeout=max(0.0, end - time.monotonic()))
                assert received is not None, f"only {len(got)} of {count} came on {url}"
                got.append((received.partition, received.offset, received.text))
                received.ack()
    return got


def check(got: Got, keys: dict[str, str | None]) -> dict[int, list[tuple[int, str]]]:
    """Every message once, a key's in its partition, each partition's offsets 1, 2, ..."""
    assert sorted(body for *_, body in got) == sorted(keys)
    by_partition: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for partition, offset, body in got:
        by_partition[partition].append((offset, body))
        key = keys[body]
        if key is not None:
            assert partition == zlib.crc32(key.encode()) % PARTITIONS, body
    for held in by_partition.values():
        assert [offset for offset, _ in held] == list(range(1, len(held) + 1))
    return by_partition


def homes_in_etcd(etcd: EtcdProcess) -> list[str]:
    found = []
    for partition in range(PARTITIONS):
        key = base64.b64encode(f"/{CLUSTER}/streams/orders/{partition}".encode()).decode()
        request = urllib.request.Request(
            f"http://{etcd.address}/v3/kv/range", json.dumps({"key": key}).encode()
        )
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - http only
            kvs = json.loads(answer.read()).get("kvs", [])
        found.append(base64.b64decode(kvs[0]["value"]).decode() if kvs else "")
    return found


def test_partitions_spread_over_two_nodes_with_etcd(nodes: Nodes, etcd: EtcdProcess) -> None:
    a, b = nodes.start_linked("a", "b")
    keys = send(a.url, "a", 120)
    keys |= send(b.url, "b", 60)
    assert homes_in_etcd(etcd) == ["a", "b", "a", "b"]
    on_a = read(a.url, S, 180)
    on_b = read(b.url, S, 180)
    by_partition = check(on_a, keys)
    assert check(on_b, keys) == by_partition  # the same offsets on both nodes
    # one partition, read on the node that is not its home
    one = read(a.url, f"{S}#1", len(by_partition[1]))
    assert [(offset, body) for _, offset, body in one] == by_partition[1]


@pytest.fixture
def fixed(tmp_path: Path) -> Iterator[ChuteServer]:
    config = tmp_path / "chute.toml"
    config.write_text(TABLE)
    running = start_nodes(tmp_path, 2, "--config", str(config))
    running.linked()
    running.server.urls = [running.url(0), running.url(1)]  # type: ignore[attr-defined]
    yield running.server
    if running.server.process.poll() is None:
        running.server.stop()


def test_partitions_spread_over_the_nodes_of_serve_nodes_2(fixed: ChuteServer) -> None:
    one, two = fixed.urls  # type: ignore[attr-defined]
    keys = send(one, "x", 90)
    keys |= send(two, "y", 90)
    by_partition = check(read(one, S, 180), keys)
    assert check(read(two, S, 180), keys) == by_partition
    assert set(by_partition) == set(range(PARTITIONS))
    # the fixed rule puts partitions 0 and 2 on one node, 1 and 3 on the other
    rule = FixedHomes(["node-0", "node-1"])
    homes = [rule.known(S, partition) for partition in range(PARTITIONS)]
    assert homes[0] == homes[2] != homes[1] == homes[3]
