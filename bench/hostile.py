"""Hostile and careless clients against a live broker, each beside a bystander.

    python -m bench.hostile                    # every attack
    python -m bench.hostile --only slowloris,big-frames --seconds 4

For each attack: a fresh ``chute serve`` (journal; ``max_memory`` 32 MiB,
``memory_high_watermark`` 96 MiB; users for the attacks after login, a tmpfs
for the small disk), a bystander that sends persistent 1 KiB messages and
receives them (request by request) for ``--seconds`` without the attack, then
again while the attack runs in another process. Reported per attack: the
broker's peak RSS during it against the bound (the high watermark plus a fixed
margin), the bystander's round trips/s with and without the attack and their
ratio, the log lines the broker wrote at start and during the attack (its
WARNING and ERROR lines at start quoted), acknowledged messages lost (every
send the broker confirmed must be received, and for ``stray-segment`` every
message stored before the restart), and whether the broker is up at the end.
Targets: RSS under the bound, ratio >= 0.70, few log lines, 0 lost, up. Prints
JSON. The attacks that send badly rather than much are in
:mod:`bench.hostile_input`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import chute
from bench.broker import broker_log, free_port, start_broker
from bench.hostile_input import ATTACKS as INPUT_ATTACKS
from bench.hostile_input import USERS, Setup, Target, mounted
from bench.paging import rss_kib
from chute.errors import ChuteError

HIGH_WATERMARK = 96 << 20
MARGIN = 128 << 20
"""What the broker may hold besides its queues' counted memory: the interpreter and its
modules (~35 MiB), socket buffers, what the journal's writer is behind, the allocator."""
CONFIG = """[server]
max_memory = "32MiB"
memory_high_watermark = "96MiB"
max_subscription_bytes = "8MiB"
block_timeout_ms = 60000
"""
BODY = b"b" * 1024


# -- the attacks (each runs in its own process until told to stop) -----------------------


def big_frames(t: Target, stop: Any) -> None:
    """40 sockets that never log in, each announcing a 15 MiB packet and sending it."""
    socks = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", t.port))
        s.sendall(struct.pack(">I", 15 << 20) + b"\x01" * 16)
        socks.append(s)
    chunk = b"\x00" * 65536
    while not stop.is_set():
        for s in list(socks):
            try:
                s.setblocking(False)
                s.send(chunk)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                socks.remove(s)
        stop.wait(0.01)


def idle_sockets(t: Target, stop: Any) -> None:
    """As many idle sockets as the broker lets in (and more), never a byte sent."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    for i in range(5000):
        try:
            socks.append(socket.create_connection(("127.0.0.1", t.port if i % 2 else t.stomp)))
        except OSError:
            break
    stop.wait()


def slowloris(t: Target, stop: Any) -> None:
    """600 STOMP connections trickling a CONNECT frame one byte a second, never finishing."""
    frame = b"CONNECT\naccept-version:1.2\nhost:x\n" + b"x" * 4096
    socks = [socket.create_connection(("127.0.0.1", t.stomp)) for _ in range(600)]
    sent = 0
    while not stop.is_set() and socks:
        for s in list(socks):
            try:
                s.send(frame[sent : sent + 1])
            except OSError:
                socks.remove(s)
        sent += 1
        stop.wait(1.0)


def slow_subscriber(t: Target, stop: Any) -> None:
    """A STOMP subscriber to a topic that never reads its socket, and a publisher."""
    stuck = socket.create_connection(("127.0.0.1", t.stomp))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
    stuck.recv(4096)
    stuck.sendall(b"SUBSCRIBE\nid:0\ndestination:/topic/news\nack:auto\n\n\0")
    with chute.connect(t.url) as conn, conn.session() as s:
        while not stop.is_set():
            for _ in range(256):
                s.send("topic:news", b"n" * 8192, persistent=False)
            s.flush()


def queue_flood(t: Target, stop: Any) -> None:
    """One client making queues as fast as it can (each by sending to it)."""
    with chute.connect(t.url) as conn, conn.session() as s:
        i = 0
        while not stop.is_set():
            try:
                s.send(f"queue:flood.{i}", b"x", persistent=False)
                if i % 256 == 0:
                    s.flush()
            except ChuteError:
                stop.wait(0.05)  # refused past the destination limit: keep trying
            i += 1


def memory_flood(t: Target, stop: Any) -> None:
    """Non-persistent 1 KiB messages to a queue nobody reads, as fast as one can send."""
    with chute.connect(t.url) as conn, conn.session() as s:
        while not stop.is_set():
            for _ in range(1024):
                s.send("queue:flood", BODY, persistent=False)
            try:
                s.flush()
            except ChuteError:
                stop.wait(0.1)


def transaction_flood(t: Target, stop: Any) -> None:
    """A transaction that sends forever and never commits."""
    with chute.connect(t.url) as conn, conn.session(transacted=True) as s:
        while not stop.is_set():
            try:
                for _ in range(256):
                    s.send("queue:tx-flood", BODY)
                s.flush()
            except ChuteError:
                stop.wait(0.1)


def big_browse(t: Target, stop: Any) -> None:
    """Four clients browsing a 100,000-message queue whole, over and over."""
    with chute.connect(t.url) as conn, conn.session() as s:
        for _ in range(100):
            for _ in range(1000):
                s.send("queue:deep", BODY, persistent=False)
            s.flush()

    def browse() -> None:
        with chute.connect(t.url) as conn, conn.session() as s:
            while not stop.is_set():
                for _ in s.iter_browse("queue:deep"):
                    if stop.is_set():
                        break

    threads = [threading.Thread(target=browse) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


ATTACKS: dict[str, tuple[Callable[[Target, Any], None], Setup]] = {
    "big-frames": (big_frames, Setup()),
    "idle-sockets": (idle_sockets, Setup()),
    "slowloris": (slowloris, Setup()),
    "slow-subscriber": (slow_subscriber, Setup()),
    "queue-flood": (queue_flood, Setup()),
    "memory-flood": (memory_flood, Setup()),
    "transaction-flood": (transaction_flood, Setup()),
    "big-browse": (big_browse, Setup()),
    **INPUT_ATTACKS,
}


# -- the bystander ------------------------------------------------------------------------


class Bystander:
    """Request-by-request persistent sends and receives on its own queue."""

    def __init__(self, target: Target) -> None:
        self.conn = target.connect()
        self.producer = self.conn.session()
        self.consumer_session = self.conn.session(ack="auto")
        self.consumer = self.consumer_session.consumer("queue:bystander")
        self.confirmed: list[bytes] = []
        self.received: list[bytes] = []
        self.n = 0
        self.error: str | None = None  # why its sends stopped, if they did

    def run(self, seconds: float) -> float:
        """Round trips per second for ``seconds``."""
        end = time.monotonic() + seconds
        done = 0
        start = time.monotonic()
        while time.monotonic() < end:
            body = f"{self.n:09d}".encode() + BODY
            self.n += 1
            try:
                self.producer.send("queue:bystander", body)
                self.producer.flush()
            except ChuteError as exc:  # refused, or no answer in time: the rate so far
                self.error = str(exc)
                break
            self.confirmed.append(body[:9])
            got = self.consumer.receive(timeout=30)
            if got is None:
                break
            self.received.append(got.body[:9])
            done += 1
        return done / (time.monotonic() - start)

    def lost(self) -> int:
        while True:
            got = self.consumer.receive(timeout=1)
            if got is None:
                break
            self.received.append(got.body[:9])
        return len(set(self.confirmed) - set(self.received))

    def close(self) -> None:
        self.conn.close()


class Broker:
    """``chute serve`` for one attack, its output read on into :attr:`lines`."""

    def __init__(self, data_dir: str, config: str) -> None:
        self.target = Target(free_port(), free_port(), free_port())
        ports = self.target
        self.proc, _ = start_broker(
            data_dir,
            config,
            port=ports.port,
            stomp_port=ports.stomp,
            http_port=ports.http,
            log_level=None,
        )
        self.lines = broker_log(self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def one(name: str, seconds: float) -> dict[str, Any]:
    attack, setup = ATTACKS[name]
    with tempfile.TemporaryDirectory() as tmp:
        data = f"{tmp}/data"
        unmount = None
        try:
            if setup.disk is not None:
                unmount = mounted(f"{tmp}/disk", setup.disk)
                data = f"{tmp}/disk/data"
            config = CONFIG + setup.config + (USERS if setup.users else "")
            if setup.prepare is not None:
                setup.prepare(data, config)
            broker = Broker(data, config)
        except (OSError, RuntimeError) as exc:
            if unmount is not None:
                unmount()
            return {"attack": name, "error": str(exc)}
        try:
            return {"attack": name, **measure(broker, attack, setup, seconds)}
        except (OSError, ChuteError) as exc:
            return {"attack": name, "error": str(exc), "up": broker.proc.poll() is None}
        finally:
            broker.stop()
            if unmount is not None:
                unmount()


def measure(
    broker: Broker, attack: Callable[[Target, Any], None], setup: Setup, seconds: float
) -> dict[str, Any]:
    """The bystander calm, then beside ``attack``; what the broker did meanwhile."""
    start_lines = len(broker.lines)
    warnings = [
        line.strip()[:200] for line in broker.lines if " WARNING " in line or " ERROR " in line
    ]
    target = broker.target
    if setup.users:
        target = Target(target.port, target.stomp, target.http, login="bystander")
    pid = broker.proc.pid
    bystander = Bystander(target)
    calm = bystander.run(seconds)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    attacker = ctx.Process(target=attack, args=(target, stop))
    peak = [rss_kib(pid, "VmRSS") * 1024]
    watching = threading.Event()

    def watch() -> None:
        while not watching.wait(0.05):
            peak.append(rss_kib(pid, "VmRSS") * 1024)

    watcher = threading.Thread(target=watch)
    watcher.start()
    calm_lines = len(broker.lines)
    attacker.start()
    time.sleep(min(2.0, seconds / 2))  # let the attack get going
    try:
        attacked = bystander.run(seconds)
    finally:
        stop.set()
        attacker.join(30)
        if attacker.is_alive():
            attacker.kill()
        attack_lines = len(broker.lines) - calm_lines
        watching.set()
        watcher.join()
    lost = bystander.lost()
    bystander.close()
    if setup.lost is not None:
        lost += setup.lost(target)
    with target.connect() as conn:
        up = "destinations" in conn.stat("queue:bystander")
    bound = HIGH_WATERMARK + MARGIN
    return {
        "peak_rss_mib": round(max(peak) / (1 << 20), 1),
        "memory_high_watermark_mib": HIGH_WATERMARK >> 20,
        "rss_bound_mib": bound >> 20,
        "rss_ok": max(peak) < bound,
        "bystander_calm_per_s": round(calm),
        "bystander_attacked_per_s": round(attacked),
        "bystander_ratio": round(attacked / calm, 2) if calm else None,
        "log_lines_at_start": start_lines,
        "warnings_at_start": warnings,
        "log_lines_during_attack": attack_lines,
        "acked_lost": lost,
        "up": up,
        **({"bystander_error": bystander.error} if bystander.error else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated attacks")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ATTACKS)
    results = []
    for name in names:
        result = one(name, args.seconds)
        results.append(result)
        print(json.dumps(result), flush=True, file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
