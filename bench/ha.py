"""High availability's costs, as JSON: a node alone and with one backup.

    python -m bench.ha [--seconds 3] [--rounds 3] [--kills 10] [--ttl 2]

Runs a real etcd (Debian's ``etcd``, one member, loopback) and ``chute serve``
processes of node ``a``, each with its own data directory (``sync = "always"``).
Measures, for a live alone (a node of a cluster of its own, no backup) and a live with
a backup in sync, both running throughout and measured in turn ``--rounds`` times (so
that a machine whose speed drifts moves both alike): synchronous persistent sends per
second (one producer, each send awaits its confirmation) and windowed persistent
throughput (one producer, 256 sends in flight); the median of each round's ratio
with/without (targets: ≥ 0.5 and ≥ 0.7). Then ``--kills`` times: SIGKILL the live and time, from
the kill, the first send confirmed by the new live (its backup); the killed one is
started again on its data directory, rejoins as the backup and gets in sync before
the next kill. Reports median and worst (target: median ≤ 5 s with ``ttl = 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from chute.client.blocking import connect
from chute.errors import ChuteError

QUEUE = "bench.ha"
BODY = b"x" * 100
WINDOW = 256
READY = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Etcd:
    def __init__(self, directory: Path) -> None:
        program = shutil.which("etcd") or "/usr/bin/etcd"
        self.address = f"127.0.0.1:{_free_port()}"
        peer = f"http://127.0.0.1:{_free_port()}"
        self.process = subprocess.Popen(
            [
                program,
                "--name=bench",
                f"--data-dir={directory / 'etcd'}",
                f"--listen-client-urls=http://{self.address}",
                f"--advertise-client-urls=http://{self.address}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=bench={peer}",
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--log-level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + READY
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://{self.address}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("etcd did not start")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Process:
    """A ``chute serve`` of node ``a``, its output collected."""

    def __init__(
        self, directory: Path, name: str, etcd: Etcd, config: Path, cluster: str = "bench"
    ) -> None:
        self.port = _free_port()
        self.lines: list[str] = []
        self.arrived = threading.Condition()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chute.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--stomp-port",
                "0",
                "--http-port",
                "0",
                "--data-dir",
                str(directory / name),
                "--config",
                str(config),
                "--cluster",
                f"etcd://{etcd.address}/{cluster}",
                "--node",
                "a",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.arrived:
                self.lines.append(line)
                self.arrived.notify_all()

    def wait_for(self, text: str, start: int = 0) -> None:
        end = time.monotonic() + READY
        with self.arrived:
            while not any(text in line for line in self.lines[start:]):
                left = end - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise RuntimeError(f"no {text!r} from chute serve:\n{''.join(self.lines)}")
                self.arrived.wait(left)

    @property
    def url(self) -> str:
        return f"chute://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def _rate(url: str, seconds: float, window: int) -> float:
    """Persistent sends confirmed per second over ``seconds`` (after a short warm-up)."""
    with connect(url) as conn, conn.session(confirm_window=window) as session:
        for _ in range(200):
            session.send(QUEUE, BODY)
        count = 0
        started = time.perf_counter()
        end = started + seconds
        while time.perf_counter() < end:
            for _ in range(50):
                session.send(QUEUE, BODY)
            count += 50
        session.close()  # awaits the window
        elapsed = time.perf_counter() - started
    with connect(url) as conn:
        conn.delete(QUEUE, force=True)
    return count / elapsed


def _first_confirmed(url: str, deadline: float) -> float:
    """Try until a send to ``url`` is confirmed; the monotonic time it was."""
    while time.monotonic() < deadline:
        try:
            with connect(url) as conn, conn.session() as session:
                session.send(QUEUE, BODY)
                return time.monotonic()
        except (ChuteError, OSError):
            time.sleep(0.02)
    raise RuntimeError("no send confirmed after the kill")


def _rates(url: str, seconds: float) -> dict[str, float]:
    return {
        "sync_sends_per_s": round(_rate(url, seconds, 0), 1),
        "windowed_msgs_per_s": round(_rate(url, seconds, WINDOW), 1),
    }


def run(seconds: float, rounds: int, kills: int, ttl: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="chute-bench-ha-") as tmp:
        directory = Path(tmp)
        config = directory / "chute.toml"
        config.write_text(f'[server]\nsync = "always"\n[cluster]\nttl = {ttl}\n')
        etcd = Etcd(directory)
        started: list[Process] = []
        try:
            solo = Process(directory, "solo", etcd, config, cluster="bench-solo")
            started.append(solo)
            live = Process(directory, "one", etcd, config)
            started.append(live)
            solo.wait_for("chute listening")
            live.wait_for("chute listening")
            backup = Process(directory, "two", etcd, config)
            started.append(backup)
            backup.wait_for("in sync with the live")
            each: list[dict[str, dict[str, float]]] = []
            for n in range(rounds):
                turn = [("alone", solo.url), ("with_backup", live.url)]
                figures = {
                    name: _rates(url, seconds) for name, url in (turn if n % 2 == 0 else turn[::-1])
                }
                each.append(figures)
            solo.kill()
            names = {live: "one", backup: "two"}
            failovers: list[float] = []
            for _ in range(kills):
                mark = len(backup.lines)
                killed = time.monotonic()
                live.kill()
                backup.wait_for("chute listening", mark)
                failovers.append(_first_confirmed(backup.url, killed + READY) - killed)
                again = Process(directory, names[live], etcd, config)
                started.append(again)
                names[again] = names[live]
                again.wait_for("in sync with the live")
                live, backup = backup, again
        finally:
            for process in started:
                process.kill()
            etcd.stop()
    keys = ("sync_sends_per_s", "windowed_msgs_per_s")

    def median(side: str, key: str) -> float:
        return round(statistics.median(r[side][key] for r in each), 1)

    ratios = {
        key: [round(r["with_backup"][key] / r["alone"][key], 2) for r in each if r["alone"][key]]
        for key in keys
    }
    return {
        "rounds": len(each),
        "alone": {key: median("alone", key) for key in keys},
        "with_backup": {key: median("with_backup", key) for key in keys},
        "ratio": {key: statistics.median(ratios[key]) if ratios[key] else None for key in keys},
        "ratio_each_round": ratios,
        "targets": {"sync_sends_per_s": 0.5, "windowed_msgs_per_s": 0.7},
        "ttl_s": ttl,
        "failover_s": {
            "kills": len(failovers),
            "median": round(statistics.median(failovers), 2) if failovers else None,
            "worst": round(max(failovers), 2) if failovers else None,
            "each": [round(f, 2) for f in failovers],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput figure")
    parser.add_argument("--rounds", type=int, default=3, help="alone/with-backup turns")
    parser.add_argument("--kills", type=int, default=10, help="failovers timed")
    parser.add_argument("--ttl", type=int, default=2, help="[cluster] ttl, seconds")
    args = parser.parse_args()
    print(json.dumps(run(args.seconds, args.rounds, args.kills, args.ttl), indent=2))


if __name__ == "__main__":
    main()
