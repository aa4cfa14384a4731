"""``/healthz`` and ``/readyz``, and what the HTTP port serves while the broker recovers.

Two ways in:

* a real ``chute serve`` on a journal of 100,000 messages (written by the store
  directly, quickly): its HTTP port answers from the moment it listens, ``/readyz``
  says 503 ``recovering`` with its progress until the broker is ready, then 200;
  the log says when recovery started, and when it ended with what it found;
* an in-process broker whose store's recovery waits for the test, so the
  recovering state is held as long as the test looks at it: only the health
  endpoints and ``/metrics`` are served then, everything else is 503, and the
  progress is logged every few seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chute.admin.site import Site
from chute.config import ListenSettings, ServerConfig
from chute.core.model.store import AddOp, QueueDefinition, QueueKind, Recovered
from chute.message import Message
from chute.server import app
from chute.server.app import BrokerServer
from chute.store.journal import Journal
from chute.store.memory import MemoryStore

from .conftest import free_port

WAIT = 60.0
MESSAGES = 100_000


def write_journal(directory: Path, messages: int) -> None:
    """A journal holding ``messages`` small persistent messages over four queues."""
    with Journal(directory, sync="never", segment_size=4 << 20, preallocate=False) as journal:
        for q in range(4):
            journal.define(QueueDefinition(f"queue:backlog.{q}", QueueKind.QUEUE))
        body = b"x" * 100
        for seq in range(1, messages + 1):
            queue = f"queue:backlog.{seq % 4}"
            journal.add(AddOp(queue, (queue,), seq, Message(body, id=f"m{seq}")))


def get(port: int, path: str) -> tuple[int, str] | None:
    """(status, body) of ``GET path``; None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def watch_readyz(
    process: subprocess.Popen[str], lines: list[str], http_port: int
) -> list[dict[str, object]]:
    """Poll ``/readyz`` from the start until it says ready; returns every 503 answer
    (checking ``/healthz`` answers meanwhile too)."""
    recovering: list[dict[str, object]] = []
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, "\n".join(lines)
        assert process.poll() is None, "\n".join(lines)
        answer = get(http_port, "/readyz")
        if answer is None:  # not listening yet
            time.sleep(0.01)  # polling for the port, not synchronising on time
            continue
        status, body = answer
        if status == 200:
            assert json.loads(body) == {"status": "ready"}
            return recovering
        assert status == 503, body
        if not recovering:
            assert get(http_port, "/healthz") == (200, '{"status": "alive"}')
        recovering.append(json.loads(body))


@pytest.mark.slow
def test_readyz_is_503_while_a_real_broker_recovers_then_200(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data / "journal", MESSAGES)
    http_port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chute.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--stomp-port",
            "0",
            "--http-port",
            str(http_port),
            "--data-dir",
            str(data),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        lines.extend(line.rstrip("\n") for line in process.stdout)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        recovering = watch_readyz(process, lines, http_port)
        assert recovering, "the HTTP port answered only once the broker was ready"
        first = recovering[0]
        assert first["status"] == "recovering"
        assert {"phase", "bytes_read", "bytes_total", "records", "messages"} <= set(first)
        assert get(http_port, "/healthz") == (200, '{"status": "alive"}')
        answer = get(http_port, "/metrics")
        assert answer is not None
        assert answer[0] == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer[1])
            for s in family.samples
        }
        assert samples[("chute_ready", ())] == 1
        held = sum(
            value
            for (name, labels), value in samples.items()
            if name == "chute_destination_messages" and ("kind", "queue") in labels
        )
        assert held == MESSAGES
    finally:
        process.terminate()
        process.wait(WAIT)
        reader.join(WAIT)
    log = "\n".join(lines)
    assert f"recovering from the journal in {data / 'journal'}" in log
    [end] = [line for line in lines if "INFO chute.server: recovered " in line]
    assert f"recovered {MESSAGES} messages in 6 destinations in " in end  # 4 + 2 system queues
    assert "MiB/s" in end
    assert sum("chute listening" in line for line in lines) == 1


class OnRecord(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged (on the loop's thread,
    where the server logs its recovery's progress)."""

    def __init__(self, text: str, event: asyncio.Event) -> None:
        super().__init__()
        self.text = text
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


class HeldStore(MemoryStore):
    """A memory store whose recovery waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.recovering = threading.Event()
        self.release = threading.Event()

    def recover(self) -> Recovered:
        self.recovering.set()
        if not self.release.wait(WAIT):
            raise TimeoutError("the test never released the recovery")
        return super().recover()


def test_while_recovering_only_health_and_metrics_are_served(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(app, "RECOVERY_LOG_S", 0.05)  # the progress line, without a wait
    caplog.set_level(logging.INFO, logger="chute.server")
    port, http_port = free_port(), free_port()
    store = HeldStore()
    config = ServerConfig(ListenSettings(port=port, stomp_port=0, http_port=http_port))
    base = f"http://127.0.0.1:{http_port}"

    async def status(client: aiohttp.ClientSession, path: str) -> tuple[int, str]:
        async with client.get(base + path) as answer:
            return answer.status, await answer.text()

    async def main() -> None:
        progress_logged = asyncio.Event()
        watcher = OnRecord("recovering: ", progress_logged)
        logging.getLogger("chute.server").addHandler(watcher)
        server = BrokerServer(config, store=store, site=Site)
        starting = asyncio.create_task(server.start())
        while not store.recovering.is_set():  # the HTTP listener opened before this
            assert not starting.done()
            await asyncio.sleep(0.01)
        try:
            async with aiohttp.ClientSession() as client:
                assert await status(client, "/healthz") == (200, '{"status": "alive"}')
                code, body = await status(client, "/readyz")
                assert code == 503
                assert json.loads(body)["status"] == "recovering"
                code, body = await status(client, "/metrics")
                assert code == 200
                assert "chute_ready 0.0" in body
                assert "chute_destination_messages" not in body  # the broker is not read
                for path in ("/stomp", "/", "/api/overview", "/no/such/page"):
                    code, body = await status(client, path)
                    assert (code, "recovering, try again shortly" in body) == (503, True), path
                await asyncio.wait_for(progress_logged.wait(), WAIT)
                store.release.set()
                bound = await asyncio.wait_for(starting, WAIT)
                assert ("native", "127.0.0.1", port) in bound
                assert ("http", "127.0.0.1", http_port) in bound
                assert await status(client, "/readyz") == (200, '{"status": "ready"}')
                code, _ = await status(client, "/no/such/page")
                assert code == 404  # served as usual now
        finally:
            store.release.set()
            logging.getLogger("chute.server").removeHandler(watcher)
            if not starting.done():
                await starting
            await server.stop()

    asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records if r.name == "chute.server"]
    assert messages[0] == "recovering from the memory store (nothing to read)"
    assert any(m.startswith("recovering: ") for m in messages)
    assert any(m.startswith("recovered 0 messages in 2 destinations in ") for m in messages)
