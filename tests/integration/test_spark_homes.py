"""The Spark source in a cluster reads each stream partition straight from its home node
(docs/spark.md, "Partitions and homes"): the driver learns the homes from the node its
URL names, plans one task per partition with its home's address, and each task reads
there; a home that cannot be reached, that does not hold the task's range, or that is
lost in the middle of a read, is read around through the URL's node. Two real nodes on
real etcd; the URL reaches its node through a relay that counts the connections made
through it. The admin API names each partition's home. The reader's own planning and
reading, as Spark's driver and executors call them (no JVM needed)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest

import chute
from tests.integration.conftest import free_port, start_server
from tests.integration.relay import Relay
from tests.integration.test_cluster_nodes import DEADLINE, Nodes
from tests.integration.test_cluster_stream_partitions import PARTITIONS, S, send
from tests.integration.test_cluster_stream_partitions import nodes as nodes  # noqa: PLC0414
from tests.integration.test_cluster_view import conforms, get, start_with_http

pytestmark = [pytest.mark.spark(lane="cluster"), pytest.mark.timeout(120)]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from chute.spark.options import ChuteOptions  # noqa: E402
from chute.spark.streams import DataLoss, StreamBatchReader, StreamRange  # noqa: E402


def addresses(partitions: int) -> list[str]:
    return [S if p == 0 else f"{S}#{p}" for p in range(partitions)]


def caught_up(url: str, count: int) -> None:
    """Wait until the node at ``url`` holds ``count`` messages over the partitions (its
    copies of the partitions homed elsewhere follow their homes)."""
    end = time.monotonic() + DEADLINE
    with chute.connect(url) as conn:
        while sum(conn.cursor_open(a)[1] - 1 for a in addresses(PARTITIONS)) < count:
            assert time.monotonic() < end, "the node's copies did not catch up"
            time.sleep(0.05)  # polling a copy catching up, with a deadline


def read(reader: StreamBatchReader, parts: list[StreamRange]) -> list[bytes]:
    """Every body the tasks of ``parts`` read, as executors run them."""
    return [
        body
        for part in parts
        for batch in reader.read(part)
        for body in batch.column("body").to_pylist()
    ]


def test_each_task_reads_its_partition_on_its_home_and_falls_back_to_the_url(
    nodes: Nodes, tmp_path: Path
) -> None:
    bases = start_with_http(nodes, "a", "b")
    a, b = nodes.started["a"], nodes.started["b"]
    keys = send(a.url, "a", 120)
    keys |= send(b.url, "b", 80)
    caught_up(a.url, len(keys))
    # the homes, as the admin API shows them from either node (chute stat alike)
    for base in bases.values():
        status, page = get(f"{base}/api/destinations?pattern=stream:*")
        assert status == 200
        assert {r["address"]: r.get("home") for r in page["destinations"]} == dict(
            zip(addresses(4), "abab", strict=True)
        )
        for row in page["destinations"]:
            conforms(row, "Destination")
        status, one = get(f"{base}/api/destinations/{quote(S + '#1')}")
        assert (status, one["home"]) == (200, "b")
    relay = Relay(("127.0.0.1", a.port))  # the URL's node, its connections counted
    try:
        options_given = {"url": f"chute://{relay.address}", "destination": S}
        options = ChuteOptions.parse(options_given)
        reader = StreamBatchReader(options)
        parts = [p for p in reader.partitions() if isinstance(p, StreamRange)]
        # a task per partition at least, each on its home: the partitions spread a,
        # b, a, b (agreed in etcd)
        homes = [f"127.0.0.1:{n.port}" for n in (a, b, a, b)]
        assert {(p.address, p.home) for p in parts} == set(zip(addresses(4), homes, strict=True))
        on_b = sum(p.home == homes[1] for p in parts)
        planned = relay.accepted
        got = read(reader, parts)
        assert Counter(got) == Counter(body.encode() for body in keys)  # each once
        assert relay.accepted == planned  # no task read through the URL's node

        # node b is killed in the middle of a task's read (pages of 10 messages): the
        # task reads on from the next offset through the URL
        paged = StreamBatchReader(ChuteOptions.parse({**options_given, "pageMessages": "10"}))
        part = next(p for p in parts if p.home == homes[1])
        whole = read(reader, [part])
        pages = iter(paged.read(part))
        first = next(pages).column("body").to_pylist()
        assert 0 < len(first) < len(whole)
        b.stop(signal.SIGKILL)
        rest = [body for batch in pages for body in batch.column("body").to_pylist()]
        assert first + rest == whole  # each once, in order
        assert relay.accepted == planned + 1

        # node b is down: the tasks of its partitions read a's copies, through the URL
        assert Counter(read(reader, parts)) == Counter(got)
        assert relay.accepted == planned + 1 + on_b  # partitions 1 and 3

        # a "home" that does not hold the range (it moved): read through the URL
        other = start_server(tmp_path, data_dir=tmp_path / "other")
        try:
            moved = [
                StreamRange(p.address, p.start, p.end, f"127.0.0.1:{other.port}") for p in parts
            ]
            assert Counter(read(reader, moved)) == Counter(got)
            assert relay.accepted == planned + 1 + on_b + len(parts)
        finally:
            other.stop()
    finally:
        relay.close()


def test_a_task_reading_a_copy_behind_the_batchs_offsets_waits_for_it(
    nodes: Nodes, tmp_path: Path
) -> None:
    """The batch's offsets come from the home of a partition (b); its task reads through
    a URL whose node (a) holds a copy that is behind, its link to b frozen for a moment
    (a dials b at the address b advertises: a relay): the task waits for the copy and
    reads every row of its range, not the rows the copy held when it began; past
    timeoutMs it fails rather than leave rows out."""
    port = free_port()
    link = Relay(("127.0.0.1", port))
    try:
        a = nodes.start("a")
        b = nodes.started["b"] = start_server(
            tmp_path,
            *("--config", str(nodes.config), "--cluster", nodes.url, "--node", "b"),
            *("--advertise", link.address),
            port=port,
            data_dir=tmp_path / "data-b",
        )
        for server, other in ((a, "b"), (b, "a")):
            server.wait_for_line(f"linked to node {other}", timeout=DEADLINE)
        keys = send(b.url, "b", 80)
        caught_up(a.url, len(keys))
        # a partition homed on b, asked before the link freezes: a node's statistics wait
        # for the other nodes' and name the homes only once they answered
        with chute.connect(b.url) as conn:
            rows = conn.stat("stream:*")["destinations"]
            one = next(r["address"] for r in rows if r.get("home") == "b")
        link.freeze()  # a's copies stop following b
        with chute.connect(b.url) as conn, conn.session() as session:
            for i in range(30):
                session.send(one, f"late{i}")
        at_b = StreamBatchReader(ChuteOptions.parse({"url": b.url, "destination": S}))
        planned = [p for p in at_b.partitions() if isinstance(p, StreamRange)]
        tasks = [StreamRange(p.address, p.start, p.end) for p in planned if p.address == one]
        whole = read(at_b, tasks)  # on the home
        assert sum(body.startswith(b"late") for body in whole) == 30
        # the link stays frozen past timeoutMs: the task fails, saying why (or, without
        # failOnDataLoss, reads what the copy holds)
        short = {"url": a.url, "destination": S, "timeoutMs": "1000"}
        with pytest.raises(DataLoss, match="holds offsets below"):
            read(StreamBatchReader(ChuteOptions.parse(short)), tasks)
        lenient = StreamBatchReader(ChuteOptions.parse({**short, "failOnDataLoss": "false"}))
        assert read(lenient, tasks) == whole[:-30]
        thaw = threading.Timer(1.0, link.thaw)  # the link comes back while the task waits
        thaw.start()
        try:
            at_a = StreamBatchReader(ChuteOptions.parse({"url": a.url, "destination": S}))
            assert read(at_a, tasks) == whole  # through a, once its copy caught up
        finally:
            thaw.join()
    finally:
        link.close()
