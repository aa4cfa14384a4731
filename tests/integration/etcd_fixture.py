"""Real etcd processes for the cluster tests, on free loopback ports.

:class:`EtcdProcess` runs Debian's ``etcd`` (``etcd-server``, installed by ``make
install-test``) as a one-member cluster with a throw-away data directory, waits until
its ``/health`` says it has a leader, and can be killed, paused (SIGSTOP) and started
again on the same ports and data. Raft timings are shortened (50 ms heartbeat, 500 ms
election) so that leases of 1-2 s are allowed. :func:`etcd_or_skip` skips a test,
with the reason, only when the ``etcd`` program is not installed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from chute.cluster.url import Endpoint
from tests.integration.freeze import freeze, thaw
from tests.integration.ports import free_port
from tests.tools import need_tool

READY_TIMEOUT = 30.0


def etcd_or_skip() -> str:
    """The ``etcd`` program's path; skips the test when it is not installed (fails it
    in CI, which needs every tool: :func:`tests.tools.missing`)."""
    if shutil.which("etcd") is None and Path("/usr/bin/etcd").exists():
        return "/usr/bin/etcd"
    return need_tool("etcd", "the cluster's tests run a real etcd (Debian's etcd-server)")


class EtcdProcess:
    """One etcd member on loopback; ``endpoint`` is where clients reach it. Alone it is
    a one-member cluster; :func:`start_etcd_cluster` makes several into one."""

    def __init__(self, program: str, directory: Path, name: str = "test") -> None:
        self.program = program
        self.name = name
        self.directory = directory
        self.data = directory / f"etcd-{name}"
        self.log = directory / f"etcd-{name}.log"
        self.endpoint = Endpoint("127.0.0.1", free_port())
        self.peer_url = f"http://127.0.0.1:{free_port()}"
        self.initial_cluster = f"{name}={self.peer_url}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return str(self.endpoint)

    def start(self) -> EtcdProcess:
        """Start (or start again, on its data) and wait until it is healthy."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.kill()  # never leave an etcd behind a failed start
            raise
        return self

    def launch(self) -> None:
        client = f"http://{self.endpoint}"
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.program,
                    f"--name={self.name}",
                    f"--data-dir={self.data}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={self.peer_url}",
                    f"--initial-advertise-peer-urls={self.peer_url}",
                    f"--initial-cluster={self.initial_cluster}",
                    "--initial-cluster-token=chute-test",
                    "--heartbeat-interval=50",
                    "--election-timeout=500",
                    "--logger=zap",
                    "--log-level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self) -> None:
        """Poll ``/health`` until etcd has a leader (or fail with its log's tail)."""
        deadline = time.monotonic() + READY_TIMEOUT
        url = f"http://{self.endpoint}/health"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"etcd exited with {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        pytest.fail(f"etcd not healthy after {READY_TIMEOUT} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: no clean shutdown; its data stays for :meth:`start`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP, returning once all of etcd has stopped (see :func:`freeze`)."""
        assert self.process is not None
        freeze(self.process)

    def resume(self) -> None:
        assert self.process is not None
        thaw(self.process)


def start_etcd(directory: Path) -> EtcdProcess:
    return EtcdProcess(etcd_or_skip(), directory).start()


def start_etcd_cluster(directory: Path, size: int = 3) -> list[EtcdProcess]:
    """``size`` etcd members forming one cluster (they start together: each waits for
    a quorum before it is healthy)."""
    program = etcd_or_skip()
    members = [EtcdProcess(program, directory, f"m{n}") for n in range(size)]
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    try:
        for member in members:
            member.initial_cluster = initial
            member.launch()
        for member in members:
            member.wait_ready()
    except BaseException:
        for member in members:
            member.kill()
        raise
    return members
