"""The native protocol over TCP, a WebSocket and plain HTTP requests, in one run; prints JSON.

One ``chute serve`` (journal in a temporary directory, native and HTTP ports);
the same workloads of :mod:`bench.native` through ``chute://``, ``ws://`` and
``http://`` URLs, interleaved round by round so that the machine's drift is
shared:

* ``throughput``: 1 producer / 1 consumer process, transient 1 KiB messages,
  msgs/s from the first send to the last delivery;
* ``latency``: a producer at a fixed rate (default 1,000 msgs/s), end-to-end
  latency p50/p99/p999 in ms;
* ``sync``: 2,000 persistent sends each waiting for the broker's confirmation
  (a request and its answer: one round trip of the transport each).

Medians of ``--runs`` per transport, and each one's ratio to TCP's.

    python -m bench.transports              # 3 rounds
    python -m bench.transports --runs 5 --count 100000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from bench.broker import free_port, start_broker
from bench.native import run_once

TRANSPORTS = ("tcp", "ws", "http")
SYNC_COUNT = 2000


def start(data_dir: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``chute serve`` with its native and HTTP ports; the URL of each transport."""
    native, http = free_port(), free_port()
    proc, _ = start_broker(data_dir, port=native, http_port=http)
    urls = {
        "tcp": f"chute://127.0.0.1:{native}",
        "ws": f"ws://127.0.0.1:{http}/chute",
        "http": f"http://127.0.0.1:{http}/chute",
    }
    return proc, urls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--duration", type=float, default=5, help="latency run seconds")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        t: {"throughput": [], "latency": [], "sync": []} for t in TRANSPORTS
    }
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as data_dir:
        proc, urls = start(data_dir)
        try:
            for i in range(args.runs):
                for transport in TRANSPORTS:
                    url, tag = urls[transport], f"bench-{transport}-{os.getpid()}-{i}"
                    result = {
                        "throughput": run_once(
                            url, f"queue:{tag}-t", count=args.count, size=args.size
                        ),
                        "latency": run_once(
                            url,
                            f"queue:{tag}-l",
                            count=int(args.rate * args.duration),
                            size=args.size,
                            rate=args.rate,
                            latency=True,
                        ),
                        "sync": run_once(
                            url, f"queue:{tag}-s", count=SYNC_COUNT, size=args.size, mode="sync"
                        ),
                    }
                    for name, figures in result.items():
                        runs[transport][name].append(figures)
                    print(
                        json.dumps({"run": i + 1, "transport": transport, **result}),
                        file=sys.stderr,
                    )
        finally:
            proc.terminate()
            proc.wait(30)
    report: dict[str, Any] = {"runs": args.runs, "size": args.size, "rate": args.rate}
    for transport in TRANSPORTS:
        figures = runs[transport]
        report[transport] = {
            "throughput_msgs_per_s": statistics.median(
                r["msgs_per_s"] for r in figures["throughput"]
            ),
            "latency_p50_ms": statistics.median(r["p50_ms"] for r in figures["latency"]),
            "latency_p99_ms": statistics.median(r["p99_ms"] for r in figures["latency"]),
            "latency_p999_ms": statistics.median(r["p999_ms"] for r in figures["latency"]),
            "sync_msgs_per_s": statistics.median(r["msgs_per_s"] for r in figures["sync"]),
            "runs": figures,
        }
    for transport in TRANSPORTS[1:]:
        report[transport]["to_tcp"] = {
            key: round(report[transport][key] / report["tcp"][key], 2)
            for key in ("throughput_msgs_per_s", "sync_msgs_per_s", "latency_p50_ms")
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
