"""Connection limits against hostile clients (issue 13): ``max_connections``,
``max_connections_per_host``, running out of file descriptors, and the ``sockets``
statistics that show connections not logged in yet.

Real sockets and a real ``chute serve``. Each limit triggers, is logged once (not once
per connection), and the broker recovers; a logged-in bystander works throughout.
"""

from __future__ import annotations

import queue
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import stomp
from stomp.exception import ConnectFailedException

import chute
from chute.errors import ChuteError

from .conftest import free_port, start_server
from .hostile import (
    config,
    connected,
    lines_with,
    native_error,
    raw,
    stomp_frames,
    until_closed,
    wait_until,
)


def _round_trip(conn: chute.Connection, queue: str, body: str) -> None:
    """The bystander still sends and receives."""
    with conn.session() as session:
        session.send(queue, body)
        message = session.consumer(queue).receive(timeout=10)
    assert message is not None
    assert message.text == body


def test_max_connections_refuses_new_ones_says_so_once_and_recovers(tmp_path: Path) -> None:
    stomp = free_port()
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "max_connections = 4\nlogin_timeout_ms = 60000\n"),
        "--stomp-port",
        str(stomp),
    )
    try:
        with chute.connect(server.url) as bystander:
            held = [raw(server.port) for _ in range(2)] + [raw(stomp)]
            wait_until(lambda: bystander.stat()["sockets"]["open"] == 4, "4 connections open")

            refusals = [native_error(until_closed(raw(server.port))) for _ in range(4)]
            assert {(e.code, "server.max_connections" in e.reason) for e in refusals} == {
                ("connection-limit", True)
            }
            [error] = stomp_frames(until_closed(raw(stomp)))
            assert error.command == "ERROR"
            assert error.header("code") == "connection-limit"
            assert "server.max_connections" in (error.header("message") or "")
            with pytest.raises(ChuteError):
                chute.connect(server.url, timeout=5)

            _round_trip(bystander, "queue:bystander", "still here")
            sockets = bystander.stat()["sockets"]
            assert sockets["refused_max_connections"] == 6
            assert sockets["open"] == 4
            assert len(lines_with(server, "connection limit reached")) == 1
            summary = server.wait_for_line("connections refused by server.max_connections: 6 in")
            assert "INFO" in summary

            for sock in held:
                sock.close()
            wait_until(lambda: bystander.stat()["sockets"]["open"] == 1, "the held ones closed")
            with chute.connect(server.url) as again:
                _round_trip(again, "queue:again", "accepted again")
            _round_trip(bystander, "queue:bystander", "and still here")
        assert len(lines_with(server, "connection limit reached")) == 1
    finally:
        assert server.stop() == 0, server.output


def test_max_connections_per_host_refuses_only_that_address(tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "max_connections_per_host = 3\nlogin_timeout_ms = 60000\n"),
    )
    try:
        with chute.connect(server.url) as bystander:  # from 127.0.0.1
            held = [raw(server.port, source="127.0.0.2") for _ in range(3)]
            wait_until(lambda: bystander.stat()["sockets"]["open"] == 4, "4 connections open")
            for _ in range(3):
                error = native_error(until_closed(raw(server.port, source="127.0.0.2")))
                assert error.code == "connection-limit"
                assert "127.0.0.2" in error.reason
                assert "server.max_connections_per_host" in error.reason
            with chute.connect(server.url) as other:  # another address is not limited
                _round_trip(other, "queue:other", "from 127.0.0.1")
            assert bystander.stat()["sockets"]["refused_max_connections_per_host"] == 3
            [line] = lines_with(server, "connection limit reached for")
            assert "127.0.0.2" in line
            assert "WARNING" in line

            held.pop().close()
            wait_until(lambda: bystander.stat()["sockets"]["open"] == 3, "one of them closed")
            with raw(server.port, source="127.0.0.2") as again:
                answer = connected(again)
                assert answer.connection_id
                assert answer.max_packet_size == 16 << 20  # after login: max_packet_size
            _round_trip(bystander, "queue:bystander", "still here")
            for sock in held:
                sock.close()
    finally:
        assert server.stop() == 0, server.output


def test_stat_counts_connections_that_have_not_logged_in(tmp_path: Path) -> None:
    stomp = free_port()
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "login_timeout_ms = 60000\n"),
        "--stomp-port",
        str(stomp),
    )
    try:
        silent = [raw(server.port) for _ in range(3)] + [raw(stomp) for _ in range(2)]
        with chute.connect(server.url) as conn:
            wait_until(lambda: conn.stat()["sockets"]["open"] == 6, "6 connections open")
            sockets = conn.stat()["sockets"]
            assert sockets["before_login"] == 5
            assert sockets["by_listener"] == {"native": 4, "stomp": 2}
            assert conn.stat()["connections"] == 1  # the core knows only who logged in
            done = subprocess.run(
                [sys.executable, "-m", "chute.cli", "stat", "--url", server.url],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            # the command's own connection is the seventh, logged in
            assert "7 sockets open (5 not logged in; 5 native, 2 stomp)" in done.stdout
        for sock in silent:
            sock.close()
    finally:
        assert server.stop() == 0, server.output


DESCRIPTORS = 64


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


def test_running_out_of_descriptors_is_logged_once_and_the_broker_recovers(
    tmp_path: Path,
) -> None:
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "login_timeout_ms = 60000\n"),
        "--store",
        "memory",
        preexec_fn=_few_descriptors,
    )
    try:
        [line] = lines_with(server, "the open-file limit is")
        assert f"is {DESCRIPTORS} (ulimit -n)" in line
        assert "server.max_connections = 10000" in line
        with chute.connect(server.url) as bystander:
            held = [raw(server.port) for _ in range(DESCRIPTORS)]  # more than are left
            first = server.wait_for_line("out of file descriptors")
            assert "WARNING" in first
            assert "ulimit -n" in first
            held += [raw(server.port) for _ in range(10)]  # they wait in the backlog
            with pytest.raises(ChuteError):  # unanswered: it is not accepted yet
                chute.connect(server.url, timeout=1)
            wait_until(
                lambda: bystander.stat()["sockets"]["accept_failures"] > 1,
                "accepts failed again",
            )
            _round_trip(bystander, "queue:bystander", "still here")
            assert len(lines_with(server, "out of file descriptors")) == 1

            for sock in held:
                sock.close()
            with chute.connect(server.url, timeout=10) as again:
                _round_trip(again, "queue:again", "descriptors are back")
            summary = server.wait_for_line("accepts that found no file descriptor free:")
            assert "INFO" in summary
            assert len(lines_with(server, "out of file descriptors")) == 1
    finally:
        assert server.stop() == 0, server.output


class _Errors(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()

    def on_error(self, frame: Any) -> None:
        self.frames.put(frame)


def test_real_clients_over_the_limit_read_why_they_were_refused(tmp_path: Path) -> None:
    """stomp.py and the native client send their CONNECT before they read: a refusal
    written before it came could be lost (the client's send then fails, or its socket is
    reset) and the client saw only a lost connection. Each attempt reads the reason."""
    stomp_port = free_port()
    server = start_server(
        tmp_path,
        "--config",
        config(tmp_path, "max_connections = 1\n"),
        "--stomp-port",
        str(stomp_port),
    )
    try:
        with chute.connect(server.url) as bystander:
            for _ in range(20):
                conn = stomp.Connection12([("127.0.0.1", stomp_port)], auto_decode=False)
                errors = _Errors()
                conn.set_listener("", errors)
                with pytest.raises(ConnectFailedException):
                    conn.connect(wait=True)
                conn.disconnect()
                error = errors.frames.get(timeout=10)
                assert error.headers["code"] == "connection-limit"
                assert "server.max_connections" in error.headers["message"]
                with pytest.raises(ChuteError, match=r"server\.max_connections"):
                    chute.connect(server.url, timeout=5)
            _round_trip(bystander, "queue:bystander", "still here")
    finally:
        assert server.stop() == 0, server.output
