"""Streams in a cluster of ``chute serve`` nodes on one real etcd: a stream lives on one
node (its home, agreed in etcd), sends on the others are handed over to it, and reads on
any node see every message at the home's offset (real clients: the native client,
stomp.py, the offset reads the Spark source makes)."""

from __future__ import annotations

import base64
import json
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute.errors import ChuteError
from tests.integration.conftest import ChuteServer, free_port
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.freeze import freeze, thaw
from tests.integration.test_cluster_nodes import CLUSTER, DEADLINE, Nodes, until

S = "stream:orders"


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def send(server: ChuteServer, bodies: list[str], address: str = S) -> None:
    """Send ``bodies``, each confirmed (stored on ``server``) before the call returns."""
    with chute.connect(server.url) as conn:
        session = conn.session(confirm_window=100)
        for body in bodies:
            session.send(address, body)
        session.flush()


def read(server: ChuteServer, count: int, address: str = S) -> list[tuple[int, str]]:
    """``count`` messages from the first, as (offset, body)."""
    got: list[tuple[int, str]] = []
    with chute.connect(server.url) as conn:
        session = conn.session("client")
        with session.consumer(address, offset="first", prefetch=500) as consumer:
            end = time.monotonic() + DEADLINE
            while len(got) < count:
                received = consumer.receive(timeout=max(0.0, end - time.monotonic()))
                assert received is not None, (
                    f"only {len(got)} of {count} messages came on {server.port}"
                )
                got.append((received.seq, bytes(received.body).decode()))
                if len(got) % 100 == 0:
                    received.ack()
    return got


def home_in_etcd(etcd: EtcdProcess, name: str) -> str | None:
    key = base64.b64encode(f"/{CLUSTER}/streams/{name}/0".encode()).decode()
    request = urllib.request.Request(
        f"http://{etcd.address}/v3/kv/range", json.dumps({"key": key}).encode()
    )
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - http only
        kvs = json.loads(answer.read()).get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def test_sends_on_two_nodes_are_read_at_the_same_offsets_on_both(
    nodes: Nodes, etcd: EtcdProcess
) -> None:
    a, b = nodes.start_linked("a", "b")
    send(a, ["a0"])  # a needs the stream first: it is its home
    a.wait_for_line("stream stream:orders: its home is this node", timeout=DEADLINE)
    for i in range(1, 4):
        send(a, [f"a{i}-{j}" for j in range(50)])
        send(b, [f"b{i}-{j}" for j in range(50)])
    assert home_in_etcd(etcd, "orders") == "a"
    on_a = read(a, 301)
    on_b = read(b, 301)
    assert on_a == on_b
    assert [offset for offset, _ in on_a] == list(range(1, 302))
    assert sorted(body for _, body in on_a) == sorted(
        ["a0"] + [f"{n}{i}-{j}" for n in "ab" for i in range(1, 4) for j in range(50)]
    )
    from_b = [body for _, body in on_a if body.startswith("b")]
    assert from_b == [f"b{i}-{j}" for i in range(1, 4) for j in range(50)]  # b's order kept
    # the offset reads the Spark source makes, on the node that is not the home
    with chute.connect(b.url) as conn:
        _, messages = conn.cursor_fetch(S, None, 100, 110)
        assert [(seq, bytes(m.body).decode()) for seq, m in messages] == on_a[99:109]


def test_a_stomp_reader_on_another_node_sees_the_homes_offsets(nodes: Nodes) -> None:
    stomp = pytest.importorskip("stomp")
    a = nodes.start("a")
    stomp_port = free_port()
    b = nodes.start("b", "--stomp-port", str(stomp_port))
    a.wait_for_line("linked to node b", timeout=DEADLINE)
    send(a, [f"m{i}" for i in range(20)])
    listener = stomp.listener.TestListener()
    conn = stomp.Connection([("127.0.0.1", stomp_port)])
    conn.set_listener("", listener)
    conn.connect(wait=True)
    try:
        conn.subscribe(S, id="1", ack="auto", headers={"x-stream-offset": "first"})
        send(b, [f"n{i}" for i in range(10)])
        until(lambda: len(listener.message_list) >= 30, "30 messages on the STOMP reader")
        got = [(int(headers["x-stream-offset"]), body) for headers, body in listener.message_list]
    finally:
        conn.disconnect()
    assert got == read(a, 30)


def test_two_nodes_making_a_stream_at_once_agree_on_one_home(
    nodes: Nodes, etcd: EtcdProcess
) -> None:
    servers = nodes.start_linked("a", "b", "c")
    ready = threading.Barrier(len(servers))
    errors: list[BaseException] = []

    def produce(server: ChuteServer, name: str) -> None:
        try:
            with chute.connect(server.url) as conn:
                session = conn.session(confirm_window=50)
                ready.wait(DEADLINE)
                for i in range(100):
                    session.send("stream:race", f"{name}{i}")
                session.flush()
        except (ChuteError, OSError, threading.BrokenBarrierError) as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=produce, args=(s, n)) for s, n in zip(servers, "abc", strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert not errors
    home = home_in_etcd(etcd, "race")
    assert home in {"a", "b", "c"}
    claimed = [
        name
        for name, server in zip("abc", servers, strict=True)
        if any("stream stream:race: its home is this node" in line for line in server.lines)
    ]
    assert claimed == [home]
    reads = [read(server, 300, "stream:race") for server in servers]
    assert reads[0] == reads[1] == reads[2]
    assert [offset for offset, _ in reads[0]] == list(range(1, 301))
    for name in "abc":  # each producer's order kept
        assert [b for _, b in reads[0] if b[0] == name] == [f"{name}{i}" for i in range(100)]


def test_a_sending_node_killed_mid_forward_loses_nothing_and_stores_nothing_twice(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    send(a, ["first"])
    acked: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        try:
            with chute.connect(b.url) as conn:
                session = conn.session()
                i = 0
                while not stop.is_set():
                    session.send(S, f"b{i}")  # returns once b has it on disk
                    acked.append(f"b{i}")
                    i += 1
        except ChuteError:
            return  # the node went

    thread = threading.Thread(target=produce)
    thread.start()
    until(lambda: len(acked) >= 300, "300 sends confirmed on b")
    assert b.stop(signal.SIGKILL) == -signal.SIGKILL
    stop.set()
    thread.join(DEADLINE)
    since = len(a.lines)
    a.wait_for_line("node b left", start=since, timeout=DEADLINE)  # b may start again
    b = nodes.start("b")
    b.wait_for_line("linked to node a", timeout=DEADLINE)
    with chute.connect(a.url) as conn:

        def everything() -> bool:
            depth: int = conn.stat(S)["destinations"][0]["depth"]
            return depth >= 1 + len(acked)

        until(everything, "every confirmed send on the home")
        depth: int = conn.stat(S)["destinations"][0]["depth"]  # one not confirmed may be in
    got = read(a, depth)
    bodies = [body for _, body in got]
    assert len(bodies) == len(set(bodies)), "a message stored twice"
    assert set(acked) <= set(bodies)
    assert read(b, len(got)) == got


def test_a_reader_on_another_node_reads_on_after_its_link_to_the_home_is_lost(
    nodes: Nodes,
) -> None:
    """The home frozen (SIGSTOP) loses its link after three heart-beats; sends on the other
    node wait there meanwhile, and its reader gets everything once the link is back."""
    nodes.config.write_text("[cluster]\nttl = 60\n\n[server.sessions]\nheartbeat_ms = 1000\n")
    a, b = nodes.start_linked("a", "b")
    send(a, ["m0"])
    with chute.connect(b.url) as conn:
        session = conn.session("client")
        with session.consumer(S, offset="first", prefetch=100) as consumer:
            first = consumer.receive(timeout=DEADLINE)
            assert first is not None
            got = [(first.seq, bytes(first.body).decode())]
            since = len(b.lines)
            freeze(a.process)
            try:
                b.wait_for_line("the link to node a is down", start=since, timeout=DEADLINE)
                send(b, ["while-down"])  # confirmed by b: it waits there for a
            finally:
                thaw(a.process)
            b.wait_for_line("linked to node a", start=since, timeout=DEADLINE)
            send(a, ["after"])
            end = time.monotonic() + DEADLINE
            while len(got) < 3:
                item = consumer.receive(timeout=max(0.0, end - time.monotonic()))
                assert item is not None, f"only {got} came"
                got.append((item.seq, bytes(item.body).decode()))
    assert got == read(a, 3)
    assert sorted(body for _, body in got) == ["after", "m0", "while-down"]


def test_sends_while_the_home_is_down_wait_on_their_node_and_reach_it_once(
    nodes: Nodes,
) -> None:
    a, b = nodes.start_linked("a", "b")
    send(a, ["m0"])
    send(b, [f"before{i}" for i in range(100)])
    since = len(b.lines)
    assert a.stop(signal.SIGKILL) == -signal.SIGKILL
    send(b, [f"down{i}" for i in range(100)])  # each confirmed by b while a is down
    b.wait_for_line("node a left", start=since, timeout=DEADLINE)  # a may start again
    a = nodes.start("a")
    b.wait_for_line("linked to node a", start=since, timeout=DEADLINE)
    got = read(a, 201)
    bodies = [body for _, body in got]
    assert len(bodies) == len(set(bodies)), "a message stored twice"
    assert sorted(bodies) == sorted(
        ["m0"] + [f"before{i}" for i in range(100)] + [f"down{i}" for i in range(100)]
    )
    assert [body for body in bodies if body.startswith("down")] == [f"down{i}" for i in range(100)]
    assert read(b, 201) == got
