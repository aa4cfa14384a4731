"""A broker with ``[[dropbox]]`` mounts, and files handled as DropboxMQ does, for the
tests of the DropboxMQ bridge.

:func:`serve` starts ``chute serve`` with a configuration made of TOML pieces;
:func:`import_mount` and :func:`export_mount` write the ``[[dropbox]]`` tables
those tests use (an import polled every 50 ms, so that a test waits little for
a file the watcher would not see on its own; an export), :func:`mount` any other.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import ChuteServer, start_server

WAIT = 20.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def serve(tmp_path: Path, *config: str) -> ChuteServer:
    """``chute serve`` in ``tmp_path`` with the TOML pieces ``config``, on ports of its own."""
    path = tmp_path / "chute.toml"
    path.write_text("\n".join(config))
    return start_server(tmp_path, "--config", str(path), "--stomp-port", "0", "--http-port", "0")


def mount(root: Path, *destinations: str, **settings: str | int | list[str]) -> str:
    """A ``[[dropbox]]`` table: ``root``, ``destinations``, then ``settings`` as given."""
    lines = ["[[dropbox]]", f"root = {json.dumps(str(root))}"]
    lines.append(f"destinations = {json.dumps(list(destinations))}")
    lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def import_mount(root: Path, *destinations: str, **settings: str | int | list[str]) -> str:
    """A ``[[dropbox]]`` table importing ``destinations`` from ``root``, polled every 50 ms."""
    return mount(root, *destinations, poll_interval_ms=50, **settings)


def export_mount(root: Path, *destinations: str, **settings: str | int | list[str]) -> str:
    """A ``[[dropbox]]`` table exporting ``destinations`` into ``root``."""
    return mount(root, *destinations, direction="export", **settings)


def drop(root: Path, queue: str, name: str, body: str) -> None:
    """What a DropboxMQ shell producer does: write in working/, then mv into target/."""
    script = 'cd "$1/$2/incoming" && printf "%s" "$4" > "working/$3" && mv "working/$3" "target/$3"'
    subprocess.run(["sh", "-c", script, "sh", str(root), queue, name, body], check=True)


def count(path: Path) -> int:
    return len(os.listdir(path))
