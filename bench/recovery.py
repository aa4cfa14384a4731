"""Recovery: how long ``chute serve`` takes from start to serving, on a deep journal.

Writes a journal of ``--count`` persistent 100-byte messages over four queues
(through the store, unsynced), then starts ``chute serve`` on it ``--runs`` times
and times each start until it prints its ``chute listening`` line, and (when the
HTTP port answers during recovery) until ``/readyz`` first answered. Counts the
log lines the recovery wrote. ``--source DIR`` runs the broker from another
checkout (``PYTHONPATH=DIR``), to compare two versions in one run. Prints JSON.

    python -m bench.recovery [--count 1000000] [--runs 3] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from chute.core.model.store import AddOp, QueueDefinition, QueueKind
from chute.message import Message
from chute.store.journal import Journal


def write_journal(directory: Path, count: int) -> None:
    with Journal(directory, sync="never") as journal:
        for q in range(4):
            journal.define(QueueDefinition(f"queue:backlog.{q}", QueueKind.QUEUE))
        body = b"x" * 100
        for seq in range(1, count + 1):
            queue = f"queue:backlog.{seq % 4}"
            journal.add(AddOp(queue, (queue,), seq, Message(body, id=f"m{seq}")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def one_start(data_dir: Path, source: str | None) -> dict[str, Any]:
    http = free_port()
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = source
    command = [sys.executable, "-m", "chute.cli", "serve", "--data-dir", str(data_dir)]
    command += ["--port", "0", "--stomp-port", "0", "--http-port", str(http)]
    started = time.monotonic()
    process = subprocess.Popen(  # from the source's directory: -m imports from there first
        command,
        cwd=source or None,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first_answer: list[float] = []

    def poll_http() -> None:
        while process.poll() is None and not first_answer:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=1):
                    pass
            except urllib.error.HTTPError:
                pass  # 503 while recovering: it answered
            except OSError:
                time.sleep(0.01)
                continue
            first_answer.append(time.monotonic() - started)

    poller = threading.Thread(target=poll_http, daemon=True)
    poller.start()
    lines: list[str] = []
    ready = None
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.rstrip())
        if "chute listening" in line:
            ready = time.monotonic() - started
            break
    process.terminate()
    process.wait(30)
    poller.join(5)
    return {
        "ready_s": ready,
        "http_answered_s": first_answer[0] if first_answer else None,
        "recovery_log_lines": sum("recover" in line for line in lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", help="run the broker from this checkout instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chute-recovery-"))
    try:
        made = time.monotonic()
        write_journal(work / "journal", args.count)
        written = time.monotonic() - made
        runs = [one_start(work, args.source) for _ in range(args.runs)]
        ready = [r["ready_s"] for r in runs if r["ready_s"] is not None]
        print(
            json.dumps(
                {
                    "messages": args.count,
                    "source": args.source or "this checkout",
                    "journal_written_s": round(written, 2),
                    "ready_s_median": round(statistics.median(ready), 2) if ready else None,
                    "runs": runs,
                },
                indent=2,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
