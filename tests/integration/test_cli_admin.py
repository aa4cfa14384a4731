"""Operating a broker with the ``chute`` command: move, dlq retry, stat (table, JSON,
watch), tx list and the removal commands' JSON, against a ``chute serve`` subprocess."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import pytest

import chute
import chute.aio

from .conftest import ChuteServer


def run(server: ChuteServer, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", *args, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def send(server: ChuteServer, address: str, *bodies: str, **properties: str) -> None:
    with chute.connect(server.url) as conn, conn.session() as session:
        for body in bodies:
            session.send(address, body, properties=dict(properties))


def bodies(server: ChuteServer, address: str) -> list[str]:
    with chute.connect(server.url) as conn, conn.session() as session:
        return [m.text for m in session.iter_browse(address)]


def make(server: ChuteServer, address: str) -> None:
    """Make a queue by use, and leave it empty."""
    send(server, address, "seed")
    assert run(server, "purge", address).returncode == 0


def dead_letter(server: ChuteServer, address: str, *texts: str) -> None:
    """Send ``texts`` to ``address``, then reject each: they go to the dead letters."""
    send(server, address, *texts)
    with chute.connect(server.url) as conn, conn.session(ack="individual") as session:
        consumer = session.consumer(address, prefetch=len(texts))
        for _ in texts:
            received = consumer.receive(timeout=10)
            assert received is not None
            received.nack(requeue=False)
        consumer.close()


def assert_one_error_line(done: subprocess.CompletedProcess[str], status: int, text: str) -> None:
    assert done.returncode == status, done
    assert done.stderr.startswith("chute: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert text in done.stderr
    assert done.stdout == ""


# -- move ------------------------------------------------------------------------------------


def test_move_takes_what_the_selector_picks_and_prints_the_count(server: ChuteServer) -> None:
    send(server, "queue:orders", "eu-1", "eu-2", "eu-3", region="eu")
    send(server, "queue:orders", "us-1", region="us")
    make(server, "queue:orders.eu")

    moved = run(server, "move", "queue:orders", "queue:orders.eu", "--selector", "region = 'eu'")

    assert moved.returncode == 0, moved.stderr
    assert moved.stdout == "moved 3 messages from queue:orders to queue:orders.eu\n"
    assert moved.stderr == ""  # no progress bar off a terminal
    assert bodies(server, "queue:orders.eu") == ["eu-1", "eu-2", "eu-3"]
    assert bodies(server, "queue:orders") == ["us-1"]


def test_move_with_a_limit_and_json(server: ChuteServer) -> None:
    send(server, "queue:a", *(f"m{i}" for i in range(5)))
    make(server, "queue:b")

    moved = run(server, "move", "a", "queue:b", "--limit", "2", "--json")

    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout) == {
        "from": "queue:a",
        "to": "queue:b",
        "moved": 2,
        "remaining": 3,
        "in_flight": 0,
    }
    assert bodies(server, "queue:b") == ["m0", "m1"]
    assert bodies(server, "queue:a") == ["m2", "m3", "m4"]


def test_move_pages_through_more_than_one_request(server: ChuteServer) -> None:
    send(server, "queue:deep", *(str(i) for i in range(2500)))
    make(server, "queue:shallow")

    moved = run(server, "move", "queue:deep", "queue:shallow", "--json")

    assert json.loads(moved.stdout)["moved"] == 2500, moved.stderr
    assert bodies(server, "queue:shallow") == [str(i) for i in range(2500)]
    assert bodies(server, "queue:deep") == []


def test_bad_move_input_is_one_clear_line(server: ChuteServer) -> None:
    send(server, "queue:here", "x")
    make(server, "queue:there")
    assert_one_error_line(
        run(server, "move", "queue:nowhere", "queue:there"), 1, "queue:nowhere does not exist"
    )
    assert_one_error_line(
        run(server, "move", "queue:here", "queue:there", "--selector", "region = ("),
        1,
        "invalid selector",
    )
    assert_one_error_line(run(server, "move", "queue:here", "here"), 2, "to itself")
    assert_one_error_line(run(server, "move", "queue:here", "queue:a b"), 2, "invalid destination")
    assert bodies(server, "queue:here") == ["x"]  # nothing moved


# -- dlq retry -------------------------------------------------------------------------------


def test_dlq_retry_sends_dead_letters_back_and_counts_each_destination(
    server: ChuteServer,
) -> None:
    dead_letter(server, "queue:orders", "o1", "o2")
    dead_letter(server, "queue:invoices", "i1")
    assert bodies(server, "queue:__sys__deadLetter") == ["o1", "o2", "i1"]

    retried = run(server, "dlq", "retry")

    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.splitlines() == [
        "retried 3 messages from queue:__sys__deadLetter",
        "  queue:invoices  1",
        "  queue:orders    2",
    ]
    assert bodies(server, "queue:orders") == ["o1", "o2"]
    assert bodies(server, "queue:invoices") == ["i1"]
    assert bodies(server, "queue:__sys__deadLetter") == []


def test_dlq_retry_with_a_selector_and_json(server: ChuteServer) -> None:
    dead_letter(server, "queue:jobs", "j1", "j2", "j3")

    retried = run(
        server, "dlq", "retry", "--selector", "chute_reason = 'rejected'", "--limit", "2", "--json"
    )

    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == {
        "from": "queue:__sys__deadLetter",
        "retried": 2,
        "to": {"queue:jobs": 2},
        "left": 0,
        "remaining": 1,
        "in_flight": 0,
    }
    assert bodies(server, "queue:jobs") == ["j1", "j2"]
    assert bodies(server, "queue:__sys__deadLetter") == ["j3"]
    assert_one_error_line(run(server, "dlq", "retry", "--from", "topic:t"), 1, "topic:t")


def test_the_asyncio_client_moves_and_retries(server: ChuteServer) -> None:
    dead_letter(server, "queue:aio", "a1")
    make(server, "queue:aio.copy")

    async def main() -> tuple[dict[str, int], int]:
        async with chute.aio.connect(server.url) as conn:
            retried = await conn.retry_dead_letters()
            moved = await conn.move("queue:aio", "queue:aio.copy", limit=10)
            return retried, moved

    assert asyncio.run(main()) == ({"queue:aio": 1}, 1)
    assert bodies(server, "queue:aio.copy") == ["a1"]


# -- stat ------------------------------------------------------------------------------------


def test_stat_table_lists_subscriptions_under_their_topic(server: ChuteServer) -> None:
    with chute.connect(server.url, client_id="auditor") as conn, conn.session() as session:
        session.consumer("topic:prices", subscription="audit", durable=True).close()
        for i in range(1200):
            session.send("queue:big", str(i), persistent=False)
        session.send("topic:prices", "p1")

    table = run(server, "stat")

    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = lines[0].split()
    assert header[:4] == ["ADDRESS", "DEPTH", "READY", "INFLIGHT"]
    assert "DEAD-LETTERED" in header
    big = next(line for line in lines if line.startswith("queue:big "))
    assert big.split()[1:3] == ["1,200", "1,200"]  # thousands separators
    assert lines[0].index("DEPTH") + len("DEPTH") == big.index("1,200") + len("1,200")
    topic = next(i for i, line in enumerate(lines) if line.startswith("topic:prices "))
    assert lines[topic + 1].startswith("  ")  # the durable subscription, indented
    assert "audit" in lines[topic + 1].split()[0]
    assert lines[topic + 1].split()[1] == "1"  # the subscription holds the message
    assert any(line.startswith("connections ") for line in lines)
    assert any(line.startswith("memory ") and "producers waiting 0" in line for line in lines)
    assert any(line.startswith("prepared transactions 0") for line in lines)


def test_stat_json_is_the_statistics_document(server: ChuteServer) -> None:
    send(server, "queue:orders", "x")
    done = run(server, "stat", "queue:*", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    row = next(d for d in stats["destinations"] if d["address"] == "queue:orders")
    assert (row["depth"], row["enqueued"]) == (1, 1)
    assert "connections" in stats


def test_stat_watch_draws_a_count_of_tables_with_rates(server: ChuteServer) -> None:
    send(server, "queue:w", "x")
    done = run(server, "stat", "queue:w", "--watch", "0.1", "--count", "2")
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("\n\nADDRESS")  # a blank line between two tables
    assert "IN/S" not in first
    assert "IN/S" in second
    assert "queue:w" in first
    assert "queue:w" in second
    assert_one_error_line(run(server, "stat", "--count", "2"), 2, "--watch")
    # the pattern may follow --watch, as a user types it
    after = run(server, "stat", "--watch", "queue:w", "--count", "1")
    assert after.returncode == 0, after.stderr
    assert "queue:w" in after.stdout
    assert_one_error_line(run(server, "stat", "queue:w", "--watch", "soon"), 2, "--watch")


def test_stat_watch_runs_until_ctrl_c_and_exits_quietly(server: ChuteServer) -> None:
    send(server, "queue:w", "x")
    process = subprocess.Popen(
        [sys.executable, "-m", "chute.cli", "stat", "--watch", "0.1", "--url", server.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        headers = 0
        for line in process.stdout:  # read two draws as they come
            if line.startswith("ADDRESS"):
                headers += 1
            if headers == 2 and line.startswith("queue:w"):
                break
        assert headers == 2
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert stderr == ""


# -- transactions and removal ----------------------------------------------------------------


def test_tx_list_json(server: ChuteServer) -> None:
    done = run(server, "tx", "list", "--json")
    assert json.loads(done.stdout) == {"prepared": []}, done.stderr
    with chute.connect(server.url) as conn, conn.session(transacted=True) as session:
        session.send("queue:tx", "x")
        session.prepare("xid-1")
    done = run(server, "tx", "list", "--json")
    assert json.loads(done.stdout) == {"prepared": ["xid-1"]}, done.stderr
    assert run(server, "tx", "list").stdout == "xid-1\n"
    assert run(server, "tx", "rollback", "xid-1").returncode == 0


@pytest.mark.parametrize(
    ("command", "key"), [("purge", "purged"), ("delete", "deleted")], ids=["purge", "delete"]
)
def test_purge_and_delete_json(server: ChuteServer, command: str, key: str) -> None:
    send(server, "queue:gone", "1", "2")
    done = run(server, command, "queue:gone", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"address": "queue:gone", key: 2}
