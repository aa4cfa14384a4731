"""Moving a deep, paged queue whole: ``chute move``, ``chute dlq retry`` and the admin
API's move jobs, against a ``chute serve`` whose small ``max_memory`` keeps most of
the queue on disk.

Each test checks the move's one guarantee on every message: it ends either in the
source or in the target, never both, never neither (message ids counted on both
sides, after a restart where the broker stopped mid-move).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from chute.message import Message

from . import admin_calls
from .conftest import free_port, start_server

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

DEEP = 40_000
"""Messages in the deep queue: at 256 bytes, ~35 MiB held, far over max_memory."""
BODY = 256
CONFIG = """
[server]
max_memory = "1MiB"

[users.admin]
password = "admin-pw"
roles = ["admin"]
"""
DEADLINE = 120.0
_T = TypeVar("_T")


@dataclass
class Broker(admin_calls.Broker):
    config: Path


def serve(tmp_path: Path, *, data_dir: Path | None = None) -> Broker:
    config = tmp_path / "chute.toml"
    config.write_text(CONFIG)
    http = free_port()
    srv = start_server(
        tmp_path, "--config", str(config), "--http-port", str(http), data_dir=data_dir
    )
    return Broker(srv, http, config)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = serve(tmp_path)
    yield b
    if b.server.process.poll() is None:
        b.server.stop()


def fill(broker: Broker, address: str, count: int, **properties: str) -> list[str]:
    """Send ``count`` persistent messages to ``address``; their ids, in order."""
    ids: list[str] = []
    with broker.connect() as conn, conn.session() as session:
        for start in range(0, count, 1000):
            batch = [
                Message.create(f"{n:08d}".encode().ljust(BODY, b"."), properties=dict(properties))
                for n in range(start, min(count, start + 1000))
            ]
            ids += [m.id for m in batch]
            session.send_many(address, batch)
    return ids


def ids_in(broker: Broker, address: str) -> list[str]:
    with broker.connect() as conn, conn.session() as session:
        return [m.id for m in session.iter_browse(address)]


def waiting(broker: Broker, address: str) -> tuple[int, int]:
    """(depth, paged) of ``address`` as the admin API shows it."""
    row = call(broker, "GET", f"/api/destinations/{address}")[1]
    return row["depth"], row["paged"]


def call(
    broker: Broker, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    """One request to the admin API as admin: (status, body)."""
    answer = admin_calls.call(broker, method, path, body, timeout=30)
    return answer.status, answer.body


def until(what: Callable[[], _T | None], description: str, deadline: float = DEADLINE) -> _T:
    """Poll ``what`` until it gives something (the broker's state is what is awaited)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = what()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {description}")


def job_ended(broker: Broker, job_id: str) -> Callable[[], dict[str, Any] | None]:
    def ended() -> dict[str, Any] | None:
        status, job = call(broker, "GET", f"/api/moves/{job_id}")
        assert status == 200, job
        return None if job["state"] == "running" else job

    return ended


def chute_cli(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args, "--url", broker.url],
        env=dict(os.environ, CHUTE_LOGIN="admin", CHUTE_PASSCODE="admin-pw"),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def assert_each_once(sent: list[str], *places: list[str]) -> None:
    """Every id sent is in exactly one of ``places``, once."""
    seen = [i for place in places for i in place]
    assert len(seen) == len(set(seen)), "a message is in two places"
    assert sorted(seen) == sorted(sent), "a message is lost"


# -- the CLI ---------------------------------------------------------------------------


def test_cli_move_without_a_limit_moves_a_paged_queue_whole(broker: Broker) -> None:
    sent = fill(broker, "queue:deep", DEEP)
    depth, paged = waiting(broker, "queue:deep")
    assert (depth, paged > DEEP // 2) == (DEEP, True)  # most of it is on disk
    call(broker, "POST", "/api/destinations", {"address": "queue:target"})

    done = chute_cli(broker, "move", "queue:deep", "queue:target")

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"moved {DEEP:,} messages from queue:deep to queue:target\n"
    assert waiting(broker, "queue:deep") == (0, 0)
    moved = ids_in(broker, "queue:target")
    assert moved == sent  # in order, each once


def test_cli_dlq_retry_without_a_limit_sends_a_paged_queue_back_whole(broker: Broker) -> None:
    sent = fill(
        broker,
        "queue:__sys__deadLetter",
        DEEP,
        chute_original_destination="queue:work",
        chute_reason="rejected",
    )
    assert waiting(broker, "queue:__sys__deadLetter")[1] > DEEP // 2

    done = chute_cli(broker, "dlq", "retry", "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "from": "queue:__sys__deadLetter",
        "retried": DEEP,
        "to": {"queue:work": DEEP},
        "left": 0,
        "remaining": 0,
        "in_flight": 0,
    }
    assert ids_in(broker, "queue:work") == sent


def test_cli_move_says_what_it_left_in_flight(broker: Broker) -> None:
    fill(broker, "queue:busy", 10)
    call(broker, "POST", "/api/destinations", {"address": "queue:calm"})
    with broker.connect() as conn, conn.session(ack="client") as session:
        consumer = session.consumer("queue:busy", prefetch=3)
        assert consumer.receive(30) is not None
        # the one taken and a full buffer: taking it returned a credit, and the broker's
        # answer to that credit (a fourth message) comes while we look
        out = 1 + 3
        until(
            lambda: (
                call(broker, "GET", "/api/destinations/queue:busy")[1]["inflight"] == out or None
            ),
            f"{out} messages in flight",
        )

        done = chute_cli(broker, "move", "queue:busy", "queue:calm")

        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            f"moved {10 - out} messages from queue:busy to queue:calm\n"
            f"left {out} message{'s' if out > 1 else ''} in queue:busy in flight to consumers: "
            "they stay with them "
            "(run it again once they come back)\n"
        )


# -- the admin API's move jobs ------------------------------------------------------------


def test_an_api_move_is_a_job_that_shows_its_progress(broker: Broker) -> None:
    sent = fill(broker, "queue:deep", DEEP)
    call(broker, "POST", "/api/destinations", {"address": "queue:target"})

    status, job = call(broker, "POST", "/api/destinations/queue:deep/move", {"to": "queue:target"})

    assert status == 202, job
    assert (job["kind"], job["from"], job["to"]) == ("move", "queue:deep", "queue:target")
    seen = [job]
    while seen[-1]["state"] == "running":  # every poll is answered while it moves
        status, now = call(broker, "GET", f"/api/moves/{job['id']}")
        assert status == 200, now
        seen.append(now)
    assert [j["moved"] for j in seen] == sorted(j["moved"] for j in seen)
    assert all(j["moved"] + j["remaining"] <= DEEP for j in seen)
    end = seen[-1]
    assert (end["state"], end["moved"], end["remaining"], end["error"]) == ("done", DEEP, 0, None)
    listed = call(broker, "GET", "/api/moves")[1]["moves"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert ids_in(broker, "queue:target") == sent


def test_an_api_move_is_cancelled_between_steps_and_loses_nothing(broker: Broker) -> None:
    sent = fill(broker, "queue:deep", DEEP)
    call(broker, "POST", "/api/destinations", {"address": "queue:target"})
    job = call(broker, "POST", "/api/destinations/queue:deep/move", {"to": "queue:target"})[1]

    status, cancelled = call(broker, "DELETE", f"/api/moves/{job['id']}")

    assert status == 200, cancelled
    assert cancelled["state"] == "cancelled"
    assert cancelled["error"]["error"] == "cancelled"
    assert 0 < cancelled["moved"] < DEEP
    assert cancelled["remaining"] == DEEP - cancelled["moved"]
    assert waiting(broker, "queue:target")[0] == cancelled["moved"]
    assert_each_once(sent, ids_in(broker, "queue:deep"), ids_in(broker, "queue:target"))
    again = call(broker, "GET", f"/api/moves/{job['id']}")[1]
    assert (again["state"], again["moved"]) == ("cancelled", cancelled["moved"])


def test_a_second_move_of_one_queue_waits_for_the_first(broker: Broker) -> None:
    fill(broker, "queue:deep", DEEP)
    call(broker, "POST", "/api/destinations", {"address": "queue:target"})
    first = call(broker, "POST", "/api/destinations/queue:deep/move", {"to": "queue:target"})[1]

    status, refused = call(broker, "POST", "/api/destinations/queue:deep/move", {"to": "queue:x"})

    assert status == 409, refused  # the first moves 40,000 messages: seconds
    assert refused["error"] == "move-running"
    assert f"DELETE /api/moves/{first['id']}" in refused["message"]
    assert call(broker, "DELETE", f"/api/moves/{first['id']}")[1]["state"] == "cancelled"
    status, bad = call(broker, "POST", "/api/destinations/queue:nowhere/move", {"to": "queue:x"})
    assert status == 404, bad  # a bad request is answered, not left in a failed job
    assert [j["id"] for j in call(broker, "GET", "/api/moves")[1]["moves"]] == [first["id"]]


def test_sigterm_ends_a_move_promptly_and_loses_nothing(tmp_path: Path) -> None:
    first = serve(tmp_path)
    sent = fill(first, "queue:deep", DEEP)
    call(first, "POST", "/api/destinations", {"address": "queue:target"})
    job = call(first, "POST", "/api/destinations/queue:deep/move", {"to": "queue:target"})[1]
    assert job["state"] == "running"
    until(
        lambda: True if call(first, "GET", f"/api/moves/{job['id']}")[1]["moved"] > 0 else None,
        "the move under way",
    )

    began = time.monotonic()
    assert first.server.stop(timeout=30) == 0
    took = time.monotonic() - began

    assert took < 10, f"SIGTERM took {took:.1f} s"
    assert "cancelled after" in first.server.output
    again = serve(tmp_path, data_dir=first.server.data_dir)
    try:
        source, target = ids_in(again, "queue:deep"), ids_in(again, "queue:target")
        assert target, "the move had moved some"
        assert_each_once(sent, source, target)
    finally:
        again.server.stop()


def cli(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHUTE_LOGIN": "admin", "CHUTE_PASSCODE": "admin-pw"}
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args, "--url", broker.url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_the_readmes_move_example_makes_its_target(broker: Broker) -> None:
    """The README sends to queue:orders and moves the eu ones to queue:orders.retry,
    which nothing made: the move makes it, as a send to it would."""
    for region in ("eu", "us", "eu"):
        sent = cli(broker, "send", "queue:orders", '{"id": 1}', "--property", f"region={region}")
        assert sent.returncode == 0, sent.stderr

    moved = cli(broker, "move", "queue:orders", "queue:orders.retry", "--selector", "region = 'eu'")

    assert moved.returncode == 0, moved.stderr
    assert "moved 2 messages" in moved.stdout
    with broker.connect() as conn, conn.session() as session:
        retried = list(session.iter_browse("queue:orders.retry"))
        left = list(session.iter_browse("queue:orders"))
    assert [m.properties["region"] for m in retried] == ["eu", "eu"]
    assert [m.properties["region"] for m in left] == ["us"]
