"""The STOMP race: chute against RabbitMQ and ActiveMQ Classic on the same five workloads.

``python -m bench.stomp`` starts a ``chute serve`` (journal in a temporary
directory, ``sync = always``) and runs ``../shared/tools/stompbench.py`` with
the workloads of ``../shared/notes/baselines.md``:

a) transient 1 producer / 1 consumer, 1 KiB, auto ack (msgs/s delivered)
b) persistent, client-individual, a receipt every 100 sends (msgs/s delivered)
c) synchronous persistent sends, each waiting for its receipt (sends/s)
d) latency at 2,000 msgs/s, transient (p50 / p99 / p999 ms)
e) topic fan-out to 4 subscribers (msgs/s delivered in all)

With ``--peers`` it also installs (apt-get, once; needs root) and starts
RabbitMQ and ActiveMQ (see :mod:`bench.peers`), one broker at a time, runs the
same workloads against each and adds chute's ratio to each peer: for
throughput ``chute / peer``, for latency ``peer / chute`` (so above 1 always
means chute is ahead). ``--runs N`` reports medians of N runs (each run uses
fresh destinations).

Transient rows (a, d, e) send ``persistent:false`` to chute only: chute's
STOMP default is persistent (DESIGN.md), the peers' is not, so the header
makes the rows mean the same thing everywhere. (RabbitMQ must not get it: it
refuses such SENDs to an existing durable queue with RESOURCE_LOCKED.)
ActiveMQ's row d) uses its ``tcpNoDelay`` connector, as the baseline's does.

Prints one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import peers

ROOT = Path(__file__).resolve().parent.parent
STOMPBENCH = Path(os.environ.get("STOMPBENCH", ROOT.parent / "shared" / "tools" / "stompbench.py"))
TRANSIENT = ("--header", "persistent:false")  # chute only, see the docstring


@dataclass(frozen=True)
class Workload:
    row: str
    title: str
    args: str  # stompbench's options
    latency: bool = False
    transient: bool = False

    def command(self, destination: str, scale: float) -> list[str]:
        args = shlex.split(self.args)
        for flag in ("--count", "--duration"):
            if flag in args:
                i = args.index(flag) + 1
                value = float(args[i]) * scale
                args[i] = str(max(1, round(value))) if flag == "--count" else f"{value:g}"
        return ["--destination", destination, *args]


WORKLOADS = (
    Workload(
        "a",
        "transient 1p/1c 1 KiB, msgs/s",
        "--mode throughput --count 200000 --size 1024 --ack auto",
        transient=True,
    ),
    Workload(
        "b",
        "persistent, receipt every 100, msgs/s",
        "--mode throughput --count 200000 --size 1024 --persistent --ack client-individual"
        " --prefetch 1000 --receipt-every 100 --receipt-window 4",
    ),
    Workload(
        "c",
        "synchronous persistent sends, msgs/s",
        "--mode sync --count 5000 --size 1024 --persistent --ack client-individual --prefetch 1000",
    ),
    Workload(
        "d",
        "latency at 2,000 msgs/s, ms",
        "--mode latency --rate 2000 --duration 20 --size 1024 --ack auto",
        latency=True,
        transient=True,
    ),
    Workload(
        "e",
        "topic fan-out 1->4, msgs/s delivered",
        "--mode throughput --count 100000 --size 1024 --ack auto --consumers 4",
        transient=True,
    ),
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU of ``pid`` and its threads so far, from procfs."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Chute(peers.Peer):
    """A ``chute serve`` with its journal in a temporary directory."""

    name = "chute"

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="chute-bench-stomp-")
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.stomp_args = ("--port", str(self.port))
        cmd = [sys.executable, "-m", "chute.cli", "serve", "--port", "0", "--http-port", "0"]
        cmd += ["--stomp-port", str(self.port), "--data-dir", self._tmp.name]
        cmd += ["--log-level", "warning"]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("chute listening"):
                break
        else:
            raise RuntimeError("chute serve did not start")

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(30)
        self._tmp.cleanup()


def run_one(
    broker: peers.Peer, workload: Workload, destination: str, scale: float, port: str | None
) -> dict[str, Any]:
    args = list(broker.stomp_args)
    if port is not None:
        args[args.index("--port") + 1] = port
    cmd = [sys.executable, str(STOMPBENCH), *args, *workload.command(destination, scale)]
    if workload.transient and isinstance(broker, Chute):
        cmd += TRANSIENT
    cmd += ["--time-limit", "90", "--label", f"{broker.name}-{workload.row}"]
    pid = broker.pid()
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150, check=False)
    cpu1, wall = cpu_seconds(pid), time.monotonic() - t0
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"complete": False, "errors": [out.stderr.strip()[-500:]]}
    result: dict[str, Any] = json.loads(lines[-1])
    if cpu0 is not None and cpu1 is not None:
        result["broker_cpu_pct"] = round(100 * (cpu1 - cpu0) / wall, 1)
    return result


def figure(workload: Workload, result: dict[str, Any]) -> dict[str, Any]:
    fig: dict[str, Any] = {"complete": bool(result.get("complete"))}
    if workload.latency:
        lat = result.get("latency_ms") or {}
        fig.update({k: lat.get(k) for k in ("p50", "p99", "p999")})
    else:
        fig["msgs_per_s"] = result.get("msgs_per_s")
    for key in ("broker_cpu_pct", "lost", "errors", "ended_by"):
        if result.get(key):
            fig[key] = result[key]
    return fig


def median_figure(workload: Workload, figures: list[dict[str, Any]]) -> dict[str, Any]:
    done = [f for f in figures if f["complete"]] or figures
    keys = ("p50", "p99", "p999") if workload.latency else ("msgs_per_s",)
    med: dict[str, Any] = {
        "runs": len(figures),
        "complete_runs": sum(f["complete"] for f in figures),
    }
    for key in (*keys, "broker_cpu_pct"):
        values = [f[key] for f in done if isinstance(f.get(key), int | float)]
        if values:
            med[key] = round(statistics.median(values), 3 if workload.latency else 1)
            if len(values) > 1:
                med[f"{key}_min_max"] = [min(values), max(values)]
    errors = [e for f in figures for e in f.get("errors", [])]
    if errors:
        med["errors"] = errors[:3]
    return med


def race(broker: peers.Peer, rows: list[Workload], runs: int, scale: float) -> dict[str, Any]:
    log(f"== {broker.name}: starting")
    broker.start()
    try:
        stamp = int(time.time())
        warmups = 2 if isinstance(broker, peers.ActiveMQ) else 1
        for i in range(warmups):
            log(f"   warm-up {i + 1}")
            run_one(broker, WORKLOADS[0], f"/queue/bench-warm-{stamp}-{i}", 0.1, None)
        results: dict[str, Any] = {}
        for workload in rows:
            port = None
            if workload.row == "d" and isinstance(broker, peers.ActiveMQ):
                port = str(peers.AMQ_NODELAY_PORT)
            figures = []
            for run in range(runs):
                kind = "topic" if workload.row == "e" else "queue"
                dest = f"/{kind}/bench-{workload.row}-{stamp}-{run}"
                fig = figure(workload, run_one(broker, workload, dest, scale, port))
                log(f"   {workload.row}) run {run + 1}: {fig}")
                figures.append(fig)
            results[workload.row] = median_figure(workload, figures)
        return results
    finally:
        broker.stop()
        log(f"== {broker.name}: stopped")


def ratios(chute: dict[str, Any], peer: dict[str, Any], rows: list[Workload]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for w in rows:
        mine, theirs = chute.get(w.row, {}), peer.get(w.row, {})
        if w.latency:
            out[w.row] = {
                k: round(theirs[k] / mine[k], 2)
                for k in ("p50", "p99", "p999")
                if mine.get(k) and theirs.get(k)
            }
        elif mine.get("msgs_per_s") and theirs.get("msgs_per_s"):
            out[w.row] = round(mine["msgs_per_s"] / theirs["msgs_per_s"], 2)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per row; medians are reported")
    parser.add_argument("--peers", action="store_true", help="install/start RabbitMQ, ActiveMQ")
    parser.add_argument("--rows", default="abcde", help="which workloads (letters a-e)")
    parser.add_argument(
        "--brokers",
        default="chute,rabbitmq,activemq",
        help="with --peers: which brokers, comma-separated (chute always runs)",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply counts and durations")
    args = parser.parse_args(argv)
    if not STOMPBENCH.exists():
        parser.error(f"{STOMPBENCH} not found (set STOMPBENCH)")
    rows = [w for w in WORKLOADS if w.row in args.rows]
    brokers: list[peers.Peer] = [Chute()]
    if args.peers:
        if not peers.installed() or os.geteuid() == 0:
            log("installing / configuring the peers")
            peers.install()
        wanted = args.brokers.split(",")
        brokers += [peer() for name, peer in peers.PEERS.items() if name in wanted]
    results = {b.name: race(b, rows, args.runs, args.scale) for b in brokers}
    report: dict[str, Any] = {
        "bench": "stomp",
        "runs": args.runs,
        "scale": args.scale,
        "rows": {w.row: w.title for w in rows},
        "results": results,
        "chute_ratio": {
            name: ratios(results["chute"], figures, rows)
            for name, figures in results.items()
            if name != "chute"
        },
        "ratio_meaning": "throughput: chute/peer; latency: peer/chute; > 1 = chute ahead",
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
