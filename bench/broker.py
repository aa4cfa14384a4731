"""A ``chute serve`` subprocess for the benches, and a bystander that pings it.

:func:`start_broker` runs the broker as a user does, on a free port, and reads
its log on (so it never blocks on a full pipe) into :func:`broker_log`.
:func:`pinger` is the bystander the benches that measure what one client's
work costs everyone else run beside it: a request the broker's loop answers at
once, sent as fast as it can, each timed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chute


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_LOGS: dict[int, list[str]] = {}


def start_broker(
    data_dir: str,
    config: str | None = None,
    *,
    port: int | None = None,
    stomp_port: int = 0,
    http_port: int = 0,
    log_level: str | None = "warning",
    program: Sequence[str] = ("-m", "chute.cli"),
    pythonpath: str | None = None,
    extra: Sequence[str] = (),
) -> tuple[subprocess.Popen[str], str]:
    """``chute serve`` with its native listener on ``port`` (None: a free one), STOMP on
    ``stomp_port`` and HTTP on ``http_port`` if given, its journal in ``data_dir``, and
    ``config`` as its TOML file if given; ``log_level`` None: the broker's default.
    ``program``: what follows ``python`` (``-c`` and a script that patches the broker
    before it starts, say). ``pythonpath``: the broker of another checkout, run there
    (``-m`` puts the working directory first on the path). ``extra``: more arguments
    of ``chute serve`` (``--nodes 4``). Its log is read on into :func:`broker_log`."""
    if port is None:
        port = free_port()
    cmd = [sys.executable, *program, "serve", "--port", str(port), "--data-dir", data_dir]
    cmd += ["--stomp-port", str(stomp_port), "--http-port", str(http_port), *extra]
    if config is not None:
        path = Path(data_dir).with_suffix(".toml")
        path.write_text(config)
        cmd += ["--config", str(path)]
    env = None
    if pythonpath:
        env = dict(os.environ)
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.Popen(
        cmd if log_level is None else [*cmd, "--log-level", log_level],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=pythonpath or None,
    )
    assert proc.stdout is not None
    lines = _LOGS[proc.pid] = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("chute listening"):
            break
    else:
        raise RuntimeError("broker did not start:\n" + "".join(lines))
    threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True).start()
    return proc, f"chute://127.0.0.1:{port}"


def broker_log(proc: subprocess.Popen[str]) -> list[str]:
    """What a broker from :func:`start_broker` has logged so far."""
    return _LOGS.get(proc.pid, [])


def pinger(url: str, ready: Any, stop: Any, out: Any, pause: float = 0.0) -> None:
    """Pings until told to stop (``pause`` seconds between two); puts in ``out`` (sent at,
    seconds it took) of each. A ping is a request the broker's loop answers at once, and
    every broker version knows: the list of prepared transactions (none). How long one
    takes is how long the loop kept it waiting."""
    samples: list[tuple[float, float]] = []
    with chute.connect(url, timeout=600) as conn:
        conn.prepared()
        ready.set()
        while not stop.is_set():
            began = time.time()
            t0 = time.perf_counter()
            conn.prepared()
            samples.append((began, time.perf_counter() - t0))
            if pause:
                time.sleep(pause)
    out.put(samples)
