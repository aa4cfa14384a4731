"""What a cluster costs against one node: broker CPU per message and throughput; prints JSON.

Starts an etcd, one plain ``chute serve`` (the one node) and ``--nodes`` N nodes of a
cluster (``chute serve --cluster … --node …``), each its own process with its own
journal. Each round runs, interleaved, the same work on each layout: N producer
processes sending ``--messages`` 1 KiB messages in all to one queue, and N consumer
processes taking them (auto acks, prefetch 1000):

* ``one_node``: every producer and consumer on the one node;
* ``spread`` (a): producer i and consumer i on node i;
* ``across`` (b): every producer on the first node, every consumer on the others:
  every message is handed over from one node to another.

Per layout and round: msgs/s (first send to last delivery) and the brokers' CPU
seconds per message (user + system time of every broker process of the layout,
summed, over the run, from ``/proc/PID/stat``), and for ``spread`` how many messages
a consumer got from a producer on another node. The summary gives the medians over
the rounds and, for each cluster layout, its ratios to the one node: CPU per message
(targets on a 2-core machine: ``spread`` <= 1.15, ``across`` <= 2.2) and throughput
(on a machine with more cores than processes, ``spread`` of N nodes aims at >= 0.8 N).

    python -m bench.cluster                         # 2 nodes, 100,000 messages, 3 rounds
    python -m bench.cluster --nodes 3 --messages 200000 --rounds 5
    python -m bench.cluster --persistent            # transactions of 100, 4 in flight
    python -m bench.cluster --pythonpath DIR        # the brokers of another checkout
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chute
from bench.broker import start_broker
from bench.cluster_nodes import start_etcd, start_node, wait_linked

SIZE = 1024
LAYOUTS = ("one_node", "spread", "across")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def producer_proc(  # noqa: PLR0917 - a multiprocessing target takes positional arguments
    url: str, address: str, count: int, origin: int, persistent: bool, go: Any, out: Any
) -> None:
    """Connects, puts None in ``out``, then once ``go`` is set sends ``count`` messages
    whose first byte is ``origin`` (its node's index) and puts when it began."""
    body = bytes([origin]) + b"x" * (SIZE - 1)
    with (
        chute.connect(url) as conn,
        conn.session(transacted=persistent, confirm_window=4 * persistent) as session,
    ):
        out.put(None)
        go.wait(60)
        start = time.time()
        if persistent:
            for i in range(1, count + 1):
                session.send(address, body)
                if i % 100 == 0 or i == count:
                    session.commit()
        else:
            for _ in range(count):
                session.send(address, body, persistent=False)
    out.put(start)


def consumer_proc(  # noqa: PLR0917
    url: str, address: str, origin: int, total: int, done: Any, ready: Any, out: Any
) -> None:
    """Takes messages until the consumers together got ``total`` (``done`` counts them,
    updated every 256 and when idle); reports its count, how many came from a producer
    on another node, and when its last one came."""
    got = crossed = unreported = 0
    last = 0.0
    with chute.connect(url) as conn, conn.session(ack="auto") as session:
        consumer = session.consumer(address, prefetch=1000)
        ready.set()
        idle_since = time.monotonic()
        while True:
            message = consumer.receive(timeout=0.1)
            if message is not None:
                got += 1
                unreported += 1
                last = time.time()
                if message.body[0] != origin:
                    crossed += 1
                idle_since = time.monotonic()
                if unreported < 256:
                    continue
            with done.get_lock():
                done.value += unreported
                finished = done.value >= total
            unreported = 0
            if finished or time.monotonic() - idle_since > 60:
                break
    out.put({"received": got, "crossed": crossed, "last": last})


def run_layout(
    brokers: list[tuple[subprocess.Popen[str], str]],
    producers_on: list[int],
    consumers_on: list[int],
    *,
    address: str,
    messages: int,
    persistent: bool,
) -> dict[str, Any]:
    """One run: a producer on each broker of ``producers_on`` (by index), a consumer on
    each of ``consumers_on``; every message counted once."""
    ctx = mp.get_context("spawn")
    out, starts = ctx.Queue(), ctx.Queue()
    done = ctx.Value("q", 0)
    consumers = []
    for index in consumers_on:
        ready = ctx.Event()
        proc = ctx.Process(
            target=consumer_proc,
            args=(brokers[index][1], address, index, messages, done, ready, out),
        )
        proc.start()
        consumers.append((proc, ready))
    for _proc, ready in consumers:
        ready.wait(60)
    go = ctx.Event()
    share = messages // len(producers_on)
    counts = [
        share + (1 if i < messages - share * len(producers_on) else 0)
        for i in range(len(producers_on))
    ]
    producers = [
        ctx.Process(
            target=producer_proc,
            args=(brokers[index][1], address, count, index, persistent, go, starts),
        )
        for index, count in zip(producers_on, counts, strict=True)
    ]
    for proc in producers:
        proc.start()
    for _ in producers:
        starts.get(timeout=60)  # connected
    cpu_before = sum(cpu_seconds(proc.pid) for proc, _url in brokers)
    go.set()
    start = min(starts.get(timeout=300) for _ in producers)
    results = [out.get(timeout=300) for _ in consumers]
    cpu = sum(cpu_seconds(proc.pid) for proc, _url in brokers) - cpu_before
    for proc in producers:
        proc.join(30)
    for proc, _ready in consumers:
        proc.join(30)
    received = sum(r["received"] for r in results)
    seconds = max(r["last"] for r in results) - start
    return {
        "received": received,
        "crossed": sum(r["crossed"] for r in results),
        "seconds": round(seconds, 3),
        "msgs_per_s": round(received / seconds),
        "broker_cpu_us_per_msg": round(cpu / received * 1e6, 2),
    }


def layouts(nodes: int) -> dict[str, tuple[list[int], list[int]]]:
    """Where the producers and consumers go, by broker index (0: the one node; 1..N: the
    cluster's nodes)."""
    cluster = list(range(1, nodes + 1))
    return {
        "one_node": ([0] * nodes, [0] * nodes),
        "spread": (cluster, cluster),
        "across": ([1] * (nodes - 1), cluster[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=2, help="nodes in the cluster (default 2)")
    parser.add_argument("--messages", type=int, default=100_000, help="per run (default 100,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, medians (default 3)")
    parser.add_argument("--persistent", action="store_true", help="persistent, in transactions")
    parser.add_argument(
        "--only", choices=LAYOUTS[1:], action="append", help="only these cluster layouts"
    )
    parser.add_argument("--pythonpath", help="run the brokers from this other checkout")
    parser.add_argument("--keep", type=Path, help="keep the data and logs in this directory")
    args = parser.parse_args()
    if args.nodes < 2:
        parser.error("--nodes must be 2 or more")
    work = Path(args.keep or tempfile.mkdtemp(prefix="chute-cluster-bench-"))
    etcd = start_etcd(work / "etcd")
    brokers: list[tuple[subprocess.Popen[str], str]] = []
    try:
        brokers.append(
            start_broker(str(work / "one"), log_level="warning", pythonpath=args.pythonpath)
        )
        names = [f"n{i}" for i in range(1, args.nodes + 1)]
        for name in names:
            brokers.append(start_node(work / name, etcd, "bench", name, pythonpath=args.pythonpath))
        wait_linked({name: brokers[i + 1][0] for i, name in enumerate(names)})
        where = layouts(args.nodes)
        chosen = ["one_node", *(args.only or LAYOUTS[1:])]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
        for round_ in range(1, args.rounds + 1):
            for layout in chosen:
                producers_on, consumers_on = where[layout]
                result = run_layout(
                    brokers,
                    producers_on,
                    consumers_on,
                    address=f"queue:bench-{layout}-{round_}",
                    messages=args.messages,
                    persistent=args.persistent,
                )
                runs[layout].append(result)
                print(json.dumps({"layout": layout, "round": round_, **result}), file=sys.stderr)
        report: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count()},
            "nodes": args.nodes,
            "messages": args.messages,
            "rounds": args.rounds,
            "persistent": args.persistent,
        }
        for layout in chosen:
            report[layout] = {
                "runs": runs[layout],
                "median_msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs[layout]),
                "median_broker_cpu_us_per_msg": statistics.median(
                    r["broker_cpu_us_per_msg"] for r in runs[layout]
                ),
            }
        for layout in chosen[1:]:
            # per round (same round: the same state of this shared machine), then the median
            pairs = list(zip(runs[layout], runs["one_node"], strict=True))
            report[layout]["cpu_per_msg_ratio"] = round(
                statistics.median(
                    r["broker_cpu_us_per_msg"] / one["broker_cpu_us_per_msg"] for r, one in pairs
                ),
                3,
            )
            report[layout]["throughput_ratio"] = round(
                statistics.median(r["msgs_per_s"] / one["msgs_per_s"] for r, one in pairs), 3
            )
        report["targets"] = {
            "spread_cpu_per_msg_ratio_max": 1.15,
            "across_cpu_per_msg_ratio_max": 2.2,
        }
        print(json.dumps(report, indent=2))
    finally:
        for proc, _url in brokers:
            proc.send_signal(signal.SIGTERM)
        for proc, _url in brokers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        etcd.stop()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
