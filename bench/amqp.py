"""The AMQP 0-9-1 race: chute against RabbitMQ on five workloads, with pika's clients.

``python -m bench.amqp`` starts a ``chute serve`` (journal in a temporary
directory, ``sync = always``, AMQP on a free port) and runs, each in fresh queues,
with the producer and the consumers in processes of their own:

a) transient 1 producer / 1 consumer, 1 KiB, no-ack consumer (msgs/s delivered)
b) persistent with publisher confirms over a window of 100 unconfirmed (msgs/s
   confirmed), a durable queue
c) persistent, a confirm awaited per message (publishes/s)
d) fan-out 1 → 4 queues bound to a fanout exchange, transient (msgs/s delivered in all)
e) latency at a fixed rate (1,000 msgs/s), transient (p50 / p99 ms)

With ``--peers`` the same workloads run against RabbitMQ on 127.0.0.1:5672
(installed with ``python -m bench.peers install``, started and stopped here; see
:mod:`bench.peers`) and each row gets chute's ratio: for throughput ``chute / peer``,
for latency ``peer / chute``, so above 1 means chute is ahead. ``--base CHECKOUT``
races the chute of another checkout the same way (``chute_vs_base``: what a change
gained). ``--runs N`` reports medians of N runs; the brokers take turns run by run,
so a machine busier for a while weighs on each alike. Every figure has
``cpu_us_per_msg``, the broker process's CPU (user + system) over the run divided by
the messages counted: on a shared machine a steadier measure of the broker's own
cost than its throughput. Prints one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika

from bench import peers
from bench.broker import free_port, start_broker

BODY = b"x" * 1024
RATE = 1000  # row e's messages per second
WINDOW = 100  # row b's unconfirmed publishes


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, blocked_connection_timeout=60)
    )


# -- the workers (each in a process of its own) -------------------------------------------


def _consume(  # noqa: PLR0917 - a process target takes positional args
    port: int, queue: str, count: int, ready: Any, out: Any, latency: bool
) -> None:
    conn = _connect(port)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1000)
    got = 0
    lags: list[float] = []
    first = 0.0

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        nonlocal got, first
        if not got:
            first = time.perf_counter()
        got += 1
        if latency:
            lags.append(time.time() - struct.unpack_from(">d", body)[0])
        if got == count:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message, auto_ack=True)
    ready.set()
    channel.start_consuming()
    out.put((first, time.perf_counter(), lags))
    conn.close()


def _produce(  # noqa: PLR0917 - a process target takes positional args
    port: int, exchange: str, key: str, count: int, persistent: bool, rate: int
) -> None:
    conn = _connect(port)
    channel = conn.channel()
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    start = time.perf_counter()
    for i in range(count):
        if rate:
            due = start + i / rate
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.001))
            body = struct.pack(">d", time.time()) + BODY[8:]
        else:
            body = BODY
        channel.basic_publish(exchange, key, body, props)
    conn.close()


def _declare(port: int, queues: list[str], *, durable: bool, fanout: str = "") -> None:
    conn = _connect(port)
    channel = conn.channel()
    if fanout:
        channel.exchange_declare(fanout, "fanout", auto_delete=False)
    for queue in queues:
        channel.queue_declare(queue, durable=durable)
        if fanout:
            channel.queue_bind(queue, fanout)
    conn.close()


def _delete(port: int, queues: list[str]) -> None:
    conn = _connect(port)
    channel = conn.channel()
    for queue in queues:
        channel.queue_delete(queue)
    conn.close()


def _flow(port: int, count: int, consumers: int, *, latency: bool = False) -> dict[str, Any]:
    """Rows a, d, e: a producer and ``consumers`` no-ack consumers (a fanout if several)."""
    tag = uuid.uuid4().hex[:8]
    queues = [f"bench.{tag}.{i}" for i in range(consumers)]
    fanout = f"bench.{tag}.fan" if consumers > 1 else ""
    _declare(port, queues, durable=False, fanout=fanout)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    readies = [ctx.Event() for _ in queues]
    procs = [
        ctx.Process(target=_consume, args=(port, q, count, r, out, latency))
        for q, r in zip(queues, readies, strict=True)
    ]
    for proc in procs:
        proc.start()
    for ready in readies:
        ready.wait(60)
    producer = ctx.Process(
        target=_produce,
        args=(port, fanout, "" if fanout else queues[0], count, False, RATE if latency else 0),
    )
    producer.start()
    results = [out.get(timeout=600) for _ in procs]
    producer.join(60)
    for proc in procs:
        proc.join(60)
    start = min(r[0] for r in results)  # from the first delivery: no process start-up
    end = max(r[1] for r in results)
    _delete(port, queues)
    if latency:
        lags = sorted(lag for r in results for lag in r[2])
        return {
            "p50_ms": round(1000 * lags[len(lags) // 2], 3),
            "p99_ms": round(1000 * lags[int(len(lags) * 0.99)], 3),
            "messages": count * consumers,
        }
    return {"msgs_per_s": round(count * consumers / (end - start)), "messages": count * consumers}


def _confirmed(port: int, count: int, window: int) -> dict[str, Any]:
    """Rows b and c: persistent publishes confirmed over ``window`` (1: each awaited)."""
    queue = f"bench.{uuid.uuid4().hex[:8]}"
    _declare(port, [queue], durable=True)
    if window == 1:
        conn = _connect(port)
        channel = conn.channel()
        channel.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        start = time.perf_counter()
        for _ in range(count):
            channel.basic_publish("", queue, BODY, props)
        elapsed = time.perf_counter() - start
        conn.close()
    else:
        elapsed = _windowed(port, queue, count, window)
    _delete(port, [queue])
    return {"msgs_per_s": round(count / elapsed), "messages": count}


def _windowed(port: int, queue: str, count: int, window: int) -> float:
    """Publish with confirms, at most ``window`` unconfirmed (pika's asynchronous API)."""
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
    state = {"sent": 0, "confirmed": 0, "start": 0.0, "end": 0.0}
    props = pika.BasicProperties(delivery_mode=2)

    def on_open(conn: Any) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(channel: Any) -> None:
        def on_confirm(frame: Any) -> None:
            ack = frame.method
            state["confirmed"] = ack.delivery_tag if ack.multiple else state["confirmed"] + 1
            if state["confirmed"] >= count:
                state["end"] = time.perf_counter()
                channel.connection.close()
                return
            fill()

        def fill() -> None:
            while state["sent"] < count and state["sent"] - state["confirmed"] < window:
                channel.basic_publish("", queue, BODY, props)
                state["sent"] += 1

        def selected(_: Any) -> None:
            state["start"] = time.perf_counter()
            fill()

        channel.add_on_return_callback(lambda *a: None)
        channel.confirm_delivery(on_confirm, callback=selected)

    conn = pika.SelectConnection(
        params, on_open_callback=on_open, on_close_callback=lambda c, _: c.ioloop.stop()
    )
    conn.ioloop.start()
    return state["end"] - state["start"]


ROWS: list[tuple[str, str, Callable[[int, float], dict[str, Any]]]] = [
    ("a", "transient 1 producer / 1 consumer, msgs/s", lambda p, s: _flow(p, int(50000 * s), 1)),
    (
        "b",
        f"persistent, publisher confirms over a window of {WINDOW}, msgs/s",
        lambda p, s: _confirmed(p, int(20000 * s), WINDOW),
    ),
    (
        "c",
        "persistent, a confirm awaited per message, msgs/s",
        lambda p, s: _confirmed(p, int(3000 * s), 1),
    ),
    ("d", "fan-out 1 -> 4 queues, msgs/s delivered", lambda p, s: _flow(p, int(20000 * s), 4)),
    (
        "e",
        f"latency at {RATE} msgs/s, transient, ms",
        lambda p, s: _flow(p, int(5000 * s), 1, latency=True),
    ),
]


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds ``pid`` has used so far (0 where /proc does not say)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Target:
    """One broker raced: its AMQP port and the process whose CPU is counted."""

    def __init__(self, name: str, port: int, pid: Callable[[], int | None]) -> None:
        self.name = name
        self.port = port
        self.pid = pid
        self.figures: dict[str, list[dict[str, Any]]] = {}


def run_rows(targets: list[Target], runs: int, scale: float) -> None:
    """Each row ``runs`` times on every target, interleaved (row by row, run by run), so
    a machine that is busier for a while weighs on every broker alike. Each figure gets
    ``cpu_us_per_msg``: the broker's CPU over the run per message counted."""
    for row, title, work in ROWS:
        for n in range(runs):
            for target in targets:
                log(f"  {target.name} {row}) {title}: run {n + 1}")
                pid = target.pid()
                cpu = _cpu_s(pid)
                figure = work(target.port, scale)
                used = _cpu_s(pid) - cpu
                messages = figure.pop("messages")
                if pid is not None:
                    figure["cpu_us_per_msg"] = round(1e6 * used / messages, 1)
                target.figures.setdefault(row, []).append(figure)


def medians(target: Target) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row, title, _ in ROWS:
        figures = target.figures[row]
        out[row] = {"title": title} | {
            key: statistics.median(f[key] for f in figures) for key in figures[0]
        }
    return out


def ratios(chute: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    ratio: dict[str, float] = {}
    for row, figure in chute.items():
        other = peer[row]
        if "msgs_per_s" in figure:
            ratio[row] = round(figure["msgs_per_s"] / other["msgs_per_s"], 2)
        else:
            ratio[row] = round(other["p99_ms"] / figure["p99_ms"], 2)
    return ratio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="messages per row, x")
    parser.add_argument("--peers", action="store_true", help="race RabbitMQ too")
    parser.add_argument(
        "--base", metavar="CHECKOUT", help="race the chute of another checkout too (as base)"
    )
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"runs": args.runs, "scale": args.scale}
    brokers: list[tuple[subprocess.Popen[str], str]] = []
    targets: list[Target] = []
    rabbit: peers.RabbitMQ | None = None
    config = '[server]\namqp_port = {}\nsync = "always"\n'
    try:
        for name, checkout in (("chute", None), ("base", args.base)):
            if name == "base" and not checkout:
                continue
            data_dir = tempfile.mkdtemp(prefix="bench-amqp-")
            port = free_port()
            proc, _ = start_broker(data_dir, config.format(port), pythonpath=checkout)
            brokers.append((proc, data_dir))
            targets.append(Target(name, port, functools.partial(int, proc.pid)))
        if args.peers:
            if not shutil.which("rabbitmq-server"):
                peers.install()
            with contextlib.suppress(FileNotFoundError):  # ActiveMQ's part, if it is not here
                peers.configure()
            rabbit = peers.RabbitMQ()
            rabbit.start()
            targets.append(Target("rabbitmq", 5672, rabbit.pid))
        run_rows(targets, args.runs, args.scale)
    finally:
        for proc, data_dir in brokers:
            proc.terminate()
            proc.wait(30)
            shutil.rmtree(data_dir, ignore_errors=True)
        if rabbit is not None:
            rabbit.stop()
    for target in targets:
        report[target.name] = medians(target)
    for target in targets[1:]:
        report[f"chute_vs_{target.name}"] = ratios(report["chute"], report[target.name])
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
