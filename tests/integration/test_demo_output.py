"""The demo's console shows its results, not the broker's log: that goes to a file.

The whole demo (``make run``) needs a minute and more of Spark (its start alone
takes 20-40 s on a small machine), too long for a test, so this drives the demo's
own broker start-up (:func:`start_broker` of ``examples/demo.py``) at INFO, with
clients connecting and disconnecting, and checks what reaches the console and what
reaches the log file.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Final

import pytest

import chute
from tests.integration.conftest import ChuteServer

ROOT: Final = Path(__file__).resolve().parents[2]
# the broker's log format: "2024-01-01 12:00:00,123 INFO chute.server: ..."
LOG_LINE: Final = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) chute(\.\w+)*: ")


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chute_demo", ROOT / "examples" / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[str]]]:
    brokers: list[subprocess.Popen[str]] = []
    yield brokers
    for broker in brokers:
        broker.terminate()
        broker.wait(30)


def wait_for(path: Path, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        content = path.read_text(encoding="utf-8") if path.exists() else ""
        if text in content:
            return content
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in {path}:\n{content}")
        time.sleep(0.05)  # polling a file another process writes


def test_the_broker_logs_to_its_file_and_the_console_shows_where_it_listens(
    demo: ModuleType,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    stop: list[subprocess.Popen[str]],
) -> None:
    log_path = tmp_path / "logs" / "broker.log"
    broker, url = demo.start_broker(str(tmp_path / "data"), log_path, log_level="info")
    stop.append(broker)
    for _ in range(3):  # what a demo client does: connect, send, leave
        with chute.connect(url) as conn, conn.session() as session:
            session.send("queue:orders", b"{}")
    log = wait_for(log_path, "disconnected")
    assert LOG_LINE.search(log)  # the broker did log, at INFO
    assert "INFO chute.session: native client" in log
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("chute listening: native 127.0.0.1:")
    assert [line for line in (out + err).splitlines() if LOG_LINE.search(line)] == []


def test_a_broker_that_does_not_start_shows_the_end_of_its_log(
    demo: ModuleType, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "not-a-directory"
    data_dir.write_text("a file where the journal should go")
    log_path = tmp_path / "broker.log"
    with pytest.raises(SystemExit) as stopped:
        demo.start_broker(str(data_dir), log_path)
    assert "the broker did not start" in str(stopped.value.code)
    assert str(log_path) in str(stopped.value.code)
    assert log_path.read_text(encoding="utf-8") != ""
    assert capfd.readouterr().out == ""


def test_the_demo_broker_keeps_the_orders_stream_in_two_partitions(
    demo: ModuleType, tmp_path: Path, stop: list[subprocess.Popen[str]]
) -> None:
    """The demo reads a partitioned stream: its broker makes ``stream:orders`` with two
    partitions, and an order keyed by its region goes to the partition of its key."""
    broker, url = demo.start_broker(str(tmp_path / "data"), tmp_path / "broker.log")
    stop.append(broker)
    with chute.connect(url) as conn:
        with conn.session() as session:
            for region in ("eu-west", "us-east", "ap-south", "eu-north", "us-west"):
                session.send("stream:orders", b"{}", key=region)
        held = [conn.cursor_open(a)[1] - 1 for a in ("stream:orders", "stream:orders#1")]
    assert sum(held) == 5
    assert all(held)  # the five regions' keys spread over both partitions


def test_the_consumer_says_why_when_no_window_closed_in_its_time(server: ChuteServer) -> None:
    consumer = str(ROOT / "examples" / "orders_consumer.py")
    done = subprocess.run(
        [sys.executable, consumer, "--url", server.url, "--seconds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no window closed within 1 s" in done.stdout
    assert "DEMO_SECONDS=60" in done.stdout
