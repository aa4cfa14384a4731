"""Streams over the wire: a real ``chute serve``, the Python client and the CLI.

Ten thousand messages read whole by two consumers; a ``kill -9`` of the broker
loses nothing a producer was told was stored, and every message keeps its
offset; a stream is read by offset range (``cursor_fetch``) and browsed; a
``max_age`` in the configuration trims the stream in the broker's sweep.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import chute
from chute.errors import ChuteError

from .conftest import ChuteServer, start_server
from .test_cli import chute as run_chute

S = "stream:events"
COUNT = 10_000
DEADLINE = 60.0


def body(i: int) -> bytes:
    return f"event-{i:06d}".encode()


def read(
    conn: chute.Connection, offset: str | int, count: int, address: str = S
) -> list[tuple[int, bytes]]:
    """``count`` messages from ``offset`` on, as (offset, body), acked as they come."""
    session = conn.session("client")
    got: list[tuple[int, bytes]] = []
    with session.consumer(address, offset=offset, prefetch=500) as consumer:
        end = time.monotonic() + DEADLINE
        while len(got) < count:
            received = consumer.receive(timeout=max(0.0, end - time.monotonic()))
            assert received is not None, f"only {len(got)} of {count} messages came"
            got.append((received.seq, received.body))
            if len(got) % 100 == 0:
                received.ack()
    session.close()
    return got


def nothing_more(conn: chute.Connection, offset: int, address: str = S) -> bool:
    """Whether a reader at ``offset`` gets nothing (a short wait: nothing is expected)."""
    with conn.session().consumer(address, offset=offset) as consumer:
        return consumer.receive(timeout=0.3) is None


def stream_stat(conn: chute.Connection, address: str = S) -> dict[str, Any]:
    [found] = conn.stat(address)["destinations"]
    stat: dict[str, Any] = found
    return stat


def read_by_two(url: str, count: int) -> dict[str, list[tuple[int, bytes]]]:
    """What two readers from ``first``, each on its own connection, got at once."""
    results: dict[str, list[tuple[int, bytes]]] = {}

    def reader(name: str) -> None:
        with chute.connect(url) as own:
            results[name] = read(own, "first", count)

    threads = [threading.Thread(target=reader, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    return results


def kill_while_sending(server: ChuteServer, start: int) -> list[int]:
    """Send ``body(start)``, ``body(start + 1)``, ... one at a time, and ``kill -9`` the
    broker meanwhile; the numbers of the sends it answered as stored."""
    acked: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        try:
            with chute.connect(server.url) as own:
                session = own.session()
                i = start
                while not stop.is_set():
                    session.send(S, body(i))
                    acked.append(i)
                    i += 1
        except ChuteError:
            return  # the broker went

    thread = threading.Thread(target=produce)
    thread.start()
    end = time.monotonic() + DEADLINE
    while len(acked) < 300:
        assert time.monotonic() < end, "the producer made no progress"
        time.sleep(0.01)
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    stop.set()
    thread.join(DEADLINE)
    return acked


def test_ten_thousand_read_by_two_and_a_kill_loses_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with chute.connect(server.url) as conn:
            producer = conn.session(confirm_window=200)
            for i in range(COUNT):
                producer.send(S, body(i))
            producer.flush()  # every one stored
            expected = [(i + 1, body(i)) for i in range(COUNT)]
            assert read_by_two(server.url, COUNT) == {"a": expected, "b": expected}
            stat = stream_stat(conn)
            assert (stat["depth"], stat["first"], stat["head"]) == (COUNT, 1, COUNT + 1)
        acked = kill_while_sending(server, COUNT)
        server = start_server(tmp_path, port=server.port)
        with chute.connect(server.url) as conn:
            total = COUNT + len(acked)
            got = read(conn, "first", total)
            assert got == expected + [(i + 1, body(i)) for i in acked]
            stat = stream_stat(conn)
            depth = stat["depth"]
            assert depth in (total, total + 1)  # one sent as the kill came may be there too
            assert stat["first"] == 1
            assert stat["head"] == depth + 1
            assert read(conn, 5000, 3) == expected[4999:5002]
            conn.session().send(S, b"after")  # numbering goes on from the head
            assert read(conn, "last", 1) == [(depth + 1, b"after")]
    finally:
        if server.process.poll() is None:
            server.stop()


def test_cursor_fetch_reads_a_stream_by_offset_range(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        s = conn.session()
        for i in range(50):
            s.send("stream:pages", body(i))
        first, head = conn.cursor_open("stream:pages")
        assert (first, head) == (1, 51)
        nxt, page = conn.cursor_fetch("stream:pages", None, 10, 30, max_messages=8)
        assert nxt == 18
        assert [(seq, m.body) for seq, m in page] == [(i + 1, body(i)) for i in range(9, 17)]
        nxt, page = conn.cursor_fetch("stream:pages", None, 40, 1000)
        assert nxt == 51  # a range past the head stops at the head
        assert [seq for seq, _ in page] == list(range(40, 51))
        pages = list(conn.cursor_read("stream:pages", None, 1, head, page_messages=7))
        assert [seq for page in pages for seq, _ in page] == list(range(1, 51))
        assert [m.body for m in s.browse("stream:pages")] == [body(i) for i in range(50)]
        assert stream_stat(conn, "stream:pages")["depth"] == 50  # read, browsed: all kept


def test_max_age_in_the_config_trims_the_stream_in_the_sweep(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(
        '[server]\nexpiry_interval_ms = 50\n\n[destinations."stream:recent"]\nmax_age = "1s"\n'
    )
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as conn:
            s = conn.session()
            for i in range(20):
                s.send("stream:recent", body(i))
            assert stream_stat(conn, "stream:recent")["depth"] in range(1, 21)
            end = time.monotonic() + DEADLINE
            while stream_stat(conn, "stream:recent")["depth"]:
                assert time.monotonic() < end, "max_age never trimmed the stream"
                time.sleep(0.05)
            stat = stream_stat(conn, "stream:recent")
            assert (stat["first"], stat["head"], stat["removed"]) == (21, 21, 20)
            assert nothing_more(conn, 1, "stream:recent")
            s.send("stream:recent", b"new")
            assert read(conn, "first", 1, "stream:recent") == [(21, b"new")]
    finally:
        server.stop()


def test_the_cli_browses_a_stream(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        s = conn.session()
        for i in range(5):
            s.send("stream:x", body(i), properties={"i": i})
    done = run_chute(server, "browse", "stream:x")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [body(i) for i in range(5)]
    done = run_chute(server, "browse", "stream:x", "--selector", "i >= 3", "--json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["body"] for line in done.stdout.splitlines()] == [
        body(3).decode(),
        body(4).decode(),
    ]
    with chute.connect(server.url) as conn:
        assert stream_stat(conn, "stream:x")["depth"] == 5


def test_a_new_stream_starts_at_offset_1_whatever_was_deleted_before(
    server: ChuteServer,
) -> None:
    """Offsets start at 1 (docs/streams.md), also after other destinations were deleted;
    a stream made again under a deleted one's name goes on, never reusing an offset."""
    with chute.connect(server.url) as conn:
        session = conn.session()
        for address in ("queue:gone.q", "stream:gone.s"):
            for i in range(6):
                session.send(address, body(i))
            assert conn.delete(address) == 6
        session.send("stream:fresh", body(0))
        assert read(conn, "first", 1, "stream:fresh") == [(1, body(0))]
        assert stream_stat(conn, "stream:fresh")["first"] == 1
        session.send("stream:gone.s", body(6))  # made again: offsets 1..6 were used
        assert read(conn, "first", 1, "stream:gone.s") == [(7, body(6))]


def test_a_stream_made_again_after_a_restart_reuses_no_offset(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with chute.connect(server.url) as conn:
            session = conn.session()
            for i in range(6):
                session.send("stream:again", body(i))
            assert conn.delete("stream:again") == 6
        server.stop()
        server = start_server(tmp_path, port=server.port)
        with chute.connect(server.url) as conn:
            conn.session().send("stream:again", body(6))
            assert read(conn, "first", 1, "stream:again") == [(7, body(6))]
    finally:
        if server.process.poll() is None:
            server.stop()
