"""The streaming job: two independent queries over one stream of orders.

Both read ``stream:orders`` through the chute source, each from its own checkpoint
(a stream is read, not consumed: each query sees every order), each of its
partitions by tasks of their own, and say at the end how far they read in each
partition (the offsets their checkpoints keep, as Kafka's source keeps them):

* ``region-stats``: 5-second windows per region (orders, total amount), each finished
  window a JSON message on ``topic:order-stats``;
* ``order-totals``: 10-second windows over every region (orders, total amount), on
  ``topic:order-totals``.

Both write through the chute sink, exactly once (append mode: a Python sink takes no
updates). Stopped and started again with the same ``--checkpoint``, each query goes on
from where its checkpoint says.

    python examples/orders_job.py --url chute://127.0.0.1:5445 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

import chute.spark


def session() -> SparkSession:
    if not os.environ.get("JAVA_HOME") and (java := shutil.which("java")):
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("chute-orders")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="chute://127.0.0.1:5445")
    parser.add_argument("--checkpoint", default=None, help="default: a temporary directory")
    parser.add_argument("--seconds", type=float, default=0, help="stop after (0 = run forever)")
    args = parser.parse_args()
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="chute-orders-ck-")

    spark = session()
    chute.spark.register(spark)
    order = F.from_json(F.col("body").cast("string"), "region STRING, amount DOUBLE, ts DOUBLE")

    def orders() -> DataFrame:
        return (
            spark.readStream.format("chute")
            .option("url", args.url)
            .option("destination", "stream:orders")
            .option("startingOffsets", "earliest")  # a new checkpoint reads the whole stream
            .option("maxOffsetsPerTrigger", 10000)
            .load()
            .select(order.alias("o"), "timestamp")
            .select("o.region", "o.amount", "timestamp")
            .withWatermark("timestamp", "5 seconds")
        )

    def publish(frame: DataFrame, name: str, destination: str) -> StreamingQuery:
        return (
            frame.writeStream.format("chute")
            .queryName(name)
            .option("url", args.url)
            .option("destination", destination)
            .option("checkpointLocation", f"{checkpoint}/{name}")
            .outputMode("append")  # a window is final once the watermark passes it
            .trigger(processingTime="2 seconds")
            .start()
        )

    by_region = (
        orders()
        .groupBy(F.window("timestamp", "5 seconds"), "region")
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
        .select(
            F.to_json(
                F.struct(
                    F.col("window.start").cast("string").alias("window"),
                    "region",
                    "orders",
                    "total",
                )
            ).alias("body"),
            F.col("region").alias("correlation_id"),
        )
    )
    overall = (
        orders()
        .groupBy(F.window("timestamp", "10 seconds"))
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
        .select(
            F.to_json(
                F.struct(F.col("window.start").cast("string").alias("window"), "orders", "total")
            ).alias("body")
        )
    )
    queries = [
        publish(by_region, "region-stats", "topic:order-stats"),
        publish(overall, "order-totals", "topic:order-totals"),
    ]
    print(f"job: running, checkpoint {checkpoint}", flush=True)
    spark.streams.awaitAnyTermination(args.seconds or None)
    for query in queries:
        progress = query.lastProgress
        query.stop()
        if progress is not None and progress.sources:
            # Kafka's shape: the next offset of each partition, {"stream:orders": {"0": n, ...}}
            print(f"job: {query.name} read up to {progress.sources[0].endOffset}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
