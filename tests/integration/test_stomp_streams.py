"""Streams over STOMP, as RabbitMQ's STOMP plugin reads them: stomp.py against ``chute serve``.

``/stream/NAME`` is an append-only log: a SUBSCRIBE reads it from its
``x-stream-offset`` (first, last, next, offset=N, timestamp=T) without consuming
anything, and each MESSAGE carries its offset in ``x-stream-offset``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chute

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT, Client
from .test_stomp import clients as clients  # noqa: PLC0414 - the fixtures, for this module
from .test_stomp import port as port  # noqa: PLC0414

KEPT = 5
"""``max_messages`` of ``stream:kept``: retention keeps the newest five."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    tmp = tmp_path_factory.mktemp("stomp-streams")
    config = tmp / "chute.toml"
    config.write_text(f'[destinations."stream:kept"]\nmax_messages = {KEPT}\n')
    stomp_port = free_port()
    srv = start_server(tmp, "--config", str(config), "--stomp-port", str(stomp_port))
    srv.stomp_port = stomp_port  # type: ignore[attr-defined]
    yield srv
    if srv.process.poll() is None:
        srv.stop()


@pytest.fixture
def client(port: int, clients: list[Client]) -> Client:
    c = Client(port)
    clients.append(c)
    return c


def _send(client: Client, destination: str, *bodies: str) -> None:
    """Send ``bodies`` and wait for the last receipt (after the journal's sync)."""
    for i, body in enumerate(bodies):
        receipt = f"r-{destination}-{body}" if i == len(bodies) - 1 else None
        client.conn.send(destination, body.encode(), receipt=receipt)
    if bodies:
        client.receipt(f"r-{destination}-{bodies[-1]}")


def _subscribe(
    client: Client, destination: str, sub_id: str, offset: str | None, **headers: str
) -> None:
    """SUBSCRIBE with ``x-stream-offset: offset`` (none if None), once the broker has it."""
    extra = dict(headers)
    if offset is not None:
        extra["x-stream-offset"] = offset
    ack = extra.pop("ack", "auto")
    client.conn.subscribe(destination, id=sub_id, ack=ack, headers=extra, receipt=f"s-{sub_id}")
    client.receipt(f"s-{sub_id}")


def _take(client: Client, count: int) -> list[Any]:
    return [client.message() for _ in range(count)]


def _bodies(frames: list[Any]) -> list[str]:
    return [frame.body.decode() for frame in frames]


def _offsets(frames: list[Any]) -> list[int]:
    return [int(frame.headers["x-stream-offset"]) for frame in frames]


def test_retention_drops_the_oldest_and_first_reads_what_is_kept(client: Client) -> None:
    bodies = [f"m{i}" for i in range(1, 9)]
    _send(client, "/stream/kept", *bodies)
    _subscribe(client, "/stream/kept", "all", "first")
    frames = _take(client, KEPT)
    assert _bodies(frames) == bodies[-KEPT:]
    assert _offsets(frames) == [4, 5, 6, 7, 8]
    assert client.no_message()
    # an offset retention removed reads from the oldest kept
    _subscribe(client, "/stream/kept", "old", "offset=1")
    assert _offsets(_take(client, KEPT)) == [4, 5, 6, 7, 8]


def test_each_message_carries_its_offset(client: Client) -> None:
    _subscribe(client, "/stream/numbered", "s", None)
    _send(client, "/stream/numbered", "a", "b", "c")
    frames = _take(client, 3)
    assert _bodies(frames) == ["a", "b", "c"]
    assert _offsets(frames) == [1, 2, 3]  # a message's offset is its place in the stream
    assert all(f.headers["destination"] == "/stream/numbered" for f in frames)
    assert all(f.headers["subscription"] == "s" for f in frames)


@pytest.mark.parametrize(
    ("offset", "first_read"),
    [
        ("first", ["a", "b", "c", "d", "e"]),
        ("last", ["e"]),
        ("next", []),
        (None, []),  # no header: next, as RabbitMQ
        ("offset=3", ["c", "d", "e"]),
        ("offset=0", ["a", "b", "c", "d", "e"]),
        ("offset=100", []),  # past the head: the next one
    ],
)
def test_each_offset_form_starts_where_it_says(
    port: int, clients: list[Client], offset: str | None, first_read: list[str]
) -> None:
    name = f"/stream/forms-{offset}".replace("=", "-")
    writer = Client(port)
    clients.append(writer)
    _send(writer, name, "a", "b", "c", "d", "e")
    reader = Client(port)
    clients.append(reader)
    _subscribe(reader, name, "s", offset)
    assert _bodies(_take(reader, len(first_read))) == first_read
    assert reader.no_message()
    _send(writer, name, "f")  # every reader reads on from where it is
    frame = reader.message()
    assert (frame.body, frame.headers["x-stream-offset"]) == (b"f", "6")


def _wait_past(ms: int) -> None:
    """Return once the clock shows a time after ``ms`` (ms since the epoch)."""
    deadline = time.monotonic() + TIMEOUT
    while time.time() * 1000 <= ms:
        assert time.monotonic() < deadline, "the clock did not move"
        time.sleep(0.001)


def test_timestamp_reads_from_the_first_message_accepted_then(client: Client) -> None:
    _send(client, "/stream/timed", "old-1", "old-2")
    _subscribe(client, "/stream/timed", "probe", "first")
    last_old = max(int(f.headers["timestamp"]) for f in _take(client, 2))
    # the new messages are accepted in a later second than the old ones
    second = last_old // 1000 + 1
    _wait_past(second * 1000)
    _send(client, "/stream/timed", "new-1", "new-2")
    new = _take(client, 2)
    assert min(int(f.headers["timestamp"]) for f in new) >= second * 1000
    for sub_id, offset in (
        ("ms", f"timestamp={last_old + 1}"),
        ("seconds", f"timestamp={second}"),  # RabbitMQ's STOMP header is in seconds
    ):
        _subscribe(client, "/stream/timed", sub_id, offset)
        frames = _take(client, 2)
        assert _bodies(frames) == ["new-1", "new-2"], offset
        assert _offsets(frames) == [3, 4]
    _subscribe(client, "/stream/timed", "past", "timestamp=1")
    assert _bodies(_take(client, 4)) == ["old-1", "old-2", "new-1", "new-2"]
    assert client.no_message()


def test_two_subscribers_read_the_same_stream_independently(
    port: int, clients: list[Client]
) -> None:
    fast, slow = Client(port), Client(port)
    clients.extend((fast, slow))
    _send(fast, "/stream/shared", "1", "2", "3", "4")
    _subscribe(fast, "/stream/shared", "f", "first")
    _subscribe(slow, "/stream/shared", "s", "first", ack="client-individual")
    assert _bodies(_take(fast, 4)) == ["1", "2", "3", "4"]
    first = slow.message()
    assert first.body == b"1"  # the other reader took nothing from it
    slow.conn.ack(first.headers["ack"])
    assert _bodies(_take(slow, 3)) == ["2", "3", "4"]
    # and a second subscription on one connection has its own position
    _subscribe(fast, "/stream/shared", "f2", "offset=3")
    assert _bodies(_take(fast, 2)) == ["3", "4"]
    _send(slow, "/stream/shared", "5")
    got = sorted((f.headers["subscription"], f.body) for f in _take(fast, 2))
    assert got == [("f", b"5"), ("f2", b"5")]
    assert slow.message().body == b"5"


def test_subscribing_again_from_first_replays_everything(client: Client) -> None:
    _send(client, "/stream/replay", "x", "y", "z")
    for round_ in range(2):
        _subscribe(client, "/stream/replay", f"r{round_}", "first", ack="client")
        frames = _take(client, 3)
        assert _bodies(frames) == ["x", "y", "z"]
        assert _offsets(frames) == [1, 2, 3]
        client.conn.ack(frames[-1].headers["ack"])  # acking consumes nothing
        client.conn.unsubscribe(f"r{round_}", receipt=f"u{round_}")
        client.receipt(f"u{round_}")


def test_prefetch_count_bounds_what_a_client_reader_holds(client: Client) -> None:
    _send(client, "/stream/windowed", *"abcdef")
    _subscribe(client, "/stream/windowed", "w", "first", ack="client", **{"prefetch-count": "2"})
    frames = _take(client, 2)
    assert _bodies(frames) == ["a", "b"]
    assert client.no_message()  # the window is full until an ack makes room
    client.conn.ack(frames[-1].headers["ack"])  # ack:client is cumulative
    frames = _take(client, 2)
    assert _bodies(frames) == ["c", "d"]
    assert client.no_message()
    client.conn.ack(frames[0].headers["ack"])
    assert client.message().body == b"e"
    assert client.no_message()


def test_an_offset_on_a_queue_is_refused_with_an_error(client: Client) -> None:
    client.conn.subscribe(
        "/queue/not-a-stream", id="q", headers={"x-stream-offset": "first"}, receipt="sub"
    )
    error = client.error()
    assert error.headers["receipt-id"] == "sub"
    assert error.headers["code"] == "consumer-error"
    assert "streams only" in error.headers["message"]
    assert b"queue:not-a-stream" in error.body
    assert client.disconnected.wait(TIMEOUT), "the broker kept the connection after ERROR"


def test_a_bad_offset_is_refused_with_an_error_that_says_the_forms(client: Client) -> None:
    client.conn.subscribe(
        "/stream/forms-bad", id="b", headers={"x-stream-offset": "beginning"}, receipt="sub"
    )
    error = client.error()
    assert error.headers["receipt-id"] == "sub"
    assert error.headers["code"] == "consumer-error"
    text = error.body.decode()
    for form in ("first", "last", "next", "offset=N", "timestamp=T", "'beginning'"):
        assert form in text
    assert client.disconnected.wait(TIMEOUT), "the broker kept the connection after ERROR"


def test_native_and_stomp_share_a_stream(server: ChuteServer, client: Client) -> None:
    with chute.connect(server.url) as native, native.session() as session:
        session.send("stream:interop", "from native", properties={"n": 7})
        session.send("stream:interop", "again", correlation_id="c")
        _subscribe(client, "stream:interop", "st", "first")  # chute's own name works too
        frames = _take(client, 2)
        assert _bodies(frames) == ["from native", "again"]
        assert _offsets(frames) == [1, 2]
        assert (frames[0].headers["n"], frames[1].headers["correlation-id"]) == ("7", "c")
        assert frames[0].headers["destination"] == "stream:interop"

        _send(client, "/stream/interop", "from stomp")
        reader = session.consumer("stream:interop", offset="first")
        got = [reader.receive(timeout=TIMEOUT) for _ in range(3)]
        assert [m.body if m is not None else None for m in got] == [
            b"from native",
            b"again",
            b"from stomp",
        ]
        assert [m.seq for m in got if m is not None] == [1, 2, 3]
    assert client.message().headers["x-stream-offset"] == "3"


def test_retention_applies_to_stomp_readers_after_a_restart(tmp_path: Path) -> None:
    """The stream is in the journal: a restarted broker serves the same offsets."""
    config = tmp_path / "chute.toml"
    config.write_text('[destinations."stream:durable"]\nmax_messages = 3\n')
    stomp_port = free_port()
    args = ("--config", str(config), "--stomp-port", str(stomp_port))
    srv = start_server(tmp_path, *args)
    try:
        writer = Client(stomp_port)
        _send(writer, "/stream/durable", "1", "2", "3", "4")
        writer.close()
        assert srv.stop() == 0
        srv = start_server(tmp_path, *args, port=srv.port)
        reader = Client(stomp_port)
        try:
            _subscribe(reader, "/stream/durable", "d", "first")
            frames = _take(reader, 3)
            assert _bodies(frames) == ["2", "3", "4"]
            assert _offsets(frames) == [2, 3, 4]
            _send(reader, "/stream/durable", "5")
            assert reader.message().headers["x-stream-offset"] == "5"
        finally:
            reader.close()
    finally:
        srv.stop()
