"""One persistent producer and one reader on a stream, the broker of this checkout and of
another interleaved; prints JSON.

The producer sends N persistent 1 KiB messages one by one with a confirm window of 64
(docs/client.md) to a fresh stream while a consumer reads it from ``first`` with a
prefetch of 1000; msgs/s from the first send to the reader's last message, the
broker's CPU (user + system) per message, and its journal's fsyncs per 1000 messages
(from its ``/metrics``: how many sends each fsync confirmed). Each run starts its own
broker (journal, ``sync = always``); with ``--pythonpath DIR`` every round runs that
checkout's broker too, right after this one's, and the ratios are of the medians.

    python -m bench.stream_produce --count 20000 --runs 3 --pythonpath /path/to/main
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from typing import Any

import chute
from bench.broker import free_port, start_broker
from bench.stream_read import cpu_seconds

STREAM = "stream:produce"
WINDOW = 64


def fsyncs(http_port: int) -> float:
    """The fsyncs the broker's journal made so far (its ``/metrics``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("chute_journal_fsync_seconds_count "):
                return float(line.split()[1])
    raise RuntimeError("the broker's /metrics give no chute_journal_fsync_seconds_count")


def one_run(count: int, size: int, pythonpath: str | None) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="chute-stream-produce-")
    http_port = free_port()
    proc, url = start_broker(data_dir, pythonpath=pythonpath, http_port=http_port)
    try:
        body = b"x" * size
        done = threading.Event()
        got = 0

        def read() -> None:
            nonlocal got
            with chute.connect(url, timeout=120) as conn:
                consumer = conn.session().consumer(STREAM, prefetch=1000, offset="first")
                while got < count:
                    if consumer.receive(timeout=60) is None:
                        break
                    got += 1
            done.set()

        with chute.connect(url, timeout=120) as conn:
            session = conn.session(confirm_window=WINDOW)
            session.send(STREAM, b"start")  # the stream exists before the reader opens
            session.flush()
            count += 1
            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            cpu0 = sum(cpu_seconds(proc.pid))
            synced0 = fsyncs(http_port)
            t0 = time.perf_counter()
            for _ in range(count - 1):
                session.send(STREAM, body)
            session.flush()
            sent = time.perf_counter() - t0
            done.wait(120)
            wall = time.perf_counter() - t0
            cpu = sum(cpu_seconds(proc.pid)) - cpu0
            synced = fsyncs(http_port) - synced0
        if got != count:
            raise RuntimeError(f"the reader got {got} messages, expected {count}")
        return {
            "msgs_per_s": round((count - 1) / wall),
            "sent_msgs_per_s": round((count - 1) / sent),
            "broker_cpu_us_per_msg": round(cpu / (count - 1) * 1e6, 1),
            "fsyncs_per_1k_msgs": round(synced / (count - 1) * 1000, 1),
        }
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pythonpath", help="interleave runs of this checkout's broker")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for _ in range(args.runs):
        runs["this"].append(one_run(args.count, args.size, None))
        if args.pythonpath:
            runs["other"].append(one_run(args.count, args.size, args.pythonpath))
    out: dict[str, Any] = {"count": args.count, "size": args.size, "runs": runs}
    medians = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for name, rs in runs.items()
        if rs
    }
    out["median"] = medians
    if args.pythonpath:
        out["this_vs_other"] = {
            k: round(medians["this"][k] / medians["other"][k], 2) for k in medians["this"]
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
