"""Browsing a deep queue: how long it takes, and what it costs everyone else (issue 13).

Starts ``chute serve`` on a fresh journal with a small ``max_memory`` (most of
the queue pages out to disk), fills one queue with ``--count`` persistent
messages of ``--size`` bytes, then browses it whole from ``--browsers``
processes at once while a bystander process does request/response pings (a
request the broker's loop answers at once) as fast as it can. Reports per run: the
browse's time and messages, the bystander's ping latency during the browse
(max, p99, p50), the broker's RSS before the browse and its peak during it.
Prints JSON: every run, and the medians.

``--pythonpath DIR`` runs the broker from another checkout (``/work/baseline``:
the code before browsing in pages); its browse is the one-answer ``Browse``
(``--legacy``, implied), which the broker builds whole on its loop and the
client then refuses once it passes the packet limit: the figures show what
building it cost the bystander.

    python -m bench.browse [--count 200000] [--runs 3]
    python -m bench.browse --pythonpath /work/baseline --runs 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import chute
from bench.broker import pinger, start_broker
from bench.paging import rss_kib
from chute.client import blocking
from chute.client.requests import Request, expect
from chute.errors import ChuteError
from chute.protocol import packets as p

QUEUE = "queue:bench.browse"


def fill(url: str, count: int, size: int) -> None:
    with chute.connect(url) as conn:
        tx = conn.session(transacted=True)
        for i in range(count):
            tx.send(QUEUE, f"{i:08d}".encode().ljust(size, b"."))
            if i % 500 == 499:
                tx.commit()
        tx.commit()


def browser(url: str, legacy: bool, go: Any, out: Any) -> None:
    """Browses the queue whole once ``go`` is set; reports (messages, began, ended, error)."""
    with blocking.connect(url, timeout=600) as conn, conn.session() as s:
        go.wait()
        began = time.time()
        got, error = 0, ""
        try:
            if legacy:  # the one-answer Browse of the code before pages
                whole = Request(p.Browse(QUEUE), lambda x: expect(x, p.BrowseResult).messages)
                got = len(conn._link.call(whole))
            else:
                for _message in s.iter_browse(QUEUE):
                    got += 1
        except ChuteError as exc:
            error = f"{type(exc).__name__}: {exc}"
        out.put((got, began, time.time(), error))


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="chute-browse-")
    config = f'[server]\nmax_memory = "{args.max_memory}"\n'
    proc, url = start_broker(data_dir, config, pythonpath=args.pythonpath)
    try:
        fill(url, args.count, args.size)
        ctx = mp.get_context("fork")
        ready, stop, go = ctx.Event(), ctx.Event(), ctx.Event()
        pings: Any = ctx.Queue()
        results: Any = ctx.Queue()
        bystander = ctx.Process(target=pinger, args=(url, ready, stop, pings))
        bystander.start()
        browsers = [
            ctx.Process(target=browser, args=(url, args.legacy, go, results))
            for _ in range(args.browsers)
        ]
        for b in browsers:
            b.start()
        ready.wait(30)
        rss_before = rss_kib(proc.pid, "VmRSS")
        peak = [rss_before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.05):
                peak.append(rss_kib(proc.pid, "VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        go.set()
        done = [results.get(timeout=900) for _ in browsers]
        sampling.set()
        sampler.join()
        stop.set()
        samples: list[tuple[float, float]] = pings.get(timeout=60)
        bystander.join(30)
        for b in browsers:
            b.join(30)
        began = min(d[1] for d in done)
        ended = max(d[2] for d in done)
        during = sorted(s for t, s in samples if began <= t <= ended) or [0.0]
        return {
            "browse_s": round(ended - began, 2),
            "messages": [d[0] for d in done],
            "errors": sorted({d[3] for d in done if d[3]}),
            "pings_during": len(during),
            "ping_max_ms": round(during[-1] * 1000, 2),
            "ping_p99_ms": round(during[int(0.99 * (len(during) - 1))] * 1000, 2),
            "ping_p50_ms": round(statistics.median(during) * 1000, 3),
            "rss_before_browse_mib": round(rss_before / 1024, 1),
            "rss_peak_during_browse_mib": round(max(peak) / 1024, 1),
        }
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data_dir, ignore_errors=True)
        Path(data_dir).with_suffix(".toml").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--max-memory", default="32MiB", help="the broker's max_memory")
    parser.add_argument("--browsers", type=int, default=1, help="processes browsing at once")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--pythonpath", help="run the broker from this checkout instead")
    parser.add_argument("--legacy", action="store_true", help="browse with the one-answer Browse")
    args = parser.parse_args()
    args.legacy = args.legacy or bool(args.pythonpath)
    runs = [run_once(args) for _ in range(args.runs)]
    medians = {
        key: statistics.median(r[key] for r in runs)
        for key in runs[0]
        if isinstance(runs[0][key], int | float)
    }
    print(
        json.dumps(
            {
                "broker": args.pythonpath or "this checkout",
                "count": args.count,
                "size": args.size,
                "max_memory": args.max_memory,
                "browsers": args.browsers,
                "runs": runs,
                "median": medians,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
