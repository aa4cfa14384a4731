"""Paging: the broker's peak RSS with a deep backlog (issue 3's memory bound).

Starts ``chute serve`` on a fresh journal with its default ``max_memory``,
fills one queue with ``--count`` persistent 1 KiB messages (a transacted
producer committing every 500) while no consumer is attached, then drains it
with one consumer, checking every message arrives once and in order. The
broker's RSS is sampled throughout; the figure is the kernel's high-water
mark (``VmHWM``). Prints JSON.

    python -m bench.paging [--count 2000000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import chute
from bench.broker import broker_log, start_broker

SEQ = struct.Struct(">Q")


def rss_kib(pid: int, field: str) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # the process is gone (a restart)
        return 0
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--restart", action="store_true", help="restart the broker between fill and drain"
    )
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="chute-paging-")
    proc, url = start_broker(data_dir)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.wait(0.5):
            samples.append((time.perf_counter() - t0, rss_kib(proc.pid, "VmRSS")))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fill(url, args.count, args.size)
        filled = time.perf_counter() - t0
        rss_full = rss_kib(proc.pid, "VmRSS")
        with chute.connect(url) as conn:
            stats = {d["address"]: d for d in _destinations(conn)}
        restart: dict[str, float] = {}
        if args.restart:
            peak_before = rss_kib(proc.pid, "VmHWM")
            proc.terminate()
            proc.wait(120)
            began = time.perf_counter()
            proc, url = start_broker(data_dir)
            restart = {
                "restart_s": round(time.perf_counter() - began, 1),
                "peak_rss_mib_before_restart": round(peak_before / 1024, 1),
                "peak_rss_mib_after_recovery": round(rss_kib(proc.pid, "VmHWM") / 1024, 1),
            }
            t0 += time.perf_counter() - began
        drain(url, args.count)
        drained = time.perf_counter() - t0 - filled
        peak = rss_kib(proc.pid, "VmHWM")
    except BaseException:
        print("".join(broker_log(proc)[-30:]))
        raise
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(
        json.dumps(
            {
                "backlog": args.count,
                "size": args.size,
                "fill_s": round(filled, 1),
                "fill_msgs_per_s": round(args.count / filled),
                "drain_s": round(drained, 1),
                "drain_msgs_per_s": round(args.count / drained),
                "depth_reported": stats.get("queue:backlog", {}).get("depth"),
                "rss_full_mib": round(rss_full / 1024, 1),
                "peak_rss_mib": round(peak / 1024, 1),
                "target_peak_rss_mib": 300,
                **restart,
                "rss_samples_mib": [
                    (round(t, 1), round(kib / 1024, 1))
                    for t, kib in samples[:: max(1, len(samples) // 20)]
                ],
            },
            indent=1,
        )
    )


def fill(url: str, count: int, size: int) -> None:
    """Send ``count`` numbered persistent messages, committing every 500."""
    tail = b"x" * (size - SEQ.size)
    with chute.connect(url) as conn, conn.session(transacted=True) as s:
        for i in range(count):
            s.send("queue:backlog", SEQ.pack(i) + tail)
            if i % 500 == 499:
                s.commit()
        s.commit()


def drain(url: str, count: int) -> None:
    """Receive every message, checking each arrives once and in order."""
    with chute.connect(url) as conn, conn.session(ack="auto") as s:
        c = s.consumer("queue:backlog", prefetch=1000)
        for expected in range(count):
            m = c.receive(timeout=30)
            if m is None:
                raise RuntimeError(f"drain stalled after {expected} messages")
            (seq,) = SEQ.unpack_from(m.body)
            if seq != expected:
                raise RuntimeError(f"message {seq} arrived where {expected} was due")


def _destinations(conn: Any) -> list[dict[str, object]]:
    stats = conn.stat()
    return list(stats.get("destinations", []))


if __name__ == "__main__":
    main()
