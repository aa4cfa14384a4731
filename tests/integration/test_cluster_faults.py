"""Faults in a cluster of real ``chute serve`` nodes on a real etcd: a link cut by a relay
that stops passing bytes, etcd stopped, consumers joining and leaving throughout; and
selectors and priorities across nodes.

What every test checks of what the clients saw: nothing a producer had acknowledged is
lost, and a message delivered twice is flagged ``redelivered`` on the later delivery.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chute.client.blocking import connect
from tests.integration.conftest import ChuteServer, free_port, start_server
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.relay import Relay
from tests.integration.test_cluster_nodes import (
    DEADLINE,
    Nodes,
    bodies,
    nothing_more,
    open_consumer,
    send,
    take,
    until,
)

FAST_BEATS = "[cluster]\nttl = 2\n\n[server.sessions]\nheartbeat_ms = 1000\n"
"""Heart-beats every second: a silent link is given up after three."""


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def start_node(
    nodes: Nodes, name: str, *extra: str, port: int, url: str | None = None
) -> ChuteServer:
    """``nodes.start`` on a native port chosen beforehand (and another etcd URL)."""
    server = start_server(
        nodes.tmp_path,
        "--config",
        str(nodes.config),
        "--cluster",
        url or nodes.url,
        "--node",
        name,
        *extra,
        port=port,
        data_dir=nodes.tmp_path / f"data-{name}",
    )
    nodes.started[name] = server
    return server


@dataclass
class Seen:
    """What the clients of one test saw: bodies acknowledged to producers, deliveries."""

    acknowledged: list[str] = field(default_factory=list)
    delivered: list[tuple[str, bool]] = field(default_factory=list)  # (body, redelivered)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, body: str) -> None:
        with self.lock:
            self.acknowledged.append(body)

    def deliver(self, body: str, redelivered: bool) -> None:
        with self.lock:
            self.delivered.append((body, redelivered))

    def received(self) -> set[str]:
        with self.lock:
            return {body for body, _ in self.delivered}

    def all_in(self) -> bool:
        with self.lock:
            return set(self.acknowledged) <= {body for body, _ in self.delivered}

    def check(self) -> None:
        """Nothing acknowledged lost; nothing unknown; every later copy flagged."""
        with self.lock:
            got = [body for body, _ in self.delivered]
            missing = set(self.acknowledged) - set(got)
            assert not missing, f"{len(missing)} acknowledged messages lost: {sorted(missing)[:5]}"
            unknown = set(got) - set(self.acknowledged)
            assert not unknown, f"messages nobody sent: {sorted(unknown)[:5]}"
            once: set[str] = set()
            for body, redelivered in self.delivered:
                assert body not in once or redelivered, f"{body} came twice, not flagged"
                once.add(body)


class Producer(threading.Thread):
    """Sends persistent messages ``PREFIX-n`` to ``address`` on ``server``, each confirmed,
    until stopped; each confirmed one is acknowledged in ``seen``."""

    def __init__(self, server: ChuteServer, address: str, prefix: str, seen: Seen) -> None:
        super().__init__(daemon=True)
        self.server, self.address, self.prefix, self.seen = server, address, prefix, seen
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.server.url) as conn, conn.session() as session:
                while not self.stop.is_set():
                    body = f"{self.prefix}-{self.sent}"
                    session.send(self.address, body)
                    self.seen.ack(body)
                    self.sent += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(DEADLINE)
        assert self.error is None, f"the producer failed: {self.error!r}"


class Consumer(threading.Thread):
    """Receives from ``address`` on ``server`` and acks each one, until stopped."""

    def __init__(self, server: ChuteServer, address: str, seen: Seen, prefetch: int = 20) -> None:
        super().__init__(daemon=True)
        self.server, self.address, self.seen, self.prefetch = server, address, seen, prefetch
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn, consumer = open_consumer(self.server, self.address, prefetch=self.prefetch)
            with conn:
                while not self.stop.is_set():
                    item = consumer.receive(timeout=0.1)
                    if item is not None:
                        item.ack()
                        self.seen.deliver(bodies([item])[0], item.redelivered)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(DEADLINE)
        assert self.error is None, f"the consumer failed: {self.error!r}"


# -- a link cut ------------------------------------------------------------------------


def test_a_link_cut_mid_transfer_loses_nothing_and_resumes_when_bytes_pass_again(
    nodes: Nodes,
) -> None:
    """b advertises a relay's address, so a's link to b goes through it. The relay
    stops passing bytes while a hands over to b's consumer: both nodes give the link
    up (heart-beats), a keeps taking its producer's messages at full speed (b's
    consumer, out of reach, is no lagging consumer to push back for), and once bytes
    pass again the link comes back and everything acknowledged arrives, none twice."""
    nodes.config.write_text(FAST_BEATS + "\n[server.memory]\nflow_backlog = 300\n")
    port = free_port()
    relay = Relay(("127.0.0.1", port))
    try:
        b = start_node(nodes, "b", "--advertise", relay.address, port=port)
        a = nodes.start("a")
        a.wait_for_line("linked to node b", timeout=DEADLINE)
        assert relay.accepted == 1
        seen = Seen()
        consumer = Consumer(b, "queue:work", seen)
        consumer.start()
        producer = Producer(a, "queue:work", "m", seen)
        producer.start()
        until(lambda: len(seen.received()) >= 200, "messages through the relay")

        since_a, since_b = len(a.lines), len(b.lines)
        relay.freeze()
        a.wait_for_line("the link to node b is down", start=since_a, timeout=DEADLINE)
        b.wait_for_line("the link to node a is down", start=since_b, timeout=DEADLINE)
        during = producer.sent  # past flow_backlog: b's consumer, cut off, is no one's
        until(lambda: producer.sent >= during + 1000 or bool(producer.error), "sends in the cut")
        assert producer.error is None, producer.error

        relay.thaw()
        a.wait_for_line("linked to node b", start=since_a, timeout=DEADLINE)
        after = producer.sent
        until(lambda: producer.sent >= after + 200, "sends after the link is back")
        producer.finish()
        until(seen.all_in, "every acknowledged message on b")
        consumer.finish()
        seen.check()
        assert relay.passed > 0
        assert a.process.poll() is None
        assert b.process.poll() is None
    finally:
        relay.close()


def test_a_node_cut_off_longer_than_its_lease_hands_nothing_over_twice(
    nodes: Nodes, etcd: EtcdProcess
) -> None:
    """b is cut off from etcd and from a (two relays frozen) mid-transfer, for longer
    than its lease: a sees b leave, while b, alive, keeps what it handed over and a
    stored in doubt (a's confirms are lost in the cut). When the relays pass bytes
    again, b registers again, the link comes back and b sends again what was in doubt,
    with the same keys: a must know them still, and store none of them twice."""
    nodes.config.write_text(FAST_BEATS)
    port = free_port()
    link = Relay(("127.0.0.1", port))
    coordinator = Relay((etcd.endpoint.host, etcd.endpoint.port))
    try:
        url = f"etcd://{coordinator.address}/{nodes.url.rsplit('/', 1)[1]}"
        b = start_node(nodes, "b", "--advertise", link.address, port=port, url=url)
        a = nodes.start("a")
        a.wait_for_line("linked to node b", timeout=DEADLINE)
        seen = Seen()
        consumer = Consumer(a, "queue:work", seen)
        consumer.start()
        producer = Producer(b, "queue:work", "m", seen)
        producer.start()
        until(lambda: len(seen.received()) >= 200, "messages from b on a")

        since_a, since_b = len(a.lines), len(b.lines)
        link.freeze()
        coordinator.freeze()
        a.wait_for_line("node b left", start=since_a, timeout=DEADLINE)
        b.wait_for_line("the link to node a is down", start=since_b, timeout=DEADLINE)
        link.thaw()
        coordinator.thaw()
        # b is its node's live with no backup: its lease lapsed, it takes another
        b.wait_for_line("live again under a new lease", start=since_b, timeout=DEADLINE)
        b.wait_for_line("registered again", start=since_b, timeout=DEADLINE)
        a.wait_for_line("linked to node b", start=since_a, timeout=DEADLINE)
        after = producer.sent
        until(lambda: producer.sent >= after + 200, "sends after the cut")
        producer.finish()
        until(seen.all_in, "every acknowledged message on a")
        consumer.finish()
        conn, last = open_consumer(a, "queue:work")
        with conn:
            nothing_more(last)
        seen.check()
    finally:
        link.close()
        coordinator.close()


# -- etcd stopped ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["kill", "pause"])
def test_with_etcd_stopped_the_nodes_keep_serving_and_joins_resume_after(
    nodes: Nodes, etcd: EtcdProcess, how: str
) -> None:
    """etcd stopped for 10 s, five times the nodes' lease TTL (``kill``: killed and
    started again on its port and data; ``pause``: SIGSTOP, then SIGCONT, when it may
    find the leases expired): sends and receives on a node, and across the link that
    was up, go on throughout; a consumer that comes meanwhile is announced over the
    link; once etcd is back a node joins, links and leaves as usual."""
    a, b = nodes.start_linked("a", "b")
    seen = Seen()
    local = Consumer(a, "queue:local", seen)
    local.start()
    producers = [Producer(a, "queue:local", "l", seen), Producer(a, "queue:across", "x", seen)]
    for producer in producers:
        producer.start()
    until(lambda: len(seen.received()) >= 100, "sends and receives before the outage")

    since_a = len(a.lines)
    etcd.kill() if how == "kill" else etcd.pause()
    stopped = time.monotonic()
    across = Consumer(b, "queue:across", seen)  # comes during the outage
    across.start()
    before = len(seen.received())
    until(
        lambda: (
            len(seen.received()) >= before + 200
            and any(body.startswith("x-") for body in seen.received())
        ),
        "deliveries on a and across the link during the outage",
        8,
    )
    time.sleep(max(10 - (time.monotonic() - stopped), 0))  # the fault's duration
    a.wait_for_line("coordinator unreachable", start=since_a, timeout=DEADLINE)
    etcd.start() if how == "kill" else etcd.resume()
    until(  # the lease is still alive, or expired and taken again
        lambda: any("reachable again" in x or "registered again" in x for x in a.lines[since_a:]),
        "a back in etcd",
    )
    after = len(seen.received())
    until(lambda: len(seen.received()) >= after + 200, "deliveries after the outage")
    for producer in producers:
        producer.finish()
    until(seen.all_in, "every acknowledged message")

    since_a, since_b = len(a.lines), len(b.lines)
    c = nodes.start("c")
    a.wait_for_line("linked to node c", start=since_a, timeout=DEADLINE)
    b.wait_for_line("linked to node c", start=since_b, timeout=DEADLINE)
    conn, on_c = open_consumer(c, "queue:after")
    with conn:
        send(a, "queue:after", ["after the outage"])
        assert bodies(take(on_c, 1)) == ["after the outage"]
    c.stop()
    a.wait_for_line("node c left", start=since_a, timeout=DEADLINE)
    b.wait_for_line("node c left", start=since_b, timeout=DEADLINE)
    local.finish()
    across.finish()
    seen.check()
    if how == "kill":  # etcd renews the leases it finds when it starts
        assert [x for x in a.lines if "node b left" in x] == []
    assert a.process.poll() is None
    assert b.process.poll() is None


# -- exactly once with consumers coming and going ----------------------------------------


def test_exactly_once_across_three_nodes_with_consumers_joining_and_leaving(
    nodes: Nodes,
) -> None:
    """A producer on each node sends to one queue while consumers open on random nodes,
    take a few messages each (acking them) and leave, throughout: every message sent
    is received and acknowledged exactly once."""
    servers = nodes.start_linked("a", "b", "c")
    seen = Seen()
    total = 300
    rng = random.Random(32)
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer(server: ChuteServer, prefix: str) -> None:
        try:
            with connect(server.url) as conn, conn.session() as session:
                for n in range(total):
                    session.send("queue:work", f"{prefix}-{n}")
                    seen.ack(f"{prefix}-{n}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def churning_consumer(seed: int) -> None:
        own = random.Random(seed)
        try:
            while not stop.is_set():
                server = own.choice(servers)
                conn, consumer = open_consumer(server, "queue:work", prefetch=own.randint(1, 10))
                with conn:
                    for _ in range(own.randint(1, 40)):
                        item = consumer.receive(timeout=0.2)
                        if item is None:
                            break
                        item.ack()
                        seen.deliver(bodies([item])[0], item.redelivered)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [
        threading.Thread(target=producer, args=(s, n), daemon=True)
        for s, n in zip(servers, "abc", strict=True)
    ]
    threads += [
        threading.Thread(target=churning_consumer, args=(rng.random(),), daemon=True)
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    try:
        until(
            lambda: (len(seen.acknowledged) == 3 * total and seen.all_in()) or bool(errors),
            "every message received",
            timeout=120,
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(DEADLINE)
    assert not errors, errors
    seen.check()
    counts: dict[str, int] = {}
    for body, _ in seen.delivered:
        counts[body] = counts.get(body, 0) + 1
    twice = {body: n for body, n in counts.items() if n > 1}
    assert not twice, f"acknowledged more than once: {sorted(twice)[:5]}"
    conn, last = open_consumer(servers[0], "queue:work")
    with conn:
        nothing_more(last)


# -- selectors and priorities ------------------------------------------------------------


def test_selectors_across_nodes_send_each_message_only_where_it_is_wanted(nodes: Nodes) -> None:
    a, b, c = nodes.start_linked("a", "b", "c")
    conn_b, reds = open_consumer(b, "queue:paint", selector="color = 'red'")
    conn_c, blues = open_consumer(c, "queue:paint", selector="color = 'blue'")
    with conn_b, conn_c:
        with connect(a.url) as conn, conn.session() as session:  # a knows both consumers
            for color in ("red", "blue"):  # once a probe of each colour reached its node
                session.send("queue:paint", f"probe-{color}", properties={"color": color})
        assert bodies(take(reds, 1)) == ["probe-red"]
        assert bodies(take(blues, 1)) == ["probe-blue"]
        with connect(a.url) as conn, conn.session() as session:
            for n in range(90):
                color = ("red", "blue", "green")[n % 3]
                session.send("queue:paint", f"{color}-{n}", properties={"color": color})
        got_red = bodies(take(reds, 30))
        got_blue = bodies(take(blues, 30))
        assert all(x.startswith("red-") for x in got_red), got_red
        assert all(x.startswith("blue-") for x in got_blue), got_blue
        nothing_more(reds)
        nothing_more(blues)
    # green never left a: a consumer there takes all of it
    conn_a, greens = open_consumer(a, "queue:paint")
    with conn_a:
        got_green = bodies(take(greens, 30))
        assert sorted(got_green) == sorted(f"green-{n}" for n in range(2, 90, 3))
        nothing_more(greens)


def test_a_consumer_on_another_node_gets_the_higher_priorities_first(nodes: Nodes) -> None:
    """Messages wait on a with no consumer anywhere; a consumer on b then gets them
    highest priority first, as it would on a."""
    a, b = nodes.start_linked("a", "b")
    with connect(a.url) as conn, conn.session() as session:
        for n in range(60):
            session.send("queue:jobs", f"p{n % 3}-{n}", priority=(1, 4, 9)[n % 3])
    conn_b, consumer = open_consumer(b, "queue:jobs", prefetch=1)
    with conn_b:
        got = bodies(take(consumer, 60))
        nothing_more(consumer)
    order = [int(x[1]) for x in got]  # 0, 1, 2: priorities 1, 4, 9
    assert order == sorted(order, reverse=True), got
