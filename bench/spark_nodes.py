"""``python -m bench.spark --nodes N``: how the Spark source's reads scale with a stream's
partitions spread over N nodes; prints JSON.

One ``chute serve --nodes N`` (journals, ``sync = always``) and one local-mode
SparkSession with N cores (at least 2; ``--cores`` says otherwise). Each run sends
``--count`` 1 KiB persistent messages to a stream of one partition (``stream:one-R``,
on the node its name hashes to) and as many to a stream of N partitions
(``stream:wide-R``, a partition homed on each node), waits until the node the query
connects to (node-0) holds every partition up to its home's head, then times a
``trigger(availableNow=True)`` query reading each into Spark's ``noop`` sink, as
``bench.spark``'s ``source`` does. The one-partition stream is one node's rate (a
partition is read on its home, one node's core); the wide stream's partitions are
read in parallel, each on its home (docs/spark.md, "Partitions and homes").
``scaling`` is the wide stream's rate over N times one node's, from ``start()`` to
the end and (``scaling_batch``) over the micro-batch alone, without the query's
start-up: the goal is 0.8 or more of the micro-batch's, up to Spark's own ceiling on
the machine (``source_ceiling_arrow``, the in-memory Arrow source of
``bench.spark``, measured in the same run). On a machine
with fewer cores than N nodes plus Spark's tasks, the nodes share cores and no
scaling shows: run it where each node has a core of its own.

    python -m bench.spark --nodes 4 --count 100000 --runs 3
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

import chute
from bench import spark_ceiling as ceiling
from bench.broker import free_port, start_broker

SERVER = "[server]\nmax_memory = 0\nmemory_high_watermark = 0\n"  # no paging, no admission
CAUGHT_UP_S = 300.0
"""How long node-0's copies may take to catch up with the partitions' homes."""


def partitions(address: str, count: int) -> list[str]:
    return [address if p == 0 else f"{address}#{p}" for p in range(count)]


def caught_up(url: str, address: str, count: int, n: int) -> None:
    """Wait until the node at ``url`` holds ``n`` messages over ``address``'s ``count``
    partitions (its copies of those homed elsewhere follow their homes)."""
    end = time.monotonic() + CAUGHT_UP_S
    with chute.connect(url, timeout=60) as conn:
        while True:
            held = sum(
                head - first for first, head in map(conn.cursor_open, partitions(address, count))
            )
            if held >= n:
                return
            if time.monotonic() > end:
                raise RuntimeError(f"{address}: node-0 holds {held} of {n} messages")
            time.sleep(0.1)  # polling copies catching up, before anything is timed


def one_run(spark: Any, url: str, nodes: int, n: int, *, run: str, tmp: str) -> dict[str, float]:
    """Rows/s of each read of one run."""
    from bench.spark import produce, source  # the same paths as bench.spark's

    out: dict[str, float] = {}
    for name, count in (("one", 1), ("wide", nodes)):
        address = f"stream:{name}-{run}"
        produce(url, address, n)  # round robin over the partitions (no key)
        caught_up(url, address, count, n)
        read = source(spark, url, address, os.path.join(tmp, f"ck-{name}-{run}"))
        if read.rows != n:
            raise RuntimeError(f"the source read {read.rows} rows of {address}, not {n}")
        out[name] = n / max(read.seconds, 1e-9)
        out[f"{name}_batch"] = n / max(read.batches, 1e-9)
    top = ceiling.source(spark, n, "arrow", os.path.join(tmp, f"ck-ceiling-{run}"))
    out["ceiling"] = n / max(top.seconds, 1e-9)
    out["ceiling_batch"] = n / max(top.batches, 1e-9)
    return out


def scaling(nodes: int, n: int, runs: int, cores: int) -> dict[str, Any]:
    """Every run's rates, their medians and the scaling (see the module docstring)."""
    from bench.spark import spark_session

    with tempfile.TemporaryDirectory(prefix="chute-bench-spark-nodes-") as tmp:
        port = free_port()
        config = SERVER + f'[destinations."stream:wide-*"]\npartitions = {nodes}\n'
        proc, _ = start_broker(
            os.path.join(tmp, "data"), config, port=port, extra=("--nodes", str(nodes))
        )
        url = f"chute://127.0.0.1:{port + 1}"  # node-0's own port (the native port + 1)
        try:
            spark = spark_session(os.path.join(tmp, "spark"), cores=cores)
            ceiling.register(spark)
            one_run(spark, url, nodes, 1000, run="warm", tmp=tmp)  # workers, first queries
            rates = [one_run(spark, url, nodes, n, run=str(i), tmp=tmp) for i in range(runs)]
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(60)
    return report(nodes, n, cores, rates)


def report(nodes: int, n: int, cores: int, rates: list[dict[str, float]]) -> dict[str, Any]:
    """The runs' rates (rows/s), their medians, the scaling and the target."""
    runs = len(rates)
    median = {k: round(statistics.median(r[k] for r in rates)) for k in rates[0]}
    goal = min(0.8 * nodes * median["one_batch"], median["ceiling_batch"])
    return {
        "nodes": nodes,
        "spark_cores": cores,
        "count": n,
        "body_bytes": 1024,
        "runs": runs,
        "median": {  # rows/s; _batch: over the micro-batch alone (triggerExecution)
            "one_partition": median["one"],
            "one_partition_batch": median["one_batch"],
            f"{nodes}_partitions": median["wide"],
            f"{nodes}_partitions_batch": median["wide_batch"],
            "source_ceiling_arrow": median["ceiling"],
            "source_ceiling_arrow_batch": median["ceiling_batch"],
        },
        "scaling": round(median["wide"] / (nodes * median["one"]), 2),
        "scaling_batch": round(median["wide_batch"] / (nodes * median["one_batch"]), 2),
        "target": {
            "what": f"the micro-batch of {nodes} partitions >= 0.8 x {nodes} x one "
            "partition's, up to the ceiling's",
            "at_least": round(goal),
            "pass": median["wide_batch"] >= goal,
        },
        "per_run": [{k: round(v) for k, v in r.items()} for r in rates],
    }
