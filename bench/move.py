"""Moving a deep queue through the admin API: its rate, and what it costs everyone else.

Starts ``chute serve`` on a fresh journal with a small ``max_memory`` (most of
the queue pages out to disk), fills one queue with ``--count`` persistent
messages of ``--size`` bytes, and starts a bystander: a producer process
sending persistent messages (a confirm window of 64) to another queue and a
consumer process receiving them, each stamped with when it was sent. The
bystander runs ``--base`` seconds alone, then the whole queue is moved to a
third queue with ``POST /api/destinations/{address}/move``, followed by
``GET /api/moves/{id}`` until it ends. A third process pings the broker (a
request its loop answers at once) throughout. Reports:

- ``bystander.ratio``: the bystander's receive rate during the move over its
  rate alone (target >= 0.7), and ``longest_gap_ms``, the longest its consumer
  went without a message during the move;
- ``loop_stalls`` (beside ``loop_stalls_alone``, in the bystander's time alone):
  how many times the broker's event loop was held over 100 ms during the move,
  and the longest (target: none), as the broker's own watchdog saw them (run
  here with a 100 ms threshold, checking every 10 ms; its default is 2 s);
- ``ping_during_move`` (beside ``ping_alone``): the pings' max, p99, p50 and how
  many took over 100 ms, which a loop stall holds for as long (so does a client
  process the machine did not run meanwhile);
- ``move_rate``: messages moved per second, and the move's time;
- that every message moved: the source empty, the target holding ``--count``.

Prints JSON.

    python -m bench.move [--count 200000] [--size 1024] [--base 8] [--log FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import re
import shutil
import statistics
import struct
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import chute
from bench.broker import broker_log, free_port, pinger, start_broker

SOURCE = "queue:bench.move.source"
TARGET = "queue:bench.move.target"
BYSTANDER = "queue:bench.move.bystander"
STAMP = struct.Struct(">d")
STALL_S = 0.1
"""The loop stall the broker's watchdog reports in this bench (its default is 2 s)."""
WATCHED = f"""
import sys
from chute.server.watchdog import LoopWatchdog
LoopWatchdog.__init__.__kwdefaults__.update(stall={STALL_S}, tick=0.01)
from chute.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""``chute serve`` whose watchdog says every loop stall over STALL_S, with how long it was."""


def api(http: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{http}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - our broker
        return json.loads(answer.read())


def fill(url: str, count: int, size: int) -> None:
    with chute.connect(url, timeout=600) as conn, conn.session() as session:
        for start_at in range(0, count, 1000):
            n = min(1000, count - start_at)
            session.send_many(
                SOURCE, [f"{start_at + i:08d}".encode().ljust(size, b".") for i in range(n)]
            )


def producer(url: str, size: int, stop: Any) -> None:
    """Sends stamped persistent messages until told to stop."""
    pad = b"." * (size - STAMP.size)
    with chute.connect(url, timeout=600) as conn, conn.session(confirm_window=64) as session:
        while not stop.is_set():
            session.send(BYSTANDER, STAMP.pack(time.time()) + pad)


def consumer(url: str, ready: Any, stop: Any, out: Any) -> None:
    """Receives until told to stop; reports (received at, latency) of each message."""
    seen: list[tuple[float, float]] = []  # the latency is queueing too: not reported
    with chute.connect(url, timeout=600) as conn, conn.session() as session:
        receiver = session.consumer(BYSTANDER, prefetch=256)
        ready.set()
        while not stop.is_set():
            message = receiver.receive(timeout=0.5)
            if message is None:
                continue
            now = time.time()
            seen.append((now, now - STAMP.unpack_from(message.body)[0]))
    out.put(seen)


def ping_figures(samples: list[tuple[float, float]], t0: float, t1: float) -> dict[str, float]:
    took = sorted(s for t, s in samples if t0 <= t < t1) or [0.0]
    return {
        "max_ms": round(took[-1] * 1000, 1),
        "p99_ms": round(took[int(0.99 * (len(took) - 1))] * 1000, 2),
        "p50_ms": round(statistics.median(took) * 1000, 2),
        "over_100ms": sum(1 for s in took if s > 0.1),
    }


def stalls(log: list[str], t0: float, t1: float) -> dict[str, float]:
    """The loop stalls over STALL_S the watchdog logged between ``t0`` and ``t1``: how many,
    and the longest (the log gives tenths of a second)."""
    held = []
    for line in log:
        found = re.search(r"^(\S+ \S+),\d+ .*runs again after ([\d.]+) s", line)
        if found is None:
            continue
        at = time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))
        if t0 - 1 <= at <= t1 + 1:
            held.append(float(found.group(2)))
    return {"over_100ms": len(held), "longest_s": max(held, default=0.0)}


def depth(http: int, address: str) -> int:
    return int(api(http, "GET", f"/api/destinations/{address}")["depth"])


def main() -> None:  # noqa: PLR0915 - one run, told in order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--max-memory", default="32MiB", help="the broker's max_memory")
    parser.add_argument("--base", type=float, default=8.0, help="seconds of bystander alone")
    parser.add_argument("--log", help="write the broker's log here (its stalls name where)")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="chute-move-")
    http = free_port()
    proc, url = start_broker(
        data_dir,
        f'[server]\nmax_memory = "{args.max_memory}"\n',
        http_port=http,
        log_level="info",
        program=("-c", WATCHED),
    )
    log = broker_log(proc)
    try:
        began = time.perf_counter()
        fill(url, args.count, args.size)
        filled_s = time.perf_counter() - began
        api(http, "POST", "/api/destinations", {"address": TARGET})
        paged = api(http, "GET", f"/api/destinations/{SOURCE}")["paged"]
        ctx = mp.get_context("fork")
        ready, pinging, stop = ctx.Event(), ctx.Event(), ctx.Event()
        out: Any = ctx.Queue()
        pings: Any = ctx.Queue()
        receiving = ctx.Process(target=consumer, args=(url, ready, stop, out))
        receiving.start()
        ping = ctx.Process(target=pinger, args=(url, pinging, stop, pings, 0.001))
        ping.start()
        ready.wait(30)
        pinging.wait(30)
        sending = ctx.Process(target=producer, args=(url, args.size, stop))
        sending.start()
        time.sleep(1.0)  # the bystander settles in  (a bench, not a test: timing is the point)
        base_from = time.time()
        time.sleep(args.base)
        base_to = time.time()
        job = api(http, "POST", f"/api/destinations/{SOURCE}/move", {"to": TARGET})
        move_from = time.time()
        polls = []
        while job["state"] == "running":
            time.sleep(0.5)
            t0 = time.perf_counter()
            job = api(http, "GET", f"/api/moves/{job['id']}")
            polls.append(time.perf_counter() - t0)
        move_to = time.time()
        stop.set()
        seen: list[tuple[float, float]] = out.get(timeout=120)
        pinged: list[tuple[float, float]] = pings.get(timeout=120)
        sending.join(60)
        receiving.join(60)
        ping.join(60)

        def rate(t0: float, t1: float) -> float:
            return sum(1 for t, _ in seen if t0 <= t < t1) / (t1 - t0)

        during = [(t, lat) for t, lat in seen if move_from <= t < move_to]
        times = [move_from] + [t for t, _ in during] + [move_to]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        alone, moving = rate(base_from, base_to), rate(move_from, move_to)
        result = {
            "count": args.count,
            "size": args.size,
            "max_memory": args.max_memory,
            "paged_at_start": paged,
            "fill_s": round(filled_s, 1),
            "move": {
                "state": job["state"],
                "moved": job["moved"],
                "seconds": round(move_to - move_from, 1),
                "rate": round(job["moved"] / (move_to - move_from), 1),
                "source_depth_after": depth(http, SOURCE),
                "target_depth_after": depth(http, TARGET),
                "poll_max_ms": round(max(polls, default=0.0) * 1000, 1),
            },
            "bystander": {
                "rate_alone": round(alone, 1),
                "rate_during_move": round(moving, 1),
                "ratio": round(moving / alone, 3) if alone else None,
                "longest_gap_ms": round(max(gaps) * 1000, 1),
            },
            "ping_alone": ping_figures(pinged, base_from, base_to),
            "ping_during_move": ping_figures(pinged, move_from, move_to),
            "loop_stalls": stalls(log, move_from, move_to),
            "loop_stalls_alone": stalls(log, base_from, base_to),
        }
        print(json.dumps(result, indent=2))
        if args.log:
            Path(args.log).write_text("".join(log))
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data_dir, ignore_errors=True)
        Path(data_dir).with_suffix(".toml").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
