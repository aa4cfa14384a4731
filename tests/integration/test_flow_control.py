"""Producer flow control against a real broker: a fast producer cannot bury slow consumers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import chute

from .conftest import start_server

COUNT = 30_000
BACKLOG = 1_000


def depth(conn: chute.Connection, address: str) -> int:
    for dest in conn.stat().get("destinations", []):
        if dest["address"] == address:
            return int(dest["depth"])
    return 0


def test_a_fast_producer_waits_for_slow_consumers_and_nothing_is_lost(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(f"[server]\nflow_backlog = {BACKLOG}\n")
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as consumer_conn, chute.connect(server.url) as watcher:
            s = consumer_conn.session(ack="auto")
            consumer = s.consumer("queue:flow", prefetch=50)
            sent = threading.Event()

            def produce() -> None:
                with chute.connect(server.url) as conn, conn.session() as p:
                    for i in range(COUNT):
                        p.send("queue:flow", str(i).encode(), persistent=False)
                sent.set()

            producer = threading.Thread(target=produce)
            producer.start()
            got: list[int] = []
            deepest = 0
            while len(got) < COUNT:
                m = consumer.receive(timeout=30)
                assert m is not None, f"stalled after {len(got)} messages"
                got.append(int(m.body))
                if len(got) % 500 == 0:
                    deepest = max(deepest, depth(watcher, "queue:flow"))
                    time.sleep(0.02)  # a slow consumer: about 25,000 msgs/s at most
            producer.join(30)
            assert sent.is_set()
        assert got == list(range(COUNT))
        # Without flow control the producer runs ahead by tens of thousands; with it the
        # backlog stays near flow_backlog (plus what one read of the socket brings).
        assert deepest < COUNT // 3, deepest
    finally:
        server.stop()
