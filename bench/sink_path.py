"""The Spark sink's path without Spark: prepared chunks from two producers; prints JSON.

Two producer processes (the sink's two tasks) each send N/2 persistent 1 KiB
messages to a stream in a transacted session, preparing every 8,192 (the sink's
chunk), then one connection commits all the prepared transactions together with
``commit_batch``, as the sink's driver does. Both ways of sending, each run
on a fresh broker (journal, ``sync = always``):

* ``send``: ``Session.send`` of each message (the sink before SendMany);
* ``send_many``: ``Session.send_many`` of each chunk (the sink now: few requests,
  one content block per message encoded once).

Per way: rows/s from the first send to the commit's answer, and the broker's CPU
(user + system) and the producers' CPU per message; the medians of the runs, and
the ratio send_many / send of each median.

    python -m bench.sink_path                      # N = 100,000, 3 runs
    python -m bench.sink_path --count 20000 --runs 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import tempfile
import time
from typing import Any

import chute
from bench.broker import start_broker
from bench.stream_read import cpu_seconds

BODY = 1024
CHUNK = 8192
STREAM = "stream:sink-path"


def producer(url: str, part: int, count: int, many: bool, out: Any) -> None:
    """Send ``count`` messages, prepared every CHUNK; report (xids, CPU seconds)."""
    started = time.process_time()
    body = os.urandom(BODY)
    xids: list[str] = []
    with chute.connect(url, timeout=60) as conn:
        session = conn.session(transacted=True)
        left = count
        while left:
            n = min(CHUNK, left)
            if many:
                session.send_many(STREAM, [body] * n)
            else:
                for _ in range(n):
                    session.send(STREAM, body)
            xids.append(f"spark/bench/0/{part}/0/x.{len(xids)}")
            session.prepare(xids[-1])
            left -= n
    out.put((xids, time.process_time() - started))


def one_run(count: int, many: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        proc, url = start_broker(data)
        try:
            before = sum(cpu_seconds(proc.pid))
            started = time.perf_counter()
            out: Any = mp.Queue()
            tasks = [
                mp.Process(target=producer, args=(url, part, count // 2, many, out))
                for part in range(2)
            ]
            for task in tasks:
                task.start()
            results = [out.get(timeout=600) for _ in tasks]
            for task in tasks:
                task.join()
            with chute.connect(url, timeout=60) as conn:
                xids = [xid for found, _ in results for xid in found]
                conn.commit_batch("bench", 0, xids, keep=False)
                first, head = conn.cursor_open(STREAM)
            seconds = time.perf_counter() - started
            if head - first != count // 2 * 2:
                raise RuntimeError(f"the stream holds {head - first} messages, not {count}")
            broker = sum(cpu_seconds(proc.pid)) - before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return {
        "rows_per_s": round(count / seconds),
        "broker_cpu_us_per_msg": round(broker / count * 1e6, 1),
        "producer_cpu_us_per_msg": round(sum(c for _, c in results) / count * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"send": [], "send_many": []}
    for _ in range(args.runs):  # interleaved, so drift hits both ways alike
        for way, done in runs.items():
            done.append(one_run(args.count, way == "send_many"))
    medians = {
        way: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for way, rs in runs.items()
    }
    ratios = {
        key: round(medians["send_many"][key] / medians["send"][key], 2) for key in medians["send"]
    }
    report = {
        "count": args.count,
        "body_bytes": BODY,
        "chunk": CHUNK,
        "median": medians,
        "send_many_vs_send": ratios,
        "runs": runs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
