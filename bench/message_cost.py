"""What one queued message really costs the broker's memory, measured.

    python -m bench.message_cost              # 3 runs of each case, medians
    python -m bench.message_cost --runs 1

A real ``chute serve`` (journal, paging off) takes N messages into a durable queue
with no consumer; the cost is the growth of its RSS divided by N. Compared with
what the broker counts for each (``chute.core.model.paging.held_cost``), the number
``max_memory`` and ``memory_high_watermark`` are held against. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from typing import Any

import chute
from bench.broker import start_broker
from bench.paging import rss_kib
from chute.core.model.paging import held_cost
from chute.message import Message

CASES = (  # body bytes, persistent, messages
    (16, False, 200_000),
    (1024, False, 100_000),
    (16, True, 30_000),
)
CONFIG = '[server]\nmax_memory = "0"\nmemory_high_watermark = "0"\nflow_backlog = 0\n'


def one(body_size: int, persistent: bool, count: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_broker(f"{tmp}/data", CONFIG)
        try:
            with chute.connect(url) as conn, conn.session() as s:
                s.send("queue:warm", b"x")
                s.flush()
                before = rss_kib(proc.pid, "VmRSS") * 1024
                body = b"x" * body_size
                for _ in range(count):
                    s.send("queue:q", body, persistent=persistent)
                s.flush()
                conn.stat()  # everything sent has been taken
                return (rss_kib(proc.pid, "VmRSS") * 1024 - before) / count
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for body_size, persistent, count in CASES:
        runs = [one(body_size, persistent, count) for _ in range(args.runs)]
        out[f"{body_size} B body, persistent={persistent}"] = {
            "measured_bytes_per_message": round(statistics.median(runs)),
            "runs": [round(r) for r in runs],
            "counted_bytes_per_message": held_cost(
                Message(b"x" * body_size, persistent=persistent)
            ),
            "messages": count,
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
