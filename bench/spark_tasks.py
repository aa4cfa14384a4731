"""The connector's tasks without Spark: CPU per row of a source and a sink task, and of
the broker serving them; prints JSON.

What a Spark executor runs for chute, in this process, against one ``chute serve``
(journal, ``sync = always``), N persistent 1 KiB messages:

* ``source``: a source task's read of a stream's whole range (``read_stream_range``:
  pages fetched, each turned into an Arrow batch);
* ``sink``: a sink task's write of N rows (a ``body`` column, Arrow batches of
  10,000 rows as Spark hands them over) to a stream, prepared in chunks, then
  committed with ``commit_batch`` as the driver does.

Per path and run: rows/s, and the CPU (user + system) per row of the task (this
process) and of the broker. CPU per row holds up on a busy machine far better
than rows/s, and Spark's own share is the same with any connector: the figures
to compare two checkouts by (run this file with the other checkout first on
``PYTHONPATH``).

    python -m bench.spark_tasks                      # N = 100,000, 3 runs
    python -m bench.spark_tasks --count 20000 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import pyarrow as pa

import chute
from bench.broker import start_broker
from bench.spark import produce
from bench.stream_read import cpu_seconds
from chute.spark import sink
from chute.spark.options import ChuteOptions, Side
from chute.spark.streams import StreamRange, read_stream_range

BODY = 1024
SPARK_BATCH = 10_000
"""Rows of an Arrow batch Spark hands a Python writer (``maxRecordsPerBatch``)."""


class Clock:
    """Wall time and the CPU of this process and of the broker ``pid`` over a block."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> Clock:
        self.broker = sum(cpu_seconds(self.pid))
        self.task = time.process_time()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.task = time.process_time() - self.task
        self.broker = sum(cpu_seconds(self.pid)) - self.broker

    def figures(self, rows: int) -> dict[str, float]:
        return {
            "rows_per_s": round(rows / self.wall),
            "task_us_per_row": round(self.task / rows * 1e6, 2),
            "broker_us_per_row": round(self.broker / rows * 1e6, 2),
        }


def source(url: str, pid: int, address: str, n: int) -> dict[str, float]:
    options = ChuteOptions.parse({"url": url, "destination": address}, Side.READ)
    with chute.connect(url) as conn:
        first, head = conn.cursor_open(address)
    rows = 0
    with Clock(pid) as clock:
        for batch in read_stream_range(options, StreamRange(address, first, head)):
            rows += batch.num_rows
    if rows != n:
        raise RuntimeError(f"the source read {rows} rows, not {n}")
    return clock.figures(rows)


def write(url: str, pid: int, address: str, n: int) -> dict[str, float]:
    body = os.urandom(BODY)
    table = pa.table({"body": pa.array([body] * n, pa.binary())})
    options = ChuteOptions.parse({"url": url, "destination": address}, Side.WRITE)
    with Clock(pid) as clock:
        staged = sink.write_staged(options, "bench", 0, iter(table.to_batches(SPARK_BATCH)))
        with chute.connect(url, timeout=60) as conn:
            conn.commit_batch("bench", 0, list(staged.xids), keep=False)
    if staged.count != n:
        raise RuntimeError(f"the sink wrote {staged.count} rows, not {n}")
    return clock.figures(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n = args.count
    runs: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="chute-bench-spark-tasks-") as tmp:
        proc, url = start_broker(
            os.path.join(tmp, "data"), "[server]\nmax_memory = 0\nmemory_high_watermark = 0\n"
        )
        try:
            for i in range(args.runs):
                produce(url, f"stream:in-{i}", n)
                runs.append(
                    {
                        "source": source(url, proc.pid, f"stream:in-{i}", n),
                        "sink": write(url, proc.pid, f"stream:out-{i}", n),
                    }
                )
        finally:
            proc.terminate()
            proc.wait(30)
    out: dict[str, Any] = {"count": n, "body_bytes": BODY, "runs": len(runs)}
    out["median"] = {
        path: {k: statistics.median(r[path][k] for r in runs) for k in runs[0][path]}
        for path in runs[0]
    }
    out["per_run"] = runs
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
