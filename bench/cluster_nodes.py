"""A throw-away etcd and cluster nodes for the cluster bench and soak.

:func:`start_etcd` runs a one-member etcd (Debian's ``etcd-server``) on free loopback
ports with its data in a directory given, waits until its ``/health`` says it has a
leader, and returns it; :meth:`Etcd.stop` kills it. Raft timings are short (50 ms
heart-beat, 500 ms election), as the tests run it. :func:`start_node` runs ``chute
serve --cluster … --node …`` (through :func:`bench.broker.start_broker`, its log read
on), and :func:`wait_linked` waits until nodes are linked to each other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.broker import broker_log, free_port, start_broker

READY_TIMEOUT = 30.0


def etcd_program() -> str:
    """The ``etcd`` program (``make install-test`` installs it)."""
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if found is None:
        raise SystemExit("etcd is not installed (Debian's etcd-server; make install-test)")
    return found


@dataclass
class Etcd:
    process: subprocess.Popen[bytes]
    address: str  # host:port of its client URL
    log: Path

    def url(self, cluster: str) -> str:
        """The ``--cluster`` URL of a chute cluster named ``cluster`` on this etcd."""
        return f"etcd://{self.address}/{cluster}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def start_etcd(directory: Path) -> Etcd:
    directory.mkdir(parents=True, exist_ok=True)
    client = f"http://127.0.0.1:{free_port()}"
    peer = f"http://127.0.0.1:{free_port()}"
    log = directory / "etcd.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                etcd_program(),
                "--name=bench",
                f"--data-dir={directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=bench={peer}",
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--log-level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    etcd = Etcd(process, client.removeprefix("http://"), log)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"etcd exited:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as response:  # noqa: S310
                if json.loads(response.read()).get("health") == "true":
                    return etcd
        except (OSError, ValueError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    etcd.stop()
    raise RuntimeError(f"etcd not healthy after {READY_TIMEOUT} s")


def start_node(  # noqa: PLR0917
    data_dir: Path,
    etcd: Etcd,
    cluster: str,
    name: str,
    ttl: int = 10,
    port: int | None = None,
    extra: str = "",
    pythonpath: str | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """``chute serve`` as node ``name`` of ``cluster`` on ``etcd``, its journal in
    ``data_dir`` (kept across starts: start it again there to restart the node);
    ``extra``: more TOML; ``pythonpath``: the chute of another checkout. Returns the
    process and its ``chute://`` URL."""
    config = f'[cluster]\ncoordinator = "{etcd.url(cluster)}"\nnode = "{name}"\nttl = {ttl}\n'
    return start_broker(
        str(data_dir), config + extra, port=port, log_level="info", pythonpath=pythonpath
    )


def wait_linked(nodes: dict[str, subprocess.Popen[str]], timeout: float = 60.0) -> None:
    """Until each node logged a link to every other one (since it started)."""
    deadline = time.monotonic() + timeout
    for name, proc in nodes.items():
        for other in nodes:
            if other == name:
                continue
            while not any(f"linked to node {other}" in line for line in broker_log(proc)):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"node {name} not linked to {other}")
                time.sleep(0.05)
