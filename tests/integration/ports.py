"""Free TCP ports for the servers a test starts: below the kernel's ephemeral range,
a slice per pytest-xdist worker, and each claimed across every test process on the
machine (two test runs at once never pick the same port)."""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path
from typing import Final


def _ephemeral_ports() -> range:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


_EPHEMERAL: Final = _ephemeral_ports()
_picked: set[int] = set()


def _worker_ports() -> range:
    """The ports this test process picks from: below the kernel's ephemeral range, and
    under pytest-xdist a slice of its own per worker (``gw0``, ``gw1``, ...), so two
    workers never hand out the same port between its check and its server's bind."""
    low, high = 20000, min(_EPHEMERAL.start, 32768)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return range(low, high)
    index = int(worker[2:]) % count
    size = (high - low) // count
    return range(low + index * size, low + (index + 1) * size)


_PORTS: Final = _worker_ports()
_CLAIMS: Final = os.open(
    Path(tempfile.gettempdir()) / "chute-test-ports.lock", os.O_RDWR | os.O_CREAT
)
"""Byte N of this file, locked, is port N claimed by a live test process on this machine:
two test runs at once (their workers share slices) never pick the same port. The
kernel drops a process's locks when it exits, however it ends."""


def _claim(port: int) -> bool:
    try:
        fcntl.lockf(_CLAIMS, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False  # another test process holds it
    return True


def free_port() -> int:
    """A TCP port nothing listens on, for a server to bind later.

    Picked below the kernel's ephemeral range: a port from that range (what binding to
    port 0 gives) may be handed to some client's outgoing connection before the server
    binds it, which made a test fail now and then with "address already in use".
    Each xdist worker picks from its own slice (:func:`_worker_ports`), and a port is
    claimed across test processes (:data:`_CLAIMS`).
    """
    low, high = _PORTS.start, _PORTS.stop - 1
    for _ in range(1000):
        port = random.randint(low, high)
        if port in _picked or not _claim(port) or not _bindable(port):
            continue
        _picked.add(port)
        return port
    raise RuntimeError(f"no free port between {low} and {high}")


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (a ``--node-port``), all claimed."""
    for _ in range(100):
        first = free_port()
        rest = range(first + 1, first + count)
        if rest.stop > _PORTS.stop or any(port in _picked for port in rest):
            continue
        if all(_claim(port) and _bindable(port) for port in rest):
            _picked.update(rest)
            return first
    raise RuntimeError(f"no {count} consecutive free ports")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
