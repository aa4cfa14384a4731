"""Browse and stat as streams (issue 13): a queue larger than a packet is browsed whole,
and any number of destinations is listed, a bounded page at a time.

One ``chute serve`` for the module, with 1 MiB packets and 256 KiB of message
data in memory: the ~3 MiB queue it holds cannot travel in one answer, and
most of it lives only in the journal (paged), so the walk reads both.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

import chute
from chute.client import blocking
from chute.client.requests import Request, expect
from chute.errors import TooLarge
from chute.protocol import packets as p

from . import sync_aio
from .conftest import ChuteServer, start_server
from .test_cli import chute as run_chute

BIG = "queue:browse.big"
COUNT = 3000
"""Messages of about 1 KiB in BIG: three times the packet limit."""
MANY = 4000
"""Queues under ``queue:many.``: their statistics pass a packet's worth."""


def body(i: int) -> bytes:
    return f"{i:06d}".encode() + b"." * 1018


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    home = tmp_path_factory.mktemp("browse")
    config = home / "chute.toml"
    config.write_text('[server]\nmax_packet_size = "1MiB"\nmax_memory = "256KiB"\n')
    server = start_server(home, "--config", str(config))
    with chute.connect(server.url) as conn:
        tx = conn.session(transacted=True)
        for i in range(COUNT):
            tx.send(BIG, body(i), properties={"i": i})
            if i % 500 == 499:
                tx.commit()
        tx.commit()
        s = conn.session()
        for i in range(MANY):
            s.send(f"queue:many.{i:05d}", b"x", persistent=False)
        [big] = conn.stat(BIG)["destinations"]  # answered after every send before it
        assert big["depth"] == COUNT
    yield server
    server.stop()


@pytest.fixture(params=["blocking", "asyncio"])
def connect(
    request: pytest.FixtureRequest, broker: ChuteServer
) -> Iterator[Callable[[], chute.Connection]]:
    runner = sync_aio.LoopThread() if request.param == "asyncio" else None
    opened: list[chute.Connection] = []

    def open_() -> chute.Connection:
        conn: chute.Connection = (
            sync_aio.connect(runner, broker.url) if runner else chute.connect(broker.url)
        )
        opened.append(conn)
        return conn

    yield open_
    for conn in opened:
        conn.close()
    if runner is not None:
        runner.close()


def test_a_queue_larger_than_a_packet_is_browsed_whole_once_in_order(
    connect: Callable[[], chute.Connection],
) -> None:
    expected = [body(i) for i in range(COUNT)]
    with connect().session() as s:
        assert [m.body for m in s.iter_browse(BIG)] == expected
        assert [m.body for m in s.iter_browse(BIG, page_messages=7, page_bytes=5000)] == expected
        assert [m.body for m in s.browse(BIG)] == expected
        assert [m.body for m in s.browse(BIG, limit=1500)] == expected[:1500]
        tail = s.browse(BIG, "i >= 2990 OR i = 3")
        assert [m.properties["i"] for m in tail] == [3, *range(2990, COUNT)]


def test_a_walk_given_up_halfway_leaves_the_connection_usable(
    connect: Callable[[], chute.Connection],
) -> None:
    conn = connect()
    with conn.session() as s:
        walk = iter(s.iter_browse(BIG))
        assert [next(walk).body for _ in range(1200)] == [body(i) for i in range(1200)]
        del walk
        assert [m.body for m in s.browse(BIG, limit=2)] == [body(0), body(1)]
        assert conn.stat(BIG)["destinations"][0]["depth"] == COUNT  # nothing consumed


def test_thousands_of_destinations_are_listed_in_small_pages(
    connect: Callable[[], chute.Connection],
) -> None:
    conn = connect()
    many = [f"queue:many.{i:05d}" for i in range(MANY)]
    found = conn.stat("queue:many.*", page_size=7)["destinations"]
    assert [d["address"] for d in found] == many
    assert all(d["depth"] == 1 for d in found)
    everything = [d["address"] for d in conn.stat()["destinations"]]
    assert everything == sorted(everything)
    assert set(many) <= set(everything)
    assert len(everything) == len(set(everything))


def test_the_one_answer_browse_and_stat_of_older_clients_stop_at_a_packet(
    broker: ChuteServer,
) -> None:
    """What a client before paging sends: Browse and Stat, answered whole or refused."""
    with blocking.connect(broker.url) as conn:
        link = conn._link  # sends the packets the client no longer sends
        whole = Request(p.Browse(BIG, None, 3), lambda x: expect(x, p.BrowseResult).messages)
        assert [m.body for _seq, m in link.call(whole)] == [body(i) for i in range(3)]
        with pytest.raises(TooLarge, match="pages"):
            link.call(Request(p.Browse(BIG), lambda x: expect(x, p.BrowseResult)))
        with pytest.raises(TooLarge, match="pages"):
            link.call(Request(p.Stat(), lambda x: expect(x, p.StatResult)))


def test_the_cli_streams_a_big_queue_with_no_progress_bar_off_a_terminal(
    broker: ChuteServer,
) -> None:
    browsed = run_chute(broker, "browse", BIG)
    assert browsed.returncode == 0, browsed.stderr
    assert browsed.stdout.splitlines() == [body(i) for i in range(COUNT)]
    assert browsed.stderr == b""
    limited = run_chute(broker, "browse", BIG, "--limit", "10")
    assert limited.stdout.splitlines() == [body(i) for i in range(10)]


def test_the_cli_shows_progress_on_a_terminal(broker: ChuteServer) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "chute.cli", "browse", BIG, "--url", broker.url],
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    shown = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(controller, 4096)
            except OSError:  # EIO: the process closed its end
                return
            if not data:
                return
            shown.extend(data)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    out, _ = process.communicate(timeout=60)
    reader.join(10)
    os.close(controller)
    assert process.returncode == 0
    assert out.splitlines() == [body(i) for i in range(COUNT)]
    drawings = [line for line in shown.decode().split("\r") if line.strip()]  # \n is \r\n
    assert f"{BIG}  3,000 of 3,000 messages [{'#' * 24}] 100%" in drawings[-1]


def test_the_cli_lists_thousands_of_destinations(broker: ChuteServer) -> None:
    listed = run_chute(broker, "stat", "queue:many.*")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.decode().splitlines()
    assert rows[0].split()[:2] == ["ADDRESS", "DEPTH"]
    listed_rows = [r.split()[0] for r in rows[1:] if r.startswith("queue:")]
    assert listed_rows == [f"queue:many.{i:05d}" for i in range(MANY)]
    everything = run_chute(broker, "stat")
    assert everything.returncode == 0, everything.stderr
    assert len(everything.stdout.splitlines()) > MANY + 2
