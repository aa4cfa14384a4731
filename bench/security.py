"""The hidden cost of users and permissions: the same workloads against a broker with
no users and one with users, roles and argon2 passwords, alternating in one run.

    python -m bench.security                 # 5 rounds of each workload
    python -m bench.security --rounds 3 --only native

Workloads: the STOMP race's row a (transient 1p/1c 1 KiB through stompbench) and
the native transient throughput (``bench/native.py``'s ``throughput``). Each
round runs both brokers once, alternating which goes first; the ratio is
(with users) / (without) per round, and the median of those. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from bench import native
from bench.broker import free_port, start_broker
from bench.stomp import STOMPBENCH, TRANSIENT, WORKLOADS, cpu_seconds
from chute.passwords import hash_password

USER, PASSWORD = "bench", "bench-password"
ROLE = '["queue:*", "topic:*"]'


def secured_config() -> str:
    """A role granting the benchmark's destinations, and a user with a hashed password."""
    return (
        f'[users.{USER}]\npassword = "{hash_password(PASSWORD)}"\nroles = ["bench"]\n'
        f"[roles.bench]\nsend = {ROLE}\nconsume = {ROLE}\ncreate = {ROLE}\nbrowse = {ROLE}\n"
    )


def start(data_dir: str, config: str | None, stomp_port: int) -> tuple[subprocess.Popen[str], str]:
    """A broker from :func:`bench.broker.start_broker` with STOMP on ``stomp_port`` too."""
    return start_broker(data_dir, config, stomp_port=stomp_port)


def stomp_row_a(stomp_port: int, secured: bool, tag: str, pid: int) -> dict[str, Any]:
    row = next(w for w in WORKLOADS if w.row == "a")
    cmd = [sys.executable, str(STOMPBENCH), "--port", str(stomp_port)]
    if secured:
        cmd += ["--login", USER, "--passcode", PASSWORD]
    cmd += [*row.command(f"/queue/{tag}", 1.0), *TRANSIENT, "--time-limit", "90"]
    cpu0 = cpu_seconds(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150, check=False)
    cpu1 = cpu_seconds(pid)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"stompbench failed: {out.stderr[-500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    figures = {"msgs_per_s": float(result["msgs_per_s"])}
    if cpu0 is not None and cpu1 is not None:
        figures["broker_cpu_s"] = round(cpu1 - cpu0, 2)
    return figures


def native_throughput(url: str, tag: str, count: int) -> dict[str, Any]:
    result = native.run_once(url, f"queue:{tag}", count=count, size=1024)
    return {"msgs_per_s": float(result["msgs_per_s"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["stomp", "native"], action="append")
    parser.add_argument("--count", type=int, default=200_000, help="native messages per run")
    args = parser.parse_args()
    workloads = args.only or ["stomp", "native"]
    results: dict[str, dict[str, list[float]]] = {w: {"open": [], "secured": []} for w in workloads}
    secured = secured_config()
    for round_ in range(args.rounds):
        order = ["open", "secured"] if round_ % 2 == 0 else ["secured", "open"]
        for kind in order:
            with tempfile.TemporaryDirectory() as data_dir:
                stomp_port = free_port()
                proc, url = start(data_dir, secured if kind == "secured" else None, stomp_port)
                if kind == "secured":
                    url = url.replace("chute://", f"chute://{USER}:{PASSWORD}@")
                try:
                    for workload in workloads:
                        tag = f"bench-{workload}-{os.getpid()}-{round_}"
                        if workload == "stomp":
                            fig = stomp_row_a(stomp_port, kind == "secured", tag, proc.pid)
                        else:
                            fig = native_throughput(url, tag, args.count)
                        results[workload][kind].append(fig["msgs_per_s"])
                        print(
                            json.dumps({"round": round_ + 1, "broker": kind, workload: fig}),
                            file=sys.stderr,
                        )
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(15)
    report: dict[str, Any] = {"rounds": args.rounds, "machine": {"cpus": os.cpu_count()}}
    for workload, runs in results.items():
        ratios = [s / o for o, s in zip(runs["open"], runs["secured"], strict=True)]
        report[workload] = {
            "without_users_msgs_per_s": runs["open"],
            "with_users_msgs_per_s": runs["secured"],
            "median_without": statistics.median(runs["open"]),
            "median_with": statistics.median(runs["secured"]),
            "ratio_per_round": [round(r, 3) for r in ratios],
            "median_ratio": round(statistics.median(ratios), 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
