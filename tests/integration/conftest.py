"""Fixtures that run a real ``chute serve`` subprocess on free ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .etcd_fixture import EtcdProcess, start_etcd
from .freeze import thaw
from .ports import free_port as free_port  # noqa: PLC0414 - the tests import it from here

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

READY_TIMEOUT = 20.0
REPORTED_LINES = 80
"""Lines of each broker's output a failing test's report ends with."""


@dataclass
class ChuteServer:
    """A running ``chute serve``; its output is collected in ``lines``."""

    process: subprocess.Popen[str]
    port: int
    data_dir: Path
    lines: list[str] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition, repr=False)
    """Notified whenever a line of output arrives."""

    @property
    def url(self) -> str:
        return f"chute://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, text: str, *, start: int = 0, timeout: float = READY_TIMEOUT) -> str:
        """The first output line from index ``start`` on containing ``text``: waits for it
        (each arriving line wakes the wait) until ``timeout`` seconds passed."""
        end = time.monotonic() + timeout
        with self.arrived:
            while True:
                for line in self.lines[start:]:
                    if text in line:
                        return line
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no output line with {text!r}:\n{self.output}")
                self.arrived.wait(remaining)


def start_server(
    tmp_path: Path,
    *extra: str,
    port: int | None = None,
    data_dir: Path | None = None,
    preexec_fn: Callable[[], object] | None = None,
    prefix: Sequence[str] = (),
    ready_timeout: float = READY_TIMEOUT,
) -> ChuteServer:
    """Start ``chute serve`` and return once it printed that it listens.

    Its data lives in ``data_dir`` (``tmp_path / "data"`` by default): start
    another server on the same one to restart the broker on its journal.
    ``prefix`` goes before the command (a namespace to run it in, say).
    The STOMP and HTTP listeners are off (their default ports would clash
    between parallel servers) unless ``extra`` passes ``--stomp-port`` or
    ``--http-port`` (take one from :func:`free_port`). ``preexec_fn`` runs in the
    child before ``chute serve`` (to lower a resource limit, say).
    """
    port = port or free_port()
    data_dir = data_dir or tmp_path / "data"
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "chute.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--stomp-port",
        "0",
        "--http-port",
        "0",
        *extra,  # argparse: a later flag wins
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=preexec_fn,  # noqa: PLW1509 - only resource limits, before exec
    )
    server = ChuteServer(process, port, data_dir)
    ready = threading.Event()
    listening = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with server.arrived:
                server.lines.append(line.rstrip("\n"))
                server.arrived.notify_all()
            if line.startswith("chute listening"):
                listening.set()
                ready.set()
        ready.set()  # the output ended: the process is ending

    threading.Thread(target=pump, daemon=True).start()
    _running.append(server)
    # Its output may end before the process has exited: what decides is whether it said
    # it listens, not whether poll() already sees the exit.
    if not ready.wait(ready_timeout) or not listening.is_set() or process.poll() is not None:
        process.kill()
        process.wait(READY_TIMEOUT)
        raise RuntimeError(f"chute serve did not start:\n{server.output}")
    return server


_running: list[ChuteServer] = []
"""Every server started and, at the last test's start, still running or just started."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test's report ends with the output of each broker that ran during it:
    what the broker said is often what tells a failure's cause (a test that only
    sees a timeout, say)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for server in _running:
            tail = server.lines[-REPORTED_LINES:]
            report.sections.append(
                (f"chute serve on port {server.port} (last {len(tail)} lines)", "\n".join(tail))
            )
    if call.when == "teardown":  # a server that ended is not reported for later tests
        _running[:] = [s for s in _running if s.process.poll() is None]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A one-member etcd of the test's own (the cluster tests' agreement)."""
    process = start_etcd(tmp_path)
    yield process
    process.kill()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChuteServer]:
    srv = start_server(tmp_path)
    yield srv
    if srv.process.poll() is None:
        srv.stop()


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[ChuteServer, ChuteServer]]:
    """Two brokers, each with its own data directory (``a`` and ``b``), for a URL that
    lists both; stopped at the end (thawed first, if the test froze one)."""
    first = start_server(tmp_path, data_dir=tmp_path / "a")
    second = start_server(tmp_path, data_dir=tmp_path / "b")
    yield first, second
    for server in (first, second):
        if server.process.poll() is None:
            thaw(server.process)
            server.stop()


@pytest.fixture(scope="session")
def spark_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One SparkSession for the test process: starting one takes a JVM's seconds, and the
    Spark modules of a lane run one after another in one process (tests/conftest.py).
    Each module takes it through its ``spark`` fixture (test_spark.py)."""
    from .spark_support import start_session  # imports pyspark only when asked for

    session = start_session(tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()
