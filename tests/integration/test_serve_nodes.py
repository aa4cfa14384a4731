"""``chute serve --nodes N``: N nodes on one machine sharing the client ports, supervised by
one parent, seen through real clients (the native client, stomp.py) and real signals."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chute.client.blocking import BlockingConnection, connect
from chute.client.received import Received
from tests.integration.conftest import ChuteServer, free_port, start_server
from tests.integration.ports import free_ports
from tests.integration.test_stomp import Client

DEADLINE = 30.0
NODES_READY = 60.0
"""How long N nodes may take to say they listen: each is a process starting a broker, and
on a loaded machine (a test run's other workers) that takes a few times one's."""


class Nodes:
    """A running ``chute serve --nodes``: the parent, and each node's own port."""

    def __init__(self, server: ChuteServer, node_port: int, count: int) -> None:
        self.server = server
        self.own = [node_port + i for i in range(count)]

    def url(self, index: int) -> str:
        return f"chute://127.0.0.1:{self.own[index]}"

    def pid(self, node: str, *, start: int = 0) -> int:
        line = self.server.wait_for_line(f"node {node} started (pid", start=start)
        found = re.search(r"\(pid (\d+)\)", line)
        assert found is not None, line
        return int(found.group(1))

    def linked(self, start: int = 0) -> None:
        """Wait until node-0 is linked to node-1 (from output line ``start`` on)."""
        self.server.wait_for_line(
            "node-0 chute.cluster: cluster: linked to node node-1", start=start, timeout=DEADLINE
        )

    def node_of(self, address: str) -> int:
        """The node whose own consumers of ``address`` include one (asked on each node's
        own port)."""
        holding = []
        for index in range(len(self.own)):
            with connect(self.url(index)) as probe:
                found = probe.stat(address)["destinations"]
                if found and found[0]["consumers"]:
                    holding.append(index)
        assert len(holding) == 1, f"{address}: consumers on nodes {holding}"
        return holding[0]


def start_nodes(tmp_path: Path, count: int = 2, *extra: str) -> Nodes:
    node_port = free_ports(count)
    server = start_server(
        tmp_path,
        "--nodes",
        str(count),
        "--node-port",
        str(node_port),
        *extra,
        ready_timeout=NODES_READY,
    )
    return Nodes(server, node_port, count)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    running = start_nodes(tmp_path, 2)
    running.linked()
    yield running
    if running.server.process.poll() is None:
        running.server.stop()


def until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def take(conn: BlockingConnection, address: str, count: int) -> list[Received]:
    """``count`` messages of ``address`` on ``conn``, each acked; then none more."""
    with conn.session(ack="individual") as session:
        consumer = session.consumer(address, prefetch=20)
        got: list[Received] = []
        end = time.monotonic() + DEADLINE
        while len(got) < count:
            left = end - time.monotonic()
            assert left > 0, f"got {len(got)} of {count} messages"
            item = consumer.receive(timeout=left)
            if item is not None:
                item.ack()
                got.append(item)
        extra = consumer.receive(timeout=0.5)
        assert extra is None, f"one more message: {extra.body!r}"
    return got


def bodies(items: list[Received]) -> list[str]:
    return [bytes(r.body).decode() if isinstance(r.body, bytes) else str(r.body) for r in items]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the shared ports ------------------------------------------------------------------


def test_native_clients_on_the_shared_port_are_spread_and_get_every_message_once(
    nodes: Nodes,
) -> None:
    """Connections to the shared native port land on both nodes (SO_REUSEPORT); a producer
    on one and a consumer on the other: every message once."""
    on: dict[int, BlockingConnection] = {}
    opened: list[BlockingConnection] = []
    try:
        for attempt in range(60):
            conn = connect(nodes.server.url)
            opened.append(conn)
            assert conn.node == f"127.0.0.1:{nodes.server.port}"  # the shared port, as named
            probe = f"queue:probe-{attempt}"
            conn.session().consumer(probe)
            on.setdefault(nodes.node_of(probe), conn)
            if len(on) == 2:
                break
        assert len(on) == 2, "60 connections to the shared port all reached one node"
        with on[0].session() as session:
            sent = [f"m{i}" for i in range(200)]
            for body in sent:
                session.send("queue:work", body)
        got = take(on[1], "queue:work", len(sent))
        assert sorted(bodies(got)) == sorted(sent)
        assert not any(r.redelivered for r in got)
    finally:
        for conn in opened:
            conn.close()


def test_stomp_clients_on_the_shared_port_are_spread_and_get_every_message_once(
    tmp_path: Path,
) -> None:
    stomp_port, http_port = free_port(), free_port()
    running = start_nodes(
        tmp_path, 2, "--stomp-port", str(stomp_port), "--http-port", str(http_port)
    )
    clients: list[Client] = []
    try:
        running.linked()
        on: dict[int, Client] = {}
        for attempt in range(60):
            client = Client(stomp_port)
            clients.append(client)
            client.conn.subscribe(
                f"/queue/probe-{attempt}", id="probe", headers={"receipt": "probed"}
            )
            client.receipt("probed")
            on.setdefault(running.node_of(f"queue:probe-{attempt}"), client)
            if len(on) == 2:
                break
        assert len(on) == 2, "60 connections to the shared STOMP port all reached one node"
        consumer, producer = on[1], on[0]
        consumer.conn.subscribe("/queue/work", id="work", ack="auto", headers={"receipt": "sub"})
        consumer.receipt("sub")
        sent = [f"s{i}" for i in range(100)]
        for body in sent:
            producer.conn.send("/queue/work", body.encode())
        producer.conn.send("/queue/work", b"last", headers={"receipt": "sent"})
        producer.receipt("sent")
        got = [consumer.message().body.decode() for _ in range(len(sent) + 1)]
        assert sorted(got) == sorted([*sent, "last"])
        assert consumer.no_message(0.5)
        for _ in range(10):  # the shared HTTP port: whichever node answers is ready
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz") as answer:
                assert answer.status == 200
    finally:
        for client in clients:
            client.close()
        running.server.stop()


def test_each_nodes_own_port_reaches_that_node(nodes: Nodes) -> None:
    for index in range(2):
        with connect(nodes.url(index)) as conn:
            assert conn.node == f"127.0.0.1:{nodes.own[index]}"
            conn.session().consumer(f"queue:mine-{index}")
            assert nodes.node_of(f"queue:mine-{index}") == index
    # a URL naming both nodes: the first that answers
    both = f"chute://127.0.0.1:{nodes.own[1]},127.0.0.1:{nodes.own[0]}?order=listed"
    with connect(both) as conn:
        conn.session().consumer("queue:listed")
        assert nodes.node_of("queue:listed") == 1


# -- supervision --------------------------------------------------------------------------


def test_a_node_killed_is_started_again_and_gives_back_what_it_held(nodes: Nodes) -> None:
    """kill -9 of a node: the parent starts it again on its journal, and every message it
    had confirmed reaches a consumer on the other node once (a copy it may have handed
    over before it died comes back flagged redelivered)."""
    sent = [f"k{i}" for i in range(150)]
    with connect(nodes.url(1)) as conn, conn.session() as session:
        for body in sent:
            session.send("queue:held", body)
    pid = nodes.pid("node-1")
    mark = len(nodes.server.lines)
    os.kill(pid, signal.SIGKILL)
    line = nodes.server.wait_for_line("node node-1 (pid", start=mark, timeout=DEADLINE)
    assert f"node node-1 (pid {pid}) was killed by SIGKILL; starting it again" in line
    nodes.server.wait_for_line("node node-1 is back", start=mark, timeout=DEADLINE)
    new_pid = nodes.pid("node-1", start=mark)
    assert new_pid != pid
    assert not alive(pid)
    with connect(nodes.url(0)) as conn:
        got = take(conn, "queue:held", len(sent))
    assert sorted(bodies(got)) == sorted(sent)
    assert nodes.server.process.poll() is None


def test_a_node_killed_mid_hand_over_loses_nothing(nodes: Nodes) -> None:
    """A consumer on node-0 takes what node-1 holds; node-1 is killed in the middle."""
    sent = [f"h{i}" for i in range(300)]
    with connect(nodes.url(1)) as conn, conn.session() as session:
        for body in sent:
            session.send("queue:moving", body)
    got: list[Received] = []
    with connect(nodes.url(0)) as conn, conn.session(ack="individual") as session:
        consumer = session.consumer("queue:moving", prefetch=10)
        while len(got) < 50:
            item = consumer.receive(timeout=DEADLINE)
            assert item is not None, f"got {len(got)} messages"
            item.ack()
            got.append(item)
        mark = len(nodes.server.lines)
        os.kill(nodes.pid("node-1"), signal.SIGKILL)
        nodes.server.wait_for_line("node node-1 is back", start=mark, timeout=DEADLINE)
        end = time.monotonic() + DEADLINE
        while len(set(bodies(got))) < len(sent):
            left = end - time.monotonic()
            assert left > 0, f"got {len(set(bodies(got)))} of {len(sent)} messages"
            item = consumer.receive(timeout=left)
            if item is not None:
                item.ack()
                got.append(item)
    assert sorted(set(bodies(got))) == sorted(sent)
    seen: set[str] = set()
    for item in got:  # a message that came twice came again flagged
        body = bodies([item])[0]
        assert body not in seen or item.redelivered, f"{body} twice, not flagged"
        seen.add(body)


def test_sigterm_on_the_parent_stops_every_node_cleanly(nodes: Nodes) -> None:
    pids = [nodes.pid("node-0"), nodes.pid("node-1")]
    assert nodes.server.stop(signal.SIGTERM) == 0
    output = nodes.server.output
    assert "node-0 chute.server: stopped" in output
    assert "node-1 chute.server: stopped" in output
    assert "starting it again" not in output
    assert not any(alive(pid) for pid in pids)


def test_the_nodes_stop_when_the_parent_is_killed(nodes: Nodes) -> None:
    pids = [nodes.pid("node-0"), nodes.pid("node-1")]
    nodes.server.process.kill()
    nodes.server.process.wait(DEADLINE)
    until(lambda: not any(alive(pid) for pid in pids), "the nodes to stop")
    assert "the parent process is gone: stopping" in nodes.server.output


def test_links_log_in_when_users_are_configured(tmp_path: Path) -> None:
    config = tmp_path / "users.toml"
    config.write_text('[users.app]\npassword = "app-pw"\nroles = ["admin"]\n')
    running = start_nodes(tmp_path, 2, "--config", str(config))
    try:
        running.linked()
        url = running.url(0).replace("chute://", "chute://app:app-pw@")
        with connect(url) as conn, conn.session() as session:
            session.send("queue:secure", "one")
        with connect(running.url(1).replace("chute://", "chute://app:app-pw@")) as conn:
            assert bodies(take(conn, "queue:secure", 1)) == ["one"]
        assert "chute-nodes" in running.server.output  # the run's own link user logged in
    finally:
        running.server.stop()


def test_nodes_0_starts_one_node_per_core(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))[:2]
    node_port = free_ports(len(cores))
    server = start_server(
        tmp_path,
        "--nodes",
        "0",
        "--node-port",
        str(node_port),
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
        ready_timeout=NODES_READY,
    )
    try:
        server.wait_for_line(f"starting {len(cores)} nodes")
        assert f"on {len(cores)} nodes" in server.wait_for_line("chute listening")
    finally:
        server.stop()


# -- refusals ----------------------------------------------------------------------------


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", "serve", "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--nodes", "2", "--cluster", "etcd://127.0.0.1:2379/x", "--node", "a"],
            "--nodes runs a cluster of its own on this machine, with no etcd",
        ),
        (["--nodes", "2", "--node", "a"], "--nodes names its nodes node-0, node-1"),
        (["--node-port", "7000"], "--node-port numbers the nodes of --nodes: give --nodes too"),
        (["--nodes", "-1"], "argument --nodes"),
        (
            ["--nodes", "3", "--port", "7000", "--stomp-port", "7002", "--node-port", "7001"],
            "take 7002, the stomp_port",
        ),
        (
            ["--nodes", "2", "--port", "0"],
            "--nodes with the native port off (--port 0) needs --node-port",
        ),
    ],
)
def test_bad_combinations_are_refused(tmp_path: Path, args: list[str], said: str) -> None:
    done = serve(tmp_path, "--http-port", "0", *args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "d" / "nodes").exists()


def test_a_port_in_use_is_refused_before_any_node_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(
            tmp_path,
            "--nodes",
            "2",
            "--port",
            str(port),
            "--node-port",
            str(free_ports(2)),
            "--stomp-port",
            "0",
            "--http-port",
            "0",
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (port)" in done.stderr
    assert "started (pid" not in done.stderr


def test_a_node_that_cannot_start_stops_the_others(tmp_path: Path) -> None:
    """node-1's journal is held by another broker: node-1 fails before it was ready, the
    parent stops node-0 and exits with status 1."""
    holder = start_server(tmp_path, data_dir=tmp_path / "d" / "nodes" / "node-1")
    try:
        done = serve(
            tmp_path,
            "--nodes",
            "2",
            "--port",
            str(free_port()),
            "--node-port",
            str(free_ports(2)),
            "--stomp-port",
            "0",
            "--http-port",
            "0",
        )
    finally:
        holder.stop()
    assert done.returncode == 1, done.stderr
    assert re.search(
        r"node node-1 \(pid \d+\) exited with status 1 before it was ready", done.stderr
    )
    assert "chute listening" not in done.stdout
    assert "every node stopped" in done.stderr


def test_one_node_without_nodes(tmp_path: Path) -> None:
    """The first command of the README stays one broker: no node directory, no children."""
    server = start_server(tmp_path)
    try:
        assert " nodes (" not in server.wait_for_line("chute listening")
        assert "chute.nodes" not in server.output
        assert not (tmp_path / "data" / "nodes").exists()
    finally:
        server.stop()


def test_a_stream_sent_on_both_nodes_is_read_at_the_same_offsets_on_each(nodes: Nodes) -> None:
    """Nodes without etcd agree on a stream's home by a rule each computes alike: sends on
    either node reach it once, and each node's readers see the same offsets."""
    address = "stream:nodes-orders"
    for index in (0, 1):
        with connect(nodes.url(index)) as conn:
            session = conn.session(confirm_window=50)
            for i in range(50):
                session.send(address, f"n{index}-{i}")
            session.flush()
    seen: list[list[tuple[int, str]]] = []
    for index in (0, 1):
        got: list[tuple[int, str]] = []
        with connect(nodes.url(index)) as conn:
            session = conn.session("client")
            with session.consumer(address, offset="first", prefetch=200) as consumer:
                end = time.monotonic() + DEADLINE
                while len(got) < 100:
                    left = end - time.monotonic()
                    assert left > 0, f"node-{index}: only {len(got)} of 100 records"
                    item = consumer.receive(timeout=left)
                    if item is not None:
                        got.append((item.seq, bodies([item])[0]))
                extra = consumer.receive(timeout=0.5)
                assert extra is None, f"node-{index}: a record more: {extra.seq}"
        seen.append(got)
    assert seen[0] == seen[1]
    assert sorted(body for _, body in seen[0]) == sorted(
        f"n{index}-{i}" for index in (0, 1) for i in range(50)
    )
    assert [offset for offset, _ in seen[0]] == sorted({offset for offset, _ in seen[0]})
