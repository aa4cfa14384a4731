"""The streaming job of issue 6: windowed order counts and sums per region.

Reads ``queue:orders`` through the chute source, aggregates 5-second windows
per region, writes each finished window as a JSON message to ``topic:order-stats``
through the chute sink, exactly once (append mode: a Python sink takes no updates).
The job consumes the queue and holds it while it runs; stopping it (``--seconds``)
hands the queue back to other consumers at once.

    python examples/orders_job.py --url chute://127.0.0.1:5445 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

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
    orders = (
        spark.readStream.format("chute")
        .option("url", args.url)
        .option("destination", "queue:orders")
        .option("cursor", "orders-job")  # this query's name at the broker: keep it across restarts
        .option("maxMessagesPerTrigger", 10000)
        .load()
    )
    order = F.from_json(F.col("body").cast("string"), "region STRING, amount DOUBLE, ts DOUBLE")
    stats = (
        orders.select(order.alias("o"), "timestamp")
        .select("o.region", "o.amount", "timestamp")
        .withWatermark("timestamp", "5 seconds")
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
    query = (
        stats.writeStream.format("chute")
        .option("url", args.url)
        .option("destination", "topic:order-stats")
        .option("checkpointLocation", checkpoint)
        .outputMode("append")  # a window is final once the watermark passes it
        .trigger(processingTime="2 seconds")
        .start()
    )
    print(f"job: running, checkpoint {checkpoint}", flush=True)
    query.awaitTermination(args.seconds or None)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
