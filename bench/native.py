"""Native-protocol benchmarks against a real ``chute serve``; prints JSON.

Workloads (each the median of ``--runs``, every process separate, as a user runs them):

* ``throughput``: 1 producer / 1 consumer, transient 1 KiB messages, producer
  pipelining; msgs/s from the first send to the last delivery.
* ``latency``: 1 producer at a fixed rate (default 2,000 msgs/s), transient;
  end-to-end latency p50/p99/p999 in ms (send timestamp in the body).
* ``fanout``: 1 producer to a topic with 4 subscriber processes; deliveries/s.
* ``persistent``: like ``throughput`` with persistent messages, the producer
  committing a transaction every 100 sends (one journal sync per commit) and
  keeping up to 4 commits unconfirmed (``confirm_window=4``), as the peers were
  measured (notes/baselines.md, column b: a receipt every 100, 4 outstanding).
* ``sync``: one producer sends 5,000 persistent messages, each waiting for the
  broker's confirmation (fsync), with a consumer draining; confirmed sends/s,
  next to the fsyncs/s this disk sustains, probed in the same run.
* ``sync-group``: the same with ``--producers`` (4) producer processes sending
  4,000 each at once: what group commit makes of synchronous sends.

    python -m bench.native                 # every workload, 3 runs each
    python -m bench.native --only throughput --runs 5 --count 300000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

import chute
from bench.broker import start_broker

STAMP = struct.Struct(">Q")


def consumer_proc(  # noqa: PLR0917 - a multiprocessing target takes positional arguments
    url: str, address: str, count: int, ready: Any, out: Any, latency: bool
) -> None:
    lat: list[int] = []
    with chute.connect(url) as conn, conn.session(ack="auto") as s:
        c = s.consumer(address, prefetch=1000)
        ready.set()
        got = 0
        first = 0.0
        while got < count:
            m = c.receive(timeout=30)
            if m is None:
                break
            if not got:
                first = time.perf_counter()
            got += 1
            if latency:
                lat.append(time.time_ns() - STAMP.unpack_from(m.body)[0])
        end = time.time()
    out.put({"received": got, "end": end, "first": first, "latency_ns": lat})


def producer(  # noqa: PLR0917
    url: str, address: str, count: int, size: int, rate: float = 0.0, mode: str = "transient"
) -> float:
    body_tail = b"x" * (size - STAMP.size)
    tx = mode == "persistent"
    with chute.connect(url) as conn, conn.session(transacted=tx, confirm_window=4 * tx) as s:
        start = time.time()
        if mode == "persistent":
            for i in range(1, count + 1):
                s.send(address, STAMP.pack(time.time_ns()) + body_tail)
                if i % 100 == 0 or i == count:
                    s.commit()
        elif mode == "sync":
            for _ in range(count):
                s.send(address, STAMP.pack(time.time_ns()) + body_tail, persistent=True)
        elif rate:
            interval = 1.0 / rate
            t0 = time.perf_counter()
            for i in range(count):
                # Sleep, never spin: a spinning thread holds the GIL and the
                # client's writer thread would wait for Python's switch interval.
                delay = t0 + i * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                s.send(address, STAMP.pack(time.time_ns()) + body_tail, persistent=False)
        else:
            for _ in range(count):
                s.send(address, STAMP.pack(time.time_ns()) + body_tail, persistent=False)
    return start


def producer_proc(  # noqa: PLR0917 - a multiprocessing target takes positional arguments
    url: str, address: str, count: int, size: int, mode: str, go: Any, out: Any
) -> None:
    """One of several producers: starts when ``go`` is set, reports its start time."""
    go.wait(30)
    out.put(producer(url, address, count, size, 0.0, mode))


def run_once(
    url: str,
    address: str,
    *,
    count: int,
    size: int,
    consumers: int = 1,
    producers: int = 1,
    rate: float = 0.0,
    latency: bool = False,
    mode: str = "transient",
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = []
    readies = []
    for _ in range(consumers):
        ready = ctx.Event()
        proc = ctx.Process(target=consumer_proc, args=(url, address, count, ready, out, latency))
        proc.start()
        procs.append(proc)
        readies.append(ready)
    for ready in readies:
        ready.wait(30)
    if producers == 1:
        start = producer(url, address, count, size, rate, mode)
    else:
        go, starts = ctx.Event(), ctx.Queue()
        senders = [
            ctx.Process(
                target=producer_proc,
                args=(url, address, count // producers, size, mode, go, starts),
            )
            for _ in range(producers)
        ]
        for sender in senders:
            sender.start()
        go.set()
        start = min(starts.get(timeout=120) for _ in senders)
        for sender in senders:
            sender.join(30)
    results = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    end = max(r["end"] for r in results)
    delivered = sum(r["received"] for r in results)
    elapsed = end - start
    res: dict[str, Any] = {
        "delivered": delivered,
        "expected": count * consumers,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(delivered / elapsed),
    }
    if latency:
        lat: list[int] = sorted(x for r in results for x in r["latency_ns"])

        def pct(q: float) -> float:
            return round(float(lat[min(len(lat) - 1, int(q * len(lat)))]) / 1e6, 3)

        res.update({"p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999)})
    return res


def fsync_probe(directory: str, seconds: float = 2.0) -> int:
    """fsyncs/s of this disk from Python (128-byte appends, as baselines.md measured)."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.write(fd, b"x" * 128)
            os.fsync(fd)
            n += 1
        return round(n / (time.perf_counter() - t0))
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        choices=["throughput", "latency", "fanout", "persistent", "sync", "sync-group"],
        action="append",
    )
    parser.add_argument("--producers", type=int, default=4, help="sync-group producers")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--fanout-count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--duration", type=float, default=10, help="latency run seconds")
    parser.add_argument("--url", help="use a running broker instead of starting one")
    args = parser.parse_args()
    workloads = args.only or [
        "throughput",
        "latency",
        "fanout",
        "persistent",
        "sync",
        "sync-group",
    ]
    with tempfile.TemporaryDirectory() as data_dir:
        proc = None
        url = args.url
        if url is None:
            proc, url = start_broker(data_dir)
        try:
            report: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "runs": args.runs}
            for name in workloads:
                runs = []
                for i in range(args.runs):
                    tag = f"bench-{name}-{os.getpid()}-{i}"
                    if name == "throughput":
                        r = run_once(url, f"queue:{tag}", count=args.count, size=args.size)
                    elif name == "latency":
                        r = run_once(
                            url,
                            f"queue:{tag}",
                            count=int(args.rate * args.duration),
                            size=args.size,
                            rate=args.rate,
                            latency=True,
                        )
                    elif name == "persistent":
                        r = run_once(
                            url, f"queue:{tag}", count=args.count, size=args.size, mode="persistent"
                        )
                    elif name in ("sync", "sync-group"):
                        r = run_once(
                            url,
                            f"queue:{tag}",
                            count=5000 if name == "sync" else 4000 * args.producers,
                            size=args.size,
                            mode="sync",
                            producers=1 if name == "sync" else args.producers,
                        )
                        r["disk_fsyncs_per_s"] = fsync_probe(data_dir)
                        r["ratio_to_fsync"] = round(r["msgs_per_s"] / r["disk_fsyncs_per_s"], 2)
                    else:
                        r = run_once(
                            url,
                            f"topic:{tag}",
                            count=args.fanout_count,
                            size=args.size,
                            consumers=4,
                        )
                    runs.append(r)
                    print(json.dumps({"workload": name, "run": i + 1, **r}), file=sys.stderr)
                summary: dict[str, Any] = {"runs": runs}
                for key in (
                    "msgs_per_s",
                    "p50_ms",
                    "p99_ms",
                    "p999_ms",
                    "disk_fsyncs_per_s",
                    "ratio_to_fsync",
                ):
                    if key in runs[0]:
                        summary[f"median_{key}"] = statistics.median(r[key] for r in runs)
                report[name] = summary
            print(json.dumps(report, indent=2))
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(15)


if __name__ == "__main__":
    main()
