"""The Spark demo pipeline, all of it for a bounded time: broker, producer, job, consumer.

Starts ``chute serve`` (journal in a temporary directory) unless ``--url`` names a
running broker, then the order producer, the streaming job (Spark local mode) and
the consumer that prints the windowed statistics; stops everything after
``--seconds``. ``make demo`` runs it.

``--serve`` is the README's first command (``make run``): the broker is the real
one, on its default ports with its journal in ``./chute-data``; after the demo it
keeps serving in the foreground until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_broker(data_dir: str, *, defaults: bool = False) -> tuple[subprocess.Popen[str], str]:
    """A throw-away broker on free ports, or (``defaults``) the real one on its own ports."""
    cmd = [sys.executable, "-m", "chute.cli", "serve", "--data-dir", data_dir]
    if defaults:
        port = 5445
        cmd += ["--log-level", "info"]
    else:
        port = free_port()
        cmd += ["--port", str(port), "--stomp-port", "0", "--http-port", "0"]
        cmd += ["--smq-source-port", "0", "--smq-sink-port", "0", "--log-level", "warning"]
    broker = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = broker.stdout
    for line in out or ():
        print(f"broker: {line}", end="", flush=True)
        if line.startswith("chute listening"):
            threading.Thread(target=_pump, args=(out, defaults), daemon=True).start()
            return broker, f"chute://127.0.0.1:{port}"
    raise SystemExit("the broker did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running broker (default: start one)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200.0, help="orders per second")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="run the real broker (default ports, ./chute-data) and keep it serving after",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chute-demo-") as tmp:
        broker = None
        url = args.url
        if url is None:
            data_dir = "chute-data" if args.serve else os.path.join(tmp, "data")
            broker, url = start_broker(data_dir, defaults=args.serve)
        py = sys.executable
        seconds = str(args.seconds)
        common = ["--url", url, "--seconds", seconds]
        # The job first: Spark takes seconds to start; orders flow once it runs.
        job = subprocess.Popen(  # noqa: S603 - our own script
            [py, str(HERE / "orders_job.py"), *common, "--checkpoint", f"{tmp}/checkpoint"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for line in job.stdout or ():
            print(line, end="", flush=True)
            if line.startswith("job: running"):
                break
        commands = [
            [py, str(HERE / "orders_consumer.py"), *common],
            [py, str(HERE / "orders_producer.py"), *common, "--rate", str(args.rate)],
        ]
        children = [job] + [subprocess.Popen(c) for c in commands]  # noqa: S603 - our scripts
        try:
            for child in children:
                child.wait(args.seconds + 120)
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
                    child.wait(30)
            if broker is not None and args.serve:
                print(f"demo done; the broker serves on at {url} (Ctrl-C stops it)", flush=True)
                serve_on(broker)
            if broker is not None and broker.poll() is None:
                broker.terminate()
                broker.wait(30)


def _pump(out: Any, echo: bool) -> None:
    """Keep reading the broker's log (so it never blocks on a full pipe); show it if asked."""
    for line in out:
        if echo:
            print(f"broker: {line}", end="", flush=True)


def serve_on(broker: subprocess.Popen[str]) -> None:
    """Wait for the broker; Ctrl-C or SIGTERM stops it gracefully."""
    signal.signal(signal.SIGTERM, lambda *_: broker.terminate())
    try:
        broker.wait()
    except KeyboardInterrupt:
        broker.terminate()
        broker.wait(30)


if __name__ == "__main__":
    main()
