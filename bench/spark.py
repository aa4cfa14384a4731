"""The Spark connector against the native client, 1 KiB persistent messages; prints JSON.

In one run, against one ``chute serve`` (journal, ``sync = always``) and one
local[2] SparkSession (warmed up first, so its cold start is not counted):

* ``source``: a stream query reads N messages of a queue through the
  connector (one micro-batch, ``trigger(availableNow=True)``) into Spark's
  ``noop`` sink; rows/s from ``start()`` to the end.
* ``native_read``: the native client reads the same N messages (a consumer,
  auto ack) ; msgs/s.
* ``sink``: N rows of a DataFrame (a 1 KiB binary ``body``) written through
  the connector's batch writer: two tasks, each sending in a two-phase
  transaction, prepared, then committed together by the driver; rows/s.
* ``native_write``: the native client sends N messages in one transaction and
  commits (the same durability as the sink); msgs/s.

    python -m bench.spark                 # N = 100,000
    python -m bench.spark --count 20000   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chute
from bench.native import start_broker

BODY = 1024


def spark_session(tmp: str) -> Any:
    java = shutil.which("java")
    if not os.environ.get("JAVA_HOME") and java:
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import chute.spark

    spark = (
        SparkSession.builder.master("local[2]")
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
    """Send ``count`` 1 KiB messages in one transaction; seconds taken."""
    body = os.urandom(BODY)
    start = time.perf_counter()
    with chute.connect(url) as conn, conn.session(transacted=True) as s:
        send = s.send
        for _ in range(count):
            send(address, body)
        s.commit()
    return time.perf_counter() - start


def consume(url: str, address: str, count: int) -> float:
    start = time.perf_counter()
    with chute.connect(url) as conn, conn.session() as s:
        consumer = s.consumer(address, prefetch=1000)
        for _ in range(count):
            if consumer.receive(timeout=30) is None:
                raise RuntimeError(f"{address}: a message is missing")
    return time.perf_counter() - start


def source(spark: Any, url: str, address: str, checkpoint: str) -> tuple[float, int]:
    start = time.perf_counter()
    query = (
        spark.readStream.format("chute")
        .option("url", url)
        .option("destination", address)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return seconds, rows


def sink(spark: Any, url: str, address: str, count: int) -> float:
    df = spark.range(count, numPartitions=2).selectExpr(
        f"unhex(concat(repeat('ab', {BODY // 2}), repeat(lpad(hex(id), 8, '0'), {BODY // 8})))"
        " AS body"
    )
    df = df.selectExpr(f"substring(body, 1, {BODY}) AS body").cache()
    df.count()  # materialise the rows first: only the write is timed
    start = time.perf_counter()
    df.write.format("chute").option("url", url).option("destination", address).mode("append").save()
    seconds = time.perf_counter() - start
    df.unpersist()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    n = args.count
    with tempfile.TemporaryDirectory(prefix="chute-bench-spark-") as tmp:
        proc, url = start_broker(
            os.path.join(tmp, "data"),
            "[server]\nmax_memory = 0\n",  # no paging: the connector
        )
        try:
            spark = spark_session(os.path.join(tmp, "spark"))
            # Warm up: Python workers, the data source's first query, both directions.
            produce(url, "queue:warm", 1000)
            source(spark, url, "queue:warm", os.path.join(tmp, "ck-warm"))
            sink(spark, url, "queue:warm-out", 1000)

            write_native = produce(url, "queue:native", n)
            read_native = consume(url, "queue:native", n)
            produce(url, "queue:in", n)
            read_spark, rows = source(spark, url, "queue:in", os.path.join(tmp, "ck"))
            if rows != n:
                raise RuntimeError(f"the source read {rows} rows, not {n}")
            write_spark = sink(spark, url, "queue:out", n)
            with chute.connect(url) as conn:
                _, head = conn.cursor_open("queue:out")
                if head - 1 != n:
                    raise RuntimeError(f"the sink wrote {head - 1} messages, not {n}")
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)
    result = {
        "count": n,
        "body_bytes": BODY,
        "source_rows_per_s": round(n / read_spark),
        "native_read_msgs_per_s": round(n / read_native),
        "source_vs_native": round(read_native / read_spark, 2),
        "sink_rows_per_s": round(n / write_spark),
        "native_write_msgs_per_s": round(n / write_native),
        "sink_vs_native": round(write_native / write_spark, 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
