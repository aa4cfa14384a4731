"""Cluster soak: ``kill -9`` each node of a 3-node cluster in turn and count every message.

What ``scripts/crash_soak.py`` is for one node, across a cluster: a real etcd and three
``chute serve --cluster … --node …`` nodes (a, b, c). Every message crosses a link:
a producer on each node sends persistent messages, each confirmed, to a queue of its
own, whose one consumer is on the next node (a's queue is consumed on b, b's on c, c's
on a), acking each message as it comes. Each round picks the next node, kills it with
SIGKILL after a random delay (mid-stream: hand-overs in flight both ways), waits until
the others see it leave (its lease, ``--ttl``, ran out: what they had in doubt with it
is theirs again), and starts it again on its data directory; the clients of the
killed node reconnect once it is back. At the end the producers stop and the consumers
take what is left. Then:

* nothing a producer had acknowledged is lost;
* nothing unknown appears (only bodies a producer tried to send; one whose send
  failed at a kill may or may not have been stored);
* a message delivered more than once is flagged ``redelivered`` on every later
  delivery;
* no node logged an error (and no client met one but a kill's).

One line per round, then a JSON summary; exit status 1 if one of those failed (the
data directories are then kept), 0 otherwise.

    python scripts/cluster_soak.py --rounds 9 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import chute
from chute.errors import ChuteError
from tests.integration.conftest import ChuteServer, free_port, start_server
from tests.integration.etcd_fixture import EtcdProcess, etcd_or_skip

NAMES = ("a", "b", "c")
CLUSTER = "soak"
WAIT = 60.0
"""Deadline for a node to leave, start or link, and for the last messages at the end."""


@dataclass
class Record:
    """Everything the clients saw, across threads."""

    attempted: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    unconfirmed: set[str] = field(default_factory=set)  # a send failed at a kill
    deliveries: dict[str, list[bool]] = field(default_factory=dict)  # body -> redelivered flags
    errors: list[str] = field(default_factory=list)
    last_delivery: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, body: str, redelivered: bool) -> None:
        with self.lock:
            self.deliveries.setdefault(body, []).append(redelivered)
            self.last_delivery = time.monotonic()

    def all_in(self) -> bool:
        with self.lock:
            return self.acknowledged <= self.deliveries.keys()

    def summary(self) -> dict[str, int]:
        with self.lock:
            delivered = self.deliveries.keys()
            flags = list(self.deliveries.values())
            return {
                "attempted": len(self.attempted),
                "acknowledged": len(self.acknowledged),
                "unconfirmed": len(self.unconfirmed),
                "unconfirmed_stored": len(self.unconfirmed & delivered),
                "delivered": len(delivered),
                "deliveries": sum(len(f) for f in flags),
                "duplicates": sum(len(f) - 1 for f in flags),
                "duplicates_without_redelivered": sum(not r for f in flags for r in f[1:]),
                "lost": len(self.acknowledged - delivered),
                "unknown": len(delivered - self.attempted),
                "errors": len(self.errors),
            }

    def violations(self) -> list[str]:
        with self.lock:
            found = [f"lost: {b}" for b in sorted(self.acknowledged - self.deliveries.keys())]
            found += [f"unknown: {b}" for b in sorted(self.deliveries.keys() - self.attempted)]
            found += [
                f"delivered again without redelivered: {body}"
                for body, flags in sorted(self.deliveries.items())
                if not all(flags[1:])
            ]
            found += [f"error: {e}" for e in self.errors]
            return found


class Node:
    """One node's succession of processes, on one port and one data directory."""

    def __init__(self, name: str, work: Path, etcd: EtcdProcess, ttl: int) -> None:
        self.name = name
        self.work = work
        self.port = free_port()
        self.config = work / f"{name}.toml"
        self.config.write_text(f"[cluster]\nttl = {ttl}\n")
        self.url_etcd = f"etcd://{etcd.address}/{CLUSTER}"
        self.cond = threading.Condition()
        self.server: ChuteServer | None = None
        self.started: list[ChuteServer] = []  # every process of this node, in order
        self.up = False
        self.incarnation = -1

    @property
    def url(self) -> str:
        return f"chute://127.0.0.1:{self.port}"

    @property
    def live(self) -> ChuteServer:
        """The process started last."""
        if self.server is None:
            raise RuntimeError(f"node {self.name} was never started")
        return self.server

    def start(self) -> ChuteServer:
        server = start_server(
            self.work,
            "--config",
            str(self.config),
            "--cluster",
            self.url_etcd,
            "--node",
            self.name,
            port=self.port,
            data_dir=self.work / f"data-{self.name}",
        )
        self.started.append(server)
        with self.cond:
            self.server = server
            self.up = True
            self.incarnation += 1
            self.cond.notify_all()
        return server

    def kill(self) -> None:
        with self.cond:
            self.up = False
        self.live.process.send_signal(signal.SIGKILL)
        self.live.process.wait(WAIT)

    def wait_up(self, stop: threading.Event) -> int | None:
        """The incarnation up now (waiting for one); None once stopping."""
        with self.cond:
            while not self.up:
                if stop.is_set():
                    return None
                self.cond.wait(0.1)
            return self.incarnation

    def stop(self) -> None:
        if self.server is not None and self.server.process.poll() is None:
            self.server.stop()


def reconnecting(
    node: Node, stop: threading.Event, record: Record, work: Callable[[str], None]
) -> None:
    """Run ``work(url)`` against ``node`` until ``stop``; when it fails because the node
    was killed, wait for the node to come back and run it again."""
    while not stop.is_set():
        incarnation = node.wait_up(stop)
        if incarnation is None:
            return
        try:
            work(node.url)
        except (ChuteError, OSError) as exc:
            with node.cond:
                killed = not node.up or node.incarnation != incarnation
            if not killed:
                with record.lock:
                    record.errors.append(f"on {node.name}: {type(exc).__name__}: {exc}")
                time.sleep(0.1)  # not a kill: try again a little later
            else:
                while not stop.is_set() and node.wait_up(stop) == incarnation:
                    time.sleep(0.05)  # the killed process's successor is not up yet


def producer(node: Node, queue: str, stop: threading.Event, record: Record) -> None:
    count = iter(range(1 << 62))

    def work(url: str) -> None:
        with chute.connect(url, timeout=10) as conn, conn.session() as session:
            while not stop.is_set():
                body = f"{node.name}-{next(count)}"
                with record.lock:
                    record.attempted.add(body)
                try:
                    session.send(queue, body)
                except BaseException:
                    with record.lock:
                        record.unconfirmed.add(body)
                    raise
                with record.lock:
                    record.acknowledged.add(body)

    reconnecting(node, stop, record, work)


def consumer(node: Node, queue: str, stop: threading.Event, record: Record) -> None:
    def work(url: str) -> None:
        with chute.connect(url, timeout=10) as conn:
            taker = conn.session(ack="individual").consumer(queue, prefetch=10)
            while not stop.is_set():
                item = taker.receive(timeout=0.2)
                if item is not None:
                    body = item.body.decode() if isinstance(item.body, bytes) else str(item.body)
                    record.delivered(body, item.redelivered)
                    item.ack()

    reconnecting(node, stop, record, work)


def until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def linked(
    nodes: dict[str, Node], to: str | None = None, since: dict[str, int] | None = None
) -> None:
    """Until every node logged a link to each other one (to ``to`` only, if given), in
    its lines from ``since`` on (a line index per node; default 0)."""
    for name, node in nodes.items():
        for other in nodes:
            if other != name and to in (None, name, other):
                start = (since or {}).get(name, 0)
                node.live.wait_for_line(f"linked to node {other}", start=start, timeout=WAIT)


def soak(args: argparse.Namespace, work: Path, record: Record) -> dict[str, object]:
    rng = random.Random(args.seed)  # noqa: S311 - kill delays, replayable
    etcd = EtcdProcess(etcd_or_skip(), work).start()
    nodes = {name: Node(name, work, etcd, args.ttl) for name in NAMES}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    rounds = 0
    try:
        for node in nodes.values():
            node.start()
        linked(nodes)
        for i, name in enumerate(NAMES):
            queue = f"queue:soak-{name}"
            on = nodes[NAMES[(i + 1) % len(NAMES)]]
            for target, where in ((producer, nodes[name]), (consumer, on)):
                thread = threading.Thread(
                    target=target, args=(where, queue, stop, record), daemon=True
                )
                thread.start()
                threads.append(thread)
        for round_ in range(args.rounds):
            victim = nodes[NAMES[round_ % len(NAMES)]]
            others = [n for n in nodes.values() if n is not victim]
            time.sleep(rng.uniform(args.min_delay, args.max_delay))  # mid-stream, at random
            since = {n.name: len(n.live.lines) for n in others}
            victim.kill()
            for other in others:
                other.live.wait_for_line(
                    f"node {victim.name} left", start=since[other.name], timeout=WAIT
                )
            victim.start()
            since[victim.name] = 0
            linked(nodes, victim.name, since)
            rounds += 1
            so_far = record.summary()
            so_far["not_delivered_yet"] = so_far.pop("lost")  # lost only if so at the end
            print(json.dumps({"round": rounds, "killed": victim.name, **so_far}), flush=True)
        stop.set()  # then fresh consumers take what is left: every acknowledged message
        for thread in threads:
            thread.join(WAIT)
        closing = threading.Event()
        drainers = []
        for i, name in enumerate(NAMES):
            on = nodes[NAMES[(i + 1) % len(NAMES)]]
            drainer = threading.Thread(
                target=consumer, args=(on, f"queue:soak-{name}", closing, record), daemon=True
            )
            drainer.start()
            drainers.append(drainer)
        until(record.all_in, "every acknowledged message")
        quiet = 2.0  # deliveries that may still come (a duplicate comes late, if at all)
        until(lambda: time.monotonic() - record.last_delivery > quiet, "the queues quiet")
        closing.set()
        for drainer in drainers:
            drainer.join(WAIT)
    finally:
        stop.set()
        for node in nodes.values():
            node.stop()
        etcd.kill()
        for node in nodes.values():  # what the nodes said went wrong (a kill says nothing)
            for server in node.started:
                for line in server.lines:
                    if " ERROR " in line or " CRITICAL " in line or "Traceback" in line:
                        record.errors.append(f"node {node.name} logged: {line}")
    return {"rounds": rounds, "seed": args.seed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="kills, a node each (default 9)")
    parser.add_argument("--seed", type=int, help="seed of the kill delays (default: random)")
    parser.add_argument("--ttl", type=int, default=2, help="the nodes' lease, s (default 2)")
    parser.add_argument("--min-delay", type=float, default=0.3, help="before a kill (0.3 s)")
    parser.add_argument("--max-delay", type=float, default=2.0, help="before a kill (2.0 s)")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 32)
    work = Path(tempfile.mkdtemp(prefix="chute-cluster-soak-"))
    record = Record()
    started = time.monotonic()
    try:
        outcome = soak(args, work, record)
    except (TimeoutError, AssertionError, RuntimeError) as exc:
        record.errors.append(f"the soak stopped: {exc}")
        outcome = {"seed": args.seed}
    summary = {**outcome, **record.summary(), "seconds": round(time.monotonic() - started, 1)}
    violations = record.violations()
    for line in violations[:50]:
        print(line)
    print(json.dumps(summary, indent=2))
    if violations:
        print(f"FAILED; the data is kept in {work}", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
