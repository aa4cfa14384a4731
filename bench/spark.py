"""The Spark connector against the native client, 1 KiB persistent messages; prints JSON.

In one run, against one ``chute serve`` (journal, ``sync = always``) and one
local[2] SparkSession (warmed up first, so its cold start is not counted):

* ``source``: a stream query reads N messages of a stream through the
  connector (one micro-batch, ``trigger(availableNow=True)``) into Spark's
  ``noop`` sink; rows/s from ``start()`` to the end. ``source_queue``: the same
  of a queue, through a cursor (consuming it).
* ``native_read``: the native client reads the same N messages (a consumer,
  auto ack) ; msgs/s.
* ``sink``: N rows of a DataFrame (a 1 KiB binary ``body``) written to a stream through
  the connector's batch writer: two tasks, each sending in a two-phase
  transaction, prepared, then committed together by the driver; rows/s.
* ``native_write``: the native client sends N messages in one transaction and
  commits (the same durability as the sink); msgs/s.
* ``source_ceiling_tuples`` / ``source_ceiling_arrow``: the ceiling Spark allows
  that source, measured the same way: a Python data source (``bench/spark_ceiling.py``)
  yielding the same rows (chute's read schema, 1 KiB ``body``) from memory, as
  tuples / as Arrow batches, into ``noop``.
* ``sink_ceiling``: the same cached DataFrame written the same way to an Arrow
  writer that discards it (``DataSourceArrowWriter``); ``sink_ceiling_stream``,
  for reference, the stream Arrow writer fed by the in-memory Arrow source.

Every run measures all of them; the JSON gives each run, the medians, the ratios
chute/ceiling of each run and their median, and the issue's targets (source ≥ 0.5
of the Arrow source ceiling and ≥ 200,000 rows/s; sink ≥ 0.5 of the writer
ceiling and ≥ 150,000 rows/s) with a pass flag each. A stream query's rows/s come
twice: from ``start()`` to its end (``source``), and over its micro-batch alone
(``source_batch``: ``triggerExecution``, what a running query sees per batch,
without the query's start-up and shut-down, ~2 s here).

    python -m bench.spark                         # N = 100,000, 3 runs
    python -m bench.spark --count 20000 --runs 1  # a smoke run
    python -m bench.spark --nodes 4               # the source over 4 nodes' partitions
    python -m bench.spark --only source           # the stream source and its ceiling only

``--nodes N`` measures instead how the source's reads scale with a stream's
partitions spread over N nodes (``bench/spark_nodes.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import chute
from bench import spark_ceiling as ceiling
from bench.broker import start_broker

BODY = 1024


def spark_session(tmp: str, cores: int = 2) -> Any:
    java = shutil.which("java")
    if not os.environ.get("JAVA_HOME") and java:
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The workers import bench.spark_ceiling's data source by name.
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    import chute.spark

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", tmp)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    chute.spark.register(spark)
    return spark


def produce(url: str, address: str, count: int) -> float:
    """Send ``count`` 1 KiB messages in one transaction; seconds taken (a 100 MiB commit
    can pass the default 10 s timeout on a busy machine)."""
    body = os.urandom(BODY)
    start = time.perf_counter()
    with chute.connect(url, timeout=60) as conn, conn.session(transacted=True) as s:
        send = s.send
        for _ in range(count):
            send(address, body)
        s.commit()
    return time.perf_counter() - start


def consume(url: str, address: str, count: int) -> float:
    start = time.perf_counter()
    with chute.connect(url, timeout=60) as conn, conn.session() as s:
        consumer = s.consumer(address, prefetch=1000)
        for _ in range(count):
            if consumer.receive(timeout=30) is None:
                raise RuntimeError(f"{address}: a message is missing")
    return time.perf_counter() - start


def source(spark: Any, url: str, address: str, checkpoint: str) -> ceiling.Timed:
    reader = spark.readStream.format("chute").option("url", url).option("destination", address)
    if not address.startswith("stream:"):
        reader = reader.option("cursor", f"bench-{address}")
    return ceiling.timed(
        lambda: (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )


def sink_frame(spark: Any, count: int) -> Any:
    """``count`` rows of a 1 KiB binary ``body``, cached and counted (only writes are timed)."""
    df = spark.range(count, numPartitions=2).selectExpr(
        f"unhex(concat(repeat('ab', {BODY // 2}), repeat(lpad(hex(id), 8, '0'), {BODY // 8})))"
        " AS body"
    )
    df = df.selectExpr(f"substring(body, 1, {BODY}) AS body").cache()
    df.count()
    return df


def sink(df: Any, url: str, address: str) -> float:
    start = time.perf_counter()
    df.write.format("chute").option("url", url).option("destination", address).mode("append").save()
    return time.perf_counter() - start


def source_run(spark: Any, url: str, n: int, *, run: str, tmp: str) -> dict[str, float]:
    """Seconds of the stream source and of the Arrow source's ceiling only (``--only
    source``: the quick loop for work on the source)."""
    address = f"stream:in-{run}"
    ck = os.path.join(tmp, f"ck-{run}")
    produce(url, address, n)
    read = source(spark, url, address, ck + "-source")
    if read.rows != n:
        raise RuntimeError(f"the source read {read.rows} rows, not {n}")
    t = {"source": read.seconds, "source_batch": read.batches}
    top = ceiling.source(spark, n, "arrow", f"{ck}-arrow")
    t["source_ceiling_arrow"], t["source_ceiling_arrow_batch"] = top.seconds, top.batches
    with chute.connect(url, timeout=60) as conn:
        conn.delete(address, force=True)
    return t


def one_run(spark: Any, url: str, n: int, *, run: str, tmp: str, df: Any) -> dict[str, float]:
    """Seconds of every path, in one run (each run on fresh queues, deleted after)."""
    queues = [f"queue:{name}-{run}" for name in ("native", "in")]
    queues += [f"stream:{name}-{run}" for name in ("in", "out")]
    native, inq, ins, out = queues
    ck = os.path.join(tmp, f"ck-{run}")
    t: dict[str, float] = {}
    t["native_write"] = produce(url, native, n)
    t["native_read"] = consume(url, native, n)
    produce(url, ins, n)
    read = source(spark, url, ins, ck + "-source")
    if read.rows != n:
        raise RuntimeError(f"the source read {read.rows} rows, not {n}")
    t["source"], t["source_batch"] = read.seconds, read.batches
    produce(url, inq, n)
    read = source(spark, url, inq, ck + "-source-queue")
    if read.rows != n:
        raise RuntimeError(f"the source read {read.rows} rows of a queue, not {n}")
    t["source_queue"], t["source_queue_batch"] = read.seconds, read.batches
    for form in ("tuples", "arrow"):
        top = ceiling.source(spark, n, form, f"{ck}-{form}")
        t[f"source_ceiling_{form}"], t[f"source_ceiling_{form}_batch"] = top.seconds, top.batches
    t["sink"] = sink(df, url, out)
    with chute.connect(url, timeout=60) as conn:
        earliest, head = conn.cursor_open(out)  # a new stream starts after deleted ones
        if head - earliest != n:
            raise RuntimeError(f"the sink wrote {head - earliest} messages, not {n}")
        for q in queues:
            conn.delete(q, force=True)
    t["sink_ceiling"] = ceiling.sink(df, n)
    stream = ceiling.stream_sink(spark, n, ck + "-stream")
    t["sink_ceiling_stream"], t["sink_ceiling_stream_batch"] = stream.seconds, stream.batches
    return t


RATIOS: Final = {
    "source_vs_native": ("source", "native_read"),
    "sink_vs_native": ("sink", "native_write"),
    "source_vs_ceiling_arrow": ("source", "source_ceiling_arrow"),
    "source_vs_ceiling_tuples": ("source", "source_ceiling_tuples"),
    "source_batch_vs_ceiling_arrow_batch": ("source_batch", "source_ceiling_arrow_batch"),
    "source_batch_vs_ceiling_tuples_batch": ("source_batch", "source_ceiling_tuples_batch"),
    "sink_vs_ceiling": ("sink", "sink_ceiling"),
}
"""Same-run ratios: name -> (chute's path, the one it is measured against)."""

TARGETS: Final = (  # (what, where, at least): the targets
    ("source_rows_per_s", "median", 200_000),
    ("source_vs_ceiling_arrow", "median_ratio", 0.5),
    ("source_batch_rows_per_s", "median", 200_000),
    ("source_batch_vs_ceiling_arrow_batch", "median_ratio", 0.5),
    ("sink_rows_per_s", "median", 150_000),
    ("sink_vs_ceiling", "median_ratio", 0.5),
)


def report(n: int, runs: list[dict[str, float]]) -> dict[str, Any]:
    """Rows/s per run, medians, same-run ratios and the issue's targets (those of the
    paths measured)."""
    rates = [{k: round(n / max(s, 1e-9)) for k, s in t.items()} for t in runs]
    ratios = {k: (a, b) for k, (a, b) in RATIOS.items() if a in runs[0] and b in runs[0]}
    per_run = [{k: round(r[a] / r[b], 2) for k, (a, b) in ratios.items()} for r in rates]
    out: dict[str, Any] = {
        "count": n,
        "body_bytes": BODY,
        "runs": len(runs),
        "median": {
            f"{k}_rows_per_s": round(statistics.median(r[k] for r in rates)) for k in rates[0]
        },
        "median_ratio": {k: round(statistics.median(q[k] for q in per_run), 2) for k in ratios},
    }
    out["targets"] = [
        {
            "what": what,
            "median": out[where][what],
            "at_least": goal,
            "pass": out[where][what] >= goal,
        }
        for what, where, goal in TARGETS
        if what in out[where]
    ]
    out["per_run"] = [{"rows_per_s": r, "ratios": q} for r, q in zip(rates, per_run, strict=True)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--nodes",
        type=int,
        default=0,
        help="measure instead how the source scales over a stream's partitions on this "
        "many nodes (chute serve --nodes N; bench/spark_nodes.py)",
    )
    parser.add_argument(
        "--cores",
        type=int,
        default=0,
        help="with --nodes: Spark's local cores (default N, 2 or more)",
    )
    parser.add_argument(
        "--only",
        choices=["source"],
        help="measure only the stream source and the Arrow source's ceiling",
    )
    args = parser.parse_args()
    n = args.count
    if args.nodes:
        from bench.spark_nodes import scaling

        cores = args.cores or max(2, args.nodes)
        print(json.dumps(scaling(args.nodes, n, args.runs, cores), indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="chute-bench-spark-") as tmp:
        proc, url = start_broker(
            os.path.join(tmp, "data"),
            "[server]\nmax_memory = 0\nmemory_high_watermark = 0\n",  # no paging, no admission
        )
        try:
            spark = spark_session(os.path.join(tmp, "spark"))
            ceiling.register(spark)
            if args.only == "source":
                source_run(spark, url, 1000, run="warm", tmp=tmp)
                runs = [source_run(spark, url, n, run=str(i), tmp=tmp) for i in range(args.runs)]
                spark.stop()
                print(json.dumps(report(n, runs), indent=2))
                return
            # Warm up: Python workers, each data source's first query, every path.
            warm = sink_frame(spark, 1000)
            one_run(spark, url, 1000, run="warm", tmp=tmp, df=warm)
            warm.unpersist()
            df = sink_frame(spark, n)
            runs = [one_run(spark, url, n, run=str(i), tmp=tmp, df=df) for i in range(args.runs)]
            df.unpersist()
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps(report(n, runs), indent=2))


if __name__ == "__main__":
    main()
