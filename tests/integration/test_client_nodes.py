"""A URL that lists several nodes: the client connects to one that answers, says which,
and moves to another when it goes; the blocking and asyncio clients alike, and the
command line."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute.errors import ConnectError
from chute.spark.options import ChuteOptions
from tests.integration.freeze import freeze

from . import sync_aio
from .conftest import ChuteServer, free_port, start_server

WAIT = 30.0

Connect = sync_aio.Connect


connect = sync_aio.connect_fixture(timeout=5)


class _Moves(logging.Handler):
    """Sets :attr:`moved` when the client logs that its connection moved to a node."""

    def __init__(self) -> None:
        super().__init__()
        self.moved = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if "now on node" in record.getMessage():
            self.moved.set()


@pytest.fixture
def moves() -> Iterator[_Moves]:
    handler = _Moves()
    logger = logging.getLogger("chute.client")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.setLevel(level)
    logger.removeHandler(handler)


def _node(server: ChuteServer) -> str:
    return f"127.0.0.1:{server.port}"


def _round_trip(conn: chute.Connection, address: str, body: str) -> None:
    with conn.session() as s:
        s.send(address, body)
        with s.consumer(address) as c:
            got = c.receive(WAIT)
    assert got is not None
    assert got.message.body == body.encode()


def test_a_url_whose_first_node_is_down_connects_to_the_second(
    server: ChuteServer, connect: Connect, moves: _Moves
) -> None:
    down = free_port()
    conn = connect(f"chute://127.0.0.1:{down},127.0.0.1:{server.port}?order=listed")
    assert conn.node == _node(server)
    assert f"connected to node {_node(server)}" in moves.messages
    assert f"cannot connect to node 127.0.0.1:{down}" in " ".join(moves.messages)
    _round_trip(conn, "queue:q", "on the second")


def test_every_node_down_is_one_error_naming_each(connect: Connect) -> None:
    ports = free_port(), free_port()
    with pytest.raises(ConnectError) as info:
        connect(f"chute://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}")
    reason = info.value.reason
    assert reason.startswith("cannot connect to any node: ")
    for port in ports:
        assert f"127.0.0.1:{port}: cannot connect to chute://127.0.0.1:{port}" in reason


def test_a_random_start_still_reaches_the_one_node_up(
    server: ChuteServer, connect: Connect
) -> None:
    """Without ``order=listed`` the first node tried is any: every try ends on the live one."""
    url = f"chute://127.0.0.1:{free_port()},127.0.0.1:{server.port},127.0.0.1:{free_port()}"
    for _ in range(4):
        assert connect(url).node == _node(server)


def test_a_node_that_does_not_answer_gives_way_to_the_next(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect, moves: _Moves
) -> None:
    """A stopped process still accepts connections (its kernel does) but answers
    nothing: after the connect timeout, the next node."""
    first, second = two_nodes
    freeze(first.process)
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed", timeout=1)
    assert conn.node == _node(second)
    assert f"cannot connect to node {_node(first)}" in " ".join(moves.messages)
    _round_trip(conn, "queue:q", "past the silent node")


def test_a_node_gone_silent_is_left_when_heartbeats_stop(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect, moves: _Moves
) -> None:
    first, second = two_nodes
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed", heartbeat=0.5)
    assert conn.node == _node(first)
    freeze(first.process)
    assert moves.moved.wait(WAIT)
    assert conn.node == _node(second)
    _round_trip(conn, "queue:q", "after the silence")


def test_killing_the_node_a_client_is_on_moves_it_to_another(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect, moves: _Moves
) -> None:
    """The connection moves on its own, says where, and its session goes on there: the
    send left unconfirmed is sent again on the new node (test_resend.py has the rest)."""
    first, second = two_nodes
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed")
    assert conn.node == _node(first)
    session = conn.session(confirm_window=10)
    session.send("queue:q", "confirmed")
    session.flush()
    freeze(first.process)  # answers nothing: the next send stays unconfirmed
    session.send("queue:q", "never confirmed")
    assert session.unconfirmed == 1
    first.stop(signal.SIGKILL)
    assert moves.moved.wait(WAIT)
    assert conn.node == _node(second)
    assert not conn.closed
    assert f"the connection to node {_node(first)} was lost; now on node {_node(second)}" in (
        moves.messages
    )
    session.flush()  # resent on the second node, and confirmed there
    session.send("queue:q", "on the session, after the move")
    session.flush()
    with conn.session() as s:
        assert [m.body for m in s.browse("queue:q")] == [
            b"never confirmed",
            b"on the session, after the move",
        ]
    _round_trip(conn, "queue:other", "after the move")


def test_the_connection_s_requests_wait_for_the_move(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect
) -> None:
    first, second = two_nodes
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed")
    conn.create("queue:made")
    first.stop(signal.SIGKILL)
    try:
        stats = conn.stat("queue:*")
    except ConnectError:  # asked before the client saw the loss: on the lost node
        stats = conn.stat("queue:*")
    assert conn.node == _node(second)
    assert "queue:made" not in {d["address"] for d in stats["destinations"]}


def test_no_node_left_closes_the_connection_with_why(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect, moves: _Moves
) -> None:
    first, second = two_nodes
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed&failover=0")
    second.stop(signal.SIGKILL)
    first.stop(signal.SIGKILL)
    with pytest.raises(ConnectError):  # maybe on the lost node, maybe its move's failure
        conn.stat()
    with pytest.raises(ConnectError) as again:
        conn.stat()
    assert again.value.reason.startswith(f"the connection to node {_node(first)} was lost")
    assert f"{_node(second)}: cannot connect" in again.value.reason
    assert conn.closed


def test_a_url_of_one_node_does_not_move(server: ChuteServer, connect: Connect) -> None:
    """As before: its connection is closed once the node goes."""
    conn = connect(server.url)
    assert conn.node == _node(server)
    server.stop(signal.SIGKILL)
    with pytest.raises(ConnectError):
        conn.stat()
    assert conn.closed


def test_the_command_line_takes_a_url_of_several_nodes(server: ChuteServer) -> None:
    url = f"chute://127.0.0.1:{free_port()},127.0.0.1:{server.port}?order=listed"

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "chute.cli", *args, "--url", url],
            capture_output=True,
            timeout=WAIT,
            check=False,
        )

    sent = run("send", "queue:cli", "hello")
    assert sent.returncode == 0, sent.stderr
    stat = run("stat", "--json")
    assert stat.returncode == 0, stat.stderr
    assert b"queue:cli" in stat.stdout
    received = run("receive", "queue:cli", "--count", "1")
    assert received.returncode == 0, received.stderr
    assert b"hello" in received.stdout


def test_a_websocket_url_of_several_nodes(tmp_path: Path, connect: Connect) -> None:
    """The HTTP port's ways in take a list too: ``ws://h1:p1,h2:p2/chute``."""
    http = free_port()
    server = start_server(tmp_path, "--http-port", str(http))
    try:
        conn = connect(f"ws://127.0.0.1:{free_port()},127.0.0.1:{http}/chute?order=listed")
        assert conn.node == f"127.0.0.1:{http}"
        _round_trip(conn, "queue:ws", "over a websocket")
    finally:
        server.stop()


def test_spark_s_url_option_takes_several_nodes(server: ChuteServer) -> None:
    """The source's and sink's connections (driver and executors) are made from the
    ``url`` option as it was given."""
    url = f"chute://127.0.0.1:{free_port()},127.0.0.1:{server.port}?order=listed"
    options = ChuteOptions.parse({"url": url, "destination": "queue:spark"})
    assert options.url == url
    with options.connect() as conn:
        assert conn.node == _node(server)
