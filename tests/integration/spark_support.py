"""What the Spark tests share: local-mode Spark's settings and environment, the one
SparkSession of a test process, and a driver of its own for a test to kill (a streaming
query from the connector into the connector in a child process, in a process group of
its own so that killing it takes its JVM and Python workers too) with the wait for its
query's progress, seen from the broker.

Nothing here imports pyspark: the modules that use it skip themselves without it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import chute
from tests.tools import need_tool

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
"""Every SparkSession's settings, the tests' own and their drivers'."""

JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""The driver JVM's options: the quickest start on a small machine."""


def spark_env() -> None:
    """The environment a SparkSession of this process (or a child's) needs: a JDK and
    Python workers on this virtual environment's interpreter (pyarrow)."""
    if not os.environ.get("JAVA_HOME"):
        java = need_tool("java", "the Spark tests need a JDK (java on PATH or JAVA_HOME)")
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def start_session(tmp: Path) -> SparkSession:
    """A local-mode SparkSession with the connector registered, its files under ``tmp``."""
    from pyspark.sql import SparkSession

    import chute.spark

    spark_env()
    builder = SparkSession.builder.master("local[2]").appName("chute-tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = (
        builder.config("spark.sql.warehouse.dir", str(tmp / "wh"))
        .config("spark.local.dir", str(tmp / "local"))
        .config("spark.driver.extraJavaOptions", f"{JVM_OPTIONS} -Dderby.system.home={tmp}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    chute.spark.register(session)
    return session


PROGRESS_TIMEOUT = 240.0
"""Seconds a driver may take to get its query as far as a test waits for."""

RUN = "query.awaitTermination()"
"""What a driver does once its query started: runs it until it is killed."""

SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import chute.spark
    url, checkpoint = sys.argv[1], sys.argv[2]
    builder = SparkSession.builder.master("local[2]")
    for key, value in {conf!r}.items():
        builder = builder.config(key, value)
    spark = builder.config("spark.driver.extraJavaOptions", {jvm!r}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    chute.spark.register(spark)
    reader = spark.readStream.format("chute").option("url", url)
    for key, value in {source!r}.items():
        reader = reader.option(key, value)
    query = (reader.load().selectExpr(*{columns!r})
             .writeStream.format("chute").option("url", url).option("destination", {sink!r})
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="{trigger_ms} milliseconds").start())
    """
)


def write_driver(
    path: Path,
    sink: str,
    *,
    columns: Sequence[str] = ("body",),
    trigger_ms: int = 200,
    then: str = RUN,
    **source: str | int,
) -> Path:
    """Write to ``path`` a driver script taking a broker's URL and a checkpoint directory:
    a query reading with the ``source`` options (``destination``, ``cursor``,
    ``maxOffsetsPerTrigger``, ...), selecting ``columns`` (SQL expressions) and writing
    into ``sink``, triggered every ``trigger_ms``; ``then`` is the code that follows its
    start (``query`` names the query)."""
    script = SCRIPT.format(
        conf=SPARK_CONF,
        jvm=JVM_OPTIONS,
        source=source,
        columns=tuple(columns),
        sink=sink,
        trigger_ms=trigger_ms,
    )
    path.write_text(script + textwrap.dedent(then) + "\n")
    return path


def driver_command(script: Path, url: str, checkpoint: Path) -> list[str]:
    """The command line that runs ``script`` against ``url`` with ``checkpoint``."""
    spark_env()  # the child inherits JAVA_HOME and the Python workers' interpreter
    return [sys.executable, str(script), url, str(checkpoint)]


def start_driver(script: Path, url: str, checkpoint: Path) -> subprocess.Popen[bytes]:
    """Run ``script`` (:func:`write_driver`) in a process group of its own."""
    return subprocess.Popen(
        driver_command(script, url, checkpoint),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its JVM and Python workers die with it
    )


def kill_driver(child: subprocess.Popen[bytes]) -> None:
    """Kill a driver and what it started (it may have ended by itself)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(30)


def wait_for_progress(
    url: str,
    count: Callable[[chute.Connection], int],
    at_least: int,
    child: subprocess.Popen[bytes],
    restart: Callable[[], subprocess.Popen[bytes]] | None = None,
) -> subprocess.Popen[bytes]:
    """Poll the broker at ``url`` until ``count`` of a connection to it is at least
    ``at_least``, failing if the driver ends first or after :data:`PROGRESS_TIMEOUT`;
    return the driver that got there. With ``restart``, a driver that ended is started
    again once by it (a task that was writing when its broker died fails the query, and
    local mode retries no task: an operator starts it again from its checkpoint)."""
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    while True:
        try:
            with chute.connect(url) as conn:
                if count(conn) >= at_least:
                    return child
        except chute.ConnectError:
            pass  # the broker is restarting
        if child.poll() is not None and restart is not None:
            child, restart = restart(), None
        assert child.poll() is None, "the query ended by itself"
        assert time.monotonic() < deadline, "the query made no progress"
        time.sleep(0.5)  # polling the broker (a batch takes seconds), with a deadline
