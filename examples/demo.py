"""The Spark demo pipeline, all of it for a bounded time: broker, producer, job, consumer.

Starts ``chute serve`` (journal in a temporary directory) unless ``--url`` names a
running broker, then the order producer, the streaming job (Spark local mode) and
the consumer that prints the windowed statistics; stops everything after
``--seconds``. ``make demo`` runs it. The broker it starts keeps ``stream:orders`` in
two partitions (``examples/demo.toml``); the producer keys each order by its region,
and the job reads the partitions in parallel and says where it got to in each.

``--serve`` is the README's first command (``make run``): the broker is the real
one, on its default ports with its journal in ``./chute-data``; after the demo it
keeps serving in the foreground until Ctrl-C or SIGTERM.

The console shows the demo's results; the broker's log and Spark's own output go to
files (the first line printed says which: ``chute-data/broker.log`` and
``chute-data/spark.log`` with ``--serve``).
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
CONFIG = HERE / "demo.toml"
"""The demo broker's configuration: ``stream:orders`` in two partitions."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_broker(
    data_dir: str, log_path: Path, *, defaults: bool = False, log_level: str | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A throw-away broker on free ports, or (``defaults``) the real one on its own ports.

    Its log goes to ``log_path`` (appended), not to the console: the console shows the
    demo's results only. The ``chute listening`` line is shown too.
    """
    cmd = [sys.executable, "-m", "chute.cli", "serve", "--data-dir", data_dir]
    cmd += ["--config", str(CONFIG)]  # stream:orders in two partitions
    if defaults:
        port = 5445
    else:
        port = free_port()
        cmd += ["--port", str(port), "--stomp-port", "0", "--http-port", "0"]
        cmd += ["--smq-source-port", "0", "--smq-sink-port", "0"]
    cmd += ["--log-level", log_level or ("info" if defaults else "warning")]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("a", encoding="utf-8")
    broker = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = broker.stdout
    for line in out or ():
        log.write(line)
        log.flush()
        if line.startswith("chute listening"):
            print(line, end="", flush=True)
            threading.Thread(target=_copy, args=(out, log), daemon=True).start()
            return broker, f"chute://127.0.0.1:{port}"
    log.close()
    raise SystemExit(f"the broker did not start; the end of {log_path}:\n{_tail(log_path)}")


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
    parser.add_argument(
        "--broker-log",
        type=Path,
        metavar="FILE",
        help="where the broker's log goes (default: chute-data/broker.log with --serve, "
        "else broker.log in the demo's temporary directory)",
    )
    parser.add_argument(
        "--broker-log-level",
        choices=["debug", "info", "warning", "error"],
        help="the broker's --log-level (default: info with --serve, else warning)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chute-demo-") as tmp:
        broker = None
        url = args.url
        data_dir = "chute-data" if args.serve else os.path.join(tmp, "data")
        broker_log: Path = args.broker_log or Path(data_dir, "broker.log")
        spark_log = broker_log.with_name("spark.log")
        where = f"Spark's to {spark_log}"
        if url is None:
            where = f"the broker's log goes to {broker_log}, {where}"
        print(f"demo: results below; {where}", flush=True)
        if url is None:
            broker, url = start_broker(
                data_dir, broker_log, defaults=args.serve, log_level=args.broker_log_level
            )
        try:
            run_pipeline(url, args.seconds, args.rate, Path(tmp), spark_log)
        finally:
            if broker is not None and args.serve:
                print(
                    f"demo done; the broker serves on at {url} (Ctrl-C stops it); "
                    f"its log: {broker_log}",
                    flush=True,
                )
                serve_on(broker)
            if broker is not None and broker.poll() is None:
                broker.terminate()
                broker.wait(30)


def run_pipeline(url: str, seconds: float, rate: float, tmp: Path, spark_log: Path) -> None:
    """The job, the consumer and the producer, for ``seconds``; Spark's own output (its
    start-up notes and warnings, on stderr) goes to ``spark_log``."""
    py = sys.executable
    common = ["--url", url, "--seconds", str(seconds)]
    spark_log.parent.mkdir(parents=True, exist_ok=True)
    with spark_log.open("a", encoding="utf-8") as spark_err:
        # The job first: Spark takes seconds to start; orders flow once it runs.
        job = subprocess.Popen(  # noqa: S603 - our own script
            [py, str(HERE / "orders_job.py"), *common, "--checkpoint", f"{tmp}/checkpoint"],
            stdout=subprocess.PIPE,
            stderr=spark_err,
            text=True,
        )
        for line in job.stdout or ():
            print(line, end="", flush=True)
            if line.startswith("job: running"):
                break
        else:
            job.wait(30)
            raise SystemExit(
                f"the Spark job did not start; the end of its log:\n{_tail(spark_log)}"
            )
        threading.Thread(target=_copy, args=(job.stdout, sys.stdout), daemon=True).start()
        commands = [
            [py, str(HERE / "orders_consumer.py"), *common],
            [py, str(HERE / "orders_producer.py"), *common, "--rate", str(rate)],
        ]
        children = [job] + [subprocess.Popen(c) for c in commands]  # noqa: S603 - our scripts
        try:
            for child in children:
                child.wait(seconds + 120)
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
                    child.wait(30)
    if job.returncode not in (0, -signal.SIGTERM):
        print(f"the Spark job failed; the end of {spark_log}:\n{_tail(spark_log)}", file=sys.stderr)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "".join(text.splitlines(keepends=True)[-lines:])


def _copy(source: Any, sink: Any) -> None:
    """Copy lines from a child's pipe as they come (so it never blocks on a full pipe)."""
    for line in source:
        sink.write(line)
        sink.flush()


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
