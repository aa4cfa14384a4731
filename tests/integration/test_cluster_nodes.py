"""A cluster of ``chute serve`` nodes on one real etcd: distributed queues and topics over
the links between nodes, seen through real clients (the native client, stomp.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.client.blocking import BlockingConnection, BlockingConsumer, connect
from chute.client.received import Received
from chute.protocol import packets as p
from chute.protocol.wire import encode_packet
from tests.integration.conftest import ChuteServer, free_port, start_server
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.freeze import freeze, thaw

CLUSTER = "t"
DEADLINE = 30.0


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


def test_consumers_on_two_other_nodes_each_get_a_message_once(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    conn_b, on_b = open_consumer(b, "queue:work", prefetch=10)
    conn_c, on_c = open_consumer(c, "queue:work", prefetch=10)
    with conn_b, conn_c:
        sent = [f"m{i}" for i in range(300)]
        send(a, "queue:work", sent)
        got: list[Received] = []

        def all_in() -> bool:
            for consumer in (on_b, on_c):
                item = consumer.receive(timeout=0.05)
                if item is not None:
                    item.ack()
                    got.append(item)
            return len(got) >= len(sent)

        until(all_in, "every message on b or c")
        assert sorted(bodies(got)) == sorted(sent)
        nothing_more(on_b)
        nothing_more(on_c)


def test_messages_waiting_for_a_consumer_that_left_go_to_another_node(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    sent = [f"m{i}" for i in range(100)]
    conn_b, on_b = open_consumer(b, "queue:work", prefetch=5)
    with conn_b:
        send(a, "queue:work", sent)
        first = take(on_b, 20)  # acked; the rest waits on a and b
    conn_c, on_c = open_consumer(c, "queue:work")
    with conn_c:
        rest = take(on_c, len(sent) - len(first))
        assert sorted(bodies(first) + bodies(rest)) == sorted(sent)
        nothing_more(on_c)


def test_a_stomp_consumer_gets_what_a_native_producer_sent_to_another_node(
    nodes: Nodes,
) -> None:
    stomp = pytest.importorskip("stomp")
    a = nodes.start("a")
    stomp_port = free_port()
    b = nodes.start("b", "--stomp-port", str(stomp_port))
    a.wait_for_line("linked to node b", timeout=DEADLINE)
    listener = stomp.listener.TestListener()
    conn = stomp.Connection([("127.0.0.1", stomp_port)])
    conn.set_listener("", listener)
    conn.connect(wait=True)
    try:
        conn.subscribe(destination="/queue/work", id="1", ack="client-individual")
        sent = [f"m{i}" for i in range(50)]
        send(a, "queue:work", sent)
        until(lambda: len(listener.message_list) >= len(sent), "the STOMP consumer's messages")
        got = [body for _headers, body in listener.message_list]
        assert sorted(got) == sorted(sent)
    finally:
        conn.disconnect()
    assert b.process.poll() is None


# -- topics ----------------------------------------------------------------------------


def test_a_subscriber_on_each_node_gets_every_message_of_a_topic_once(nodes: Nodes) -> None:
    servers = nodes.start_linked("a", "b", "c")
    opened = [open_consumer(s, "topic:news") for s in servers]
    try:
        consumers = [consumer for _conn, consumer in opened]
        seen: list[set[str]] = [set() for _ in consumers]

        def probed() -> bool:  # a's peers know every subscription once each saw a probe
            send(servers[0], "topic:news", ["probe"])
            for consumer, got in zip(consumers, seen, strict=True):
                item = consumer.receive(timeout=0.1)
                while item is not None:
                    item.ack()
                    got.add(bodies([item])[0])
                    item = consumer.receive(timeout=0.05)
            return all("probe" in got for got in seen)

        until(probed, "every node's subscription known on a")
        sent = [f"n{i}" for i in range(100)]
        send(servers[0], "topic:news", sent)
        for consumer in consumers:
            got = [b for b in bodies(take_all(consumer, len(sent))) if b != "probe"]
            assert got == sent
    finally:
        for conn, _consumer in opened:
            conn.close()


def take_all(consumer: BlockingConsumer, count: int) -> list[Received]:
    """Messages until ``count`` that are not probes came (probes still on the way count
    for nothing)."""
    got: list[Received] = []
    end = time.monotonic() + DEADLINE
    while sum(1 for b in bodies(got) if b != "probe") < count:
        assert time.monotonic() < end, f"got {len(got)} messages"
        item = consumer.receive(timeout=1)
        if item is not None:
            item.ack()
            got.append(item)
    return got


# -- refusals ----------------------------------------------------------------------------


def serve_and_fail(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``chute serve`` that must exit: its exit code and output."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "chute.cli",
            "serve",
            "--port",
            str(free_port()),
            "--stomp-port",
            "0",
            "--http-port",
            "0",
            "--data-dir",
            str(tmp_path / "failed"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_taken_node_name_with_its_data_directory_is_refused_with_one_clear_line(
    nodes: Nodes, tmp_path: Path
) -> None:
    """A second process of node ``a`` on another data directory is its backup (see
    test_ha.py); on the same data directory it is refused: that journal is in use."""
    nodes.start("a")
    done = serve_and_fail(
        tmp_path, "--cluster", nodes.url, "--node", "a", "--data-dir", str(tmp_path / "data-a")
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "in use by another broker" in line]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_node_name_is_refused_with_the_memory_store(nodes: Nodes, tmp_path: Path) -> None:
    """Without a journal there is nothing to replicate: no backup, the name is refused."""
    nodes.start("a")
    done = serve_and_fail(tmp_path, "--cluster", nodes.url, "--node", "a", "--store", "memory")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "is taken" in line]
    assert len(lines) == 1, done.stderr
    assert "node name 'a' is taken" in lines[0]
    assert "Traceback" not in done.stderr


def test_an_unreachable_etcd_is_a_clear_error(tmp_path: Path) -> None:
    url = f"etcd://127.0.0.1:{free_port()}/{CLUSTER}"
    done = serve_and_fail(tmp_path, "--cluster", url, "--node", "a")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "etcd is unreachable" in done.stderr
    assert "Traceback" not in done.stderr


# -- a node killed -----------------------------------------------------------------------


def test_a_receiving_node_killed_mid_stream_loses_nothing_acknowledged(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    sent = [f"m{i}" for i in range(300)]
    conn_b, on_b = open_consumer(b, "queue:work", prefetch=10)
    send(a, "queue:work", sent)  # each one confirmed: stored on a
    acked_on_b = bodies(take(on_b, 50))
    left_from = len(a.lines)
    b.stop(signal.SIGKILL)
    with contextlib.suppress(Exception):
        conn_b.close()
    a.wait_for_line("node b left", start=left_from, timeout=DEADLINE)  # its lease ran out
    # what a had in doubt with b is a's again; what b stored comes back with b
    nodes.start("b")
    conn_c, on_c = open_consumer(c, "queue:work")
    with conn_c:
        got: list[Received] = []

        def everything() -> bool:
            item = on_c.receive(timeout=0.1)
            while item is not None:
                item.ack()
                got.append(item)
                item = on_c.receive(timeout=0.05)
            return set(acked_on_b) | set(bodies(got)) >= set(sent)

        until(everything, "every message acknowledged by a on c or b")
    seen = acked_on_b + bodies(got)
    assert sorted(set(seen)) == sorted(sent)
    flagged = {body for body, item in zip(bodies(got), got, strict=True) if item.redelivered}
    for body in {body for body in seen if seen.count(body) > 1}:
        assert body in flagged, f"{body} came twice, never flagged redelivered"


# -- users --------------------------------------------------------------------------------

USERS = """
[roles.peer]
cluster = ["*"]

[roles.app]
send = ["*"]
consume = ["*"]
create = ["*"]

[users.app]
password = "app-pw"
roles = ["app"]

[users.node]
password = "node-pw"
roles = ["{role}"]

[cluster]
ttl = 2
user = "node"
password = "{password}"
"""


def test_with_users_a_node_logs_in_with_the_cluster_grant(nodes: Nodes) -> None:
    nodes.config.write_text(USERS.format(role="peer", password="node-pw"))  # noqa: S106
    a, b = nodes.start_linked("a", "b")
    url_b = b.url.replace("chute://", "chute://app:app-pw@")
    url_a = a.url.replace("chute://", "chute://app:app-pw@")
    with connect(url_b) as conn:
        consumer = conn.session(ack="individual").consumer("queue:work")
        with connect(url_a) as producer, producer.session() as session:
            session.send("queue:work", "hello")
        assert bodies(take(consumer, 1)) == ["hello"]


@pytest.mark.parametrize(
    ("role", "password", "said"),
    [("peer", "wrong", "login or passcode rejected"), ("app", "node-pw", "no cluster grant")],
)
def test_a_node_refused_says_why_once_and_keeps_trying(
    nodes: Nodes, role: str, password: str, said: str
) -> None:
    nodes.config.write_text(USERS.format(role=role, password=password))
    a = nodes.start("a", "--log-level", "debug")  # its retries are logged at debug only
    b = nodes.start("b")
    line = a.wait_for_line("cannot link to node b", timeout=DEADLINE)
    assert said in line
    until(lambda: sum("cannot link to node b yet" in x for x in a.lines) >= 2, "two retries")
    assert [x for x in a.lines if "WARNING chute.cluster" in x] == [line]
    assert a.process.poll() is None
    assert b.process.poll() is None


def test_a_node_of_another_protocol_version_is_refused_in_one_line(
    nodes: Nodes, etcd: EtcdProcess
) -> None:
    """A node "b" that speaks versions 1 and 2 only (an older chute: it refuses a Connect
    at version 3 as such a broker does) is registered; node "a" dials it."""
    refusal = encode_packet(
        p.Error("unsupported-version", "protocol versions 3..3 are not supported"), 0, 0, 0, 2
    )
    listener = socket.create_server(("127.0.0.1", 0))
    dialed = threading.Event()

    def old_broker() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(refusal)
                dialed.set()

    threading.Thread(target=old_broker, daemon=True).start()
    try:
        a = nodes.start("a", "--log-level", "debug")
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        member = json.dumps({"name": "b", "address": address, "started": 0, "version": "0"})
        put = json.dumps(
            {
                "key": base64.b64encode(f"/{CLUSTER}/nodes/b".encode()).decode(),
                "value": base64.b64encode(member.encode()).decode(),
            }
        ).encode()
        with urllib.request.urlopen(f"http://{etcd.address}/v3/kv/put", put, timeout=5):
            pass
        line = a.wait_for_line("cannot link to node b", timeout=DEADLINE)
        assert "not supported" in line
        assert "unsupported-version" in line
        until(lambda: sum("cannot link to node b yet" in x for x in a.lines) >= 2, "two retries")
        assert [x for x in a.lines if "WARNING chute.cluster" in x] == [line]
        assert dialed.is_set()
        assert a.process.poll() is None
    finally:
        listener.close()


# -- TLS ----------------------------------------------------------------------------------


def test_with_cluster_tls_the_links_speak_tls(nodes: Nodes, tmp_path: Path) -> None:
    files = tmp_path / "tls"
    subprocess.run(
        [sys.executable, "-m", "chute.cli", "cert", str(files)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    nodes.config.write_text(
        f'[cluster]\nttl = 2\ntls = true\n\n[server.tls]\ncert = "{files / "broker.pem"}"\n'
        f'key = "{files / "broker-key.pem"}"\nca = "{files / "ca.pem"}"\n'
    )
    tls_a, tls_b = free_port(), free_port()
    a = nodes.start("a", "--tls-port", str(tls_a))
    b = nodes.start("b", "--tls-port", str(tls_b))
    a.wait_for_line(f"cluster t: node b joined (127.0.0.1:{tls_b})", timeout=DEADLINE)
    a.wait_for_line("linked to node b", timeout=DEADLINE)
    b.wait_for_line("linked to node a", timeout=DEADLINE)
    conn, consumer = open_consumer(b, "queue:work")
    with conn:
        send(a, "queue:work", ["over tls"])
        assert bodies(take(consumer, 1)) == ["over tls"]


def test_a_node_with_tls_refuses_a_peer_it_cannot_trust(nodes: Nodes, tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for where in (mine, theirs):
        subprocess.run(
            [sys.executable, "-m", "chute.cli", "cert", str(where)],
            check=True,
            capture_output=True,
            timeout=60,
        )
    configs = {}
    for name, files in (("a", mine), ("b", theirs)):
        configs[name] = tmp_path / f"{name}.toml"
        configs[name].write_text(
            f'[cluster]\nttl = 2\ntls = true\n\n[server.tls]\ncert = "{files / "broker.pem"}"\n'
            f'key = "{files / "broker-key.pem"}"\nca = "{files / "ca.pem"}"\n'
        )
    a = nodes.start("a", "--tls-port", str(free_port()), "--config", str(configs["a"]))
    nodes.start("b", "--tls-port", str(free_port()), "--config", str(configs["b"]))
    line = a.wait_for_line("cannot link to node b", timeout=DEADLINE)
    assert "CERTIFICATE_VERIFY_FAILED" in line
    assert a.process.poll() is None


def test_a_node_that_stops_answering_loses_its_link_before_its_lease(nodes: Nodes) -> None:
    """Heart-beats: a node frozen (SIGSTOP) is still a member for ``ttl`` (60 s here), but
    its link goes after three heart-beat intervals without a word; it comes back when the
    node answers again."""
    nodes.config.write_text("[cluster]\nttl = 60\n\n[server.sessions]\nheartbeat_ms = 1000\n")
    a, b = nodes.start_linked("a", "b")
    with pytest.raises(AssertionError):  # idle, the heart-beats keep it up: 4 intervals
        a.wait_for_line("the link to node b is down", timeout=4)
    since = len(a.lines)
    freeze(b.process)
    try:
        a.wait_for_line("node b is silent", start=since, timeout=DEADLINE)
        a.wait_for_line("the link to node b is down", start=since, timeout=DEADLINE)
    finally:
        thaw(b.process)
    a.wait_for_line("linked to node b", start=since, timeout=DEADLINE)
    conn, consumer = open_consumer(b, "queue:work")
    with conn:
        send(a, "queue:work", ["after the freeze"])
        assert bodies(take(consumer, 1)) == ["after the freeze"]
