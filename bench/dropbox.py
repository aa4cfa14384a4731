"""DropboxMQ benchmarks, serverless and through the broker's bridge; prints JSON.

Workloads (1 KiB bodies; every client its own process, as a user runs them):

* ``serverless``: 1 producer and 1 consumer process on one dropbox root via
  ``chute.connect("dropbox://...")``, with ``sync=true`` (every file fsynced)
  and ``sync=false``; msgs/s from the first send to the last receive.
* ``bridge_import``: a producer process writes files into a mounted root; a
  native consumer of ``chute serve`` receives them (the bridge claims each
  file, stores it persistently and moves it to ``processed/``).
* ``bridge_export``: a native producer sends to a broker queue exported to a
  dropbox; msgs/s until the last file is in ``target/``.

    python -m bench.dropbox                    # all, 2,000 messages each
    python -m bench.dropbox --count 10000 --only serverless --dir /dev/shm

``--dir`` picks the filesystem the dropboxes live on (default: the temp dir).
File creation dominates: on this VM's ext4 a bare create+write+rename loop
runs at ~2-3k files/s, on tmpfs ~30k.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import chute
from bench.broker import start_broker as start_native_broker

BODY = 1024
BASE_DIR: str | None = None

PRODUCER = textwrap.dedent(
    """
    import sys, time, chute
    url, count = sys.argv[1], int(sys.argv[2])
    body = b"x" * 1024
    with chute.connect(url) as conn:
        session = conn.session()
        print(time.time(), flush=True)
        for _ in range(count):
            session.send("queue:bench", body)
    """
)

CONSUMER = textwrap.dedent(
    """
    import sys, time, chute
    url, count = sys.argv[1], int(sys.argv[2])
    with chute.connect(url) as conn:
        consumer = conn.session().consumer("queue:bench")
        for _ in range(count):
            if consumer.receive(timeout=60) is None:
                sys.exit("timed out")
        print(time.time(), flush=True)
    """
)


def run_script(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE, text=True
    )


def first_line(process: subprocess.Popen[str]) -> float:
    assert process.stdout is not None
    return float(process.stdout.readline())


def serverless(count: int, sync: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=BASE_DIR) as root:
        url = f"dropbox://{root}?sync={'true' if sync else 'false'}"
        consumer = run_script(CONSUMER, url + "&client_id=consumer", count)
        producer = run_script(PRODUCER, url + "&client_id=producer", count)
        started = first_line(producer)
        finished = first_line(consumer)
        producer.wait()
        consumer.wait()
    seconds = finished - started
    return {
        "messages": count,
        "sync": sync,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(count / seconds),
    }


def start_broker(tmp: Path, config: str) -> tuple[subprocess.Popen[str], str]:
    return start_native_broker(str(tmp / "data"), config)


def bridge_import(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=BASE_DIR) as tmp_name:
        tmp = Path(tmp_name)
        mq = tmp / "mq"
        broker, url = start_broker(
            tmp, f'[[dropbox]]\nroot = "{mq}"\ndestinations = ["bench"]\npoll_interval_ms = 50\n'
        )
        try:
            consumer = run_script(CONSUMER, url, count)
            producer = run_script(PRODUCER, f"dropbox://{mq}?sync=true&client_id=p", count)
            started = first_line(producer)
            finished = first_line(consumer)
            producer.wait()
            consumer.wait()
        finally:
            broker.terminate()
            broker.wait(30)
    seconds = finished - started
    return {"messages": count, "seconds": round(seconds, 3), "msgs_per_s": round(count / seconds)}


def bridge_export(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=BASE_DIR) as tmp_name:
        tmp = Path(tmp_name)
        out = tmp / "out"
        broker, url = start_broker(
            tmp,
            f'[[dropbox]]\nroot = "{out}"\ndestinations = ["queue:bench"]\ndirection = "export"\n',
        )
        target = out / "bench" / "incoming" / "target"
        try:
            producer = run_script(PRODUCER, url, count)
            started = first_line(producer)
            producer.wait()
            deadline = time.monotonic() + 300
            while len(os.listdir(target)) < count:
                if time.monotonic() > deadline:
                    raise SystemExit("export did not finish")
                time.sleep(0.01)
            finished = time.time()
        finally:
            broker.terminate()
            broker.wait(30)
    seconds = finished - started
    return {"messages": count, "seconds": round(seconds, 3), "msgs_per_s": round(count / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument(
        "--only", choices=["serverless", "bridge_import", "bridge_export"], action="append"
    )
    parser.add_argument("--dir", help="where the dropboxes live (default: the temp dir)")
    args = parser.parse_args()
    global BASE_DIR
    BASE_DIR = args.dir
    chosen = args.only or ["serverless", "bridge_import", "bridge_export"]
    result: dict[str, Any] = {
        "body_bytes": BODY,
        "dir": args.dir or tempfile.gettempdir(),
        "chute": chute.__version__,
    }
    if "serverless" in chosen:
        result["serverless_sync"] = serverless(args.count, sync=True)
        result["serverless_nosync"] = serverless(args.count, sync=False)
    if "bridge_import" in chosen:
        result["bridge_import"] = bridge_import(args.count)
    if "bridge_export" in chosen:
        result["bridge_export"] = bridge_export(args.count)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
