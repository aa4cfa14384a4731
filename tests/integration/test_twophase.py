"""Two-phase transactions over TCP: prepared work survives kill -9 and is finished by xid."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import chute

from .conftest import start_server


def test_prepared_transaction_survives_kill_9_and_commits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(tmp_path, data_dir=data)
    with chute.connect(srv.url) as conn:
        with conn.session() as s:
            s.send("queue:in", b"job")
        tx = conn.session(ack="client", transacted=True)
        job = tx.consumer("queue:in", prefetch=1).receive(timeout=5)
        assert job is not None
        tx.send("queue:out", b"result of job")
        tx.prepare("batch-7")
        assert conn.prepared() == ["batch-7"]
    srv.stop(signal.SIGKILL)

    srv = start_server(tmp_path, data_dir=data)
    try:
        with chute.connect(srv.url) as conn:
            assert conn.prepared() == ["batch-7"]
            assert conn.stat()["prepared"] == ["batch-7"]
            with conn.session() as s:
                assert s.browse("queue:out") == []
                assert s.browse("queue:in") == []  # the job is locked, not lost
            conn.commit_prepared("batch-7")
            assert conn.prepared() == []
            with conn.session() as s:
                assert [m.body for m in s.browse("queue:out")] == [b"result of job"]
                assert s.browse("queue:in") == []
    finally:
        srv.stop()


def test_rollback_prepared_from_another_connection(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    try:
        with chute.connect(srv.url) as producer, chute.connect(srv.url) as coordinator:
            tx = producer.session(transacted=True)
            tx.send("queue:staged", b"never")
            tx.prepare("x-1")
            coordinator.rollback_prepared("x-1")
            assert coordinator.prepared() == []
            with coordinator.session() as s:
                assert s.browse("queue:staged") == []
    finally:
        srv.stop()


def test_cli_lists_commits_and_rolls_back_prepared(tmp_path: Path) -> None:
    from .test_cli import chute as run_chute

    srv = start_server(tmp_path)
    try:
        with chute.connect(srv.url) as conn:
            for xid in ("a-1", "b-2"):
                tx = conn.session(transacted=True)
                tx.send("queue:tx-cli", xid.encode())
                tx.prepare(xid)
        listed = run_chute(srv, "tx", "list")
        assert listed.stdout.split() == [b"a-1", b"b-2"]
        assert run_chute(srv, "tx", "commit", "a-1").returncode == 0
        assert run_chute(srv, "tx", "rollback", "b-2").returncode == 0
        assert run_chute(srv, "tx", "list").stdout == b""
        unknown = run_chute(srv, "tx", "commit", "nope")
        assert unknown.returncode == 1
        assert b"no prepared transaction" in unknown.stderr
        missing = run_chute(srv, "tx", "commit")
        assert missing.returncode == 2
        with chute.connect(srv.url) as conn, conn.session() as s:
            assert [m.body for m in s.browse("queue:tx-cli")] == [b"a-1"]
    finally:
        srv.stop()


def test_server_rolls_back_abandoned_prepared_work(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text("[server]\nprepared_timeout_ms = 300\nexpiry_interval_ms = 50\n")
    srv = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(srv.url) as conn:
            tx = conn.session(transacted=True)
            tx.send("queue:abandoned", b"staged")
            tx.prepare("driver-killed")
            deadline = time.monotonic() + 10
            while conn.prepared() and time.monotonic() < deadline:
                time.sleep(0.05)  # polling the broker's state with a deadline
            assert conn.prepared() == []
            with conn.session() as s:
                assert s.browse("queue:abandoned") == []
        logged = "rolling back prepared transaction 'driver-killed'"
        deadline = time.monotonic() + 10
        while logged not in srv.output and time.monotonic() < deadline:
            time.sleep(0.05)  # the log is read by another thread
        assert logged in srv.output
    finally:
        srv.stop()
