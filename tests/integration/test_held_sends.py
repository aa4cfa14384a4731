"""A send the broker holds for memory, over real sockets: the client waits as long as the
broker may hold it (not only its own, shorter, timeout), then gets the broker's answer:
the message taken once consumers drained, or the broker's reason after
``block_timeout_ms``. The blocking client, the asyncio client and ``chute send``; a
full queue under ``overflow = "block"`` holds a send the same way.

The broker (memory store: nothing pages) stops every producer once its queues hold
more than ``memory_high_watermark`` plus an eighth: two 640 KiB messages (a message
held costs twice its size) against 2 MiB. A producer connecting afterwards has sent
nothing, so only that bound holds it (not its share of what was sent lately).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

import chute
import chute.aio
from chute.errors import ChuteError, DestinationFull

from .conftest import ChuteServer, start_server
from .test_cli import chute as run_chute
from .test_memory_limits import serve

BIG = b"b" * (640 << 10)
HOARD = 2
CLIENT_TIMEOUT = 0.5
"""The clients' own timeout: far shorter than the broker holds a send."""
WAIT = 20.0


def tight(tmp_path: Path, block_timeout_ms: int) -> ChuteServer:
    config = 'store = "memory"\nmemory_high_watermark = "2MiB"\n'
    server = serve(tmp_path, config + f"block_timeout_ms = {block_timeout_ms}\n")
    with chute.connect(server.url) as conn, conn.session() as s:
        for _ in range(HOARD):
            s.send("queue:hoard", BIG)
        s.flush()
    return server


def drain(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
        consumer = s.consumer("queue:hoard")
        for _ in range(HOARD):
            assert consumer.receive(timeout=WAIT) is not None


def send_held(s: chute.Session, address: str = "queue:other") -> None:
    s.send(address, b"held")
    s.flush()


def assert_the_brokers_reason(error: DestinationFull, block_timeout_ms: int) -> None:
    assert "memory_high_watermark" in error.reason
    assert f"no room within {block_timeout_ms} ms (block_timeout_ms)" in error.reason
    assert "not accepted" in error.reason


def test_a_held_send_gets_the_brokers_reason_not_the_clients_timeout(tmp_path: Path) -> None:
    server = tight(tmp_path, block_timeout_ms=2500)
    try:
        with chute.connect(server.url, timeout=CLIENT_TIMEOUT) as conn, conn.session() as s:
            started = time.monotonic()
            with pytest.raises(DestinationFull) as refused:
                send_held(s)
            assert time.monotonic() - started >= 2.5  # the broker's time, not the client's
            assert_the_brokers_reason(refused.value, 2500)
            drain(server)
            server.wait_for_line("producers resume")
            s.send("queue:other", b"after")  # the connection goes on
            s.flush()
    finally:
        server.stop()


def test_a_held_producer_with_heartbeats_is_not_taken_for_dead(tmp_path: Path) -> None:
    """The broker does not read a held producer, so its heart-beats wait in the socket:
    held for longer than three of them, it is still there for the broker's answer."""
    server = tight(tmp_path, block_timeout_ms=5000)
    try:
        with (
            chute.connect(server.url, timeout=CLIENT_TIMEOUT, heartbeat=1.0) as conn,
            conn.session() as s,
        ):
            with pytest.raises(DestinationFull) as refused:
                send_held(s)
            assert_the_brokers_reason(refused.value, 5000)
        assert not any("sent nothing" in line for line in server.lines)
    finally:
        server.stop()


def test_a_held_send_waits_past_the_clients_timeout_and_goes_on(tmp_path: Path) -> None:
    server = tight(tmp_path, block_timeout_ms=60_000)
    done = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with chute.connect(server.url, timeout=CLIENT_TIMEOUT) as conn, conn.session() as s:
                send_held(s)
        except ChuteError as exc:
            failure.append(exc)
        finally:
            done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        # four times the client's own timeout: still waiting, and not for an error
        assert not done.wait(4 * CLIENT_TIMEOUT), failure
        drain(server)
        assert done.wait(WAIT)
        assert not failure
        with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
            message = s.consumer("queue:other").receive(timeout=WAIT)
            assert message is not None
            assert message.body == b"held"
    finally:
        producer.join(WAIT)
        server.stop()


def test_the_asyncio_client_waits_for_the_brokers_answer_too(tmp_path: Path) -> None:
    server = tight(tmp_path, block_timeout_ms=2500)

    async def send_held(s: chute.aio.Session) -> None:
        await s.send("queue:other", b"held")
        await s.flush()

    async def send() -> DestinationFull:
        async with await chute.aio.connect(server.url, timeout=CLIENT_TIMEOUT) as conn:
            s = conn.session()
            with pytest.raises(DestinationFull) as refused:
                await send_held(s)
            return refused.value

    try:
        assert_the_brokers_reason(asyncio.run(send()), 2500)
    finally:
        server.stop()


@pytest.mark.slow
def test_chute_send_says_what_holds_it(tmp_path: Path) -> None:
    """The command's timeout is the client's default (10 s); the broker holds 11 s."""
    server = tight(tmp_path, block_timeout_ms=11_000)
    try:
        sent = run_chute(server, "send", "queue:other", "held")
        assert sent.returncode == 1
        [line] = sent.stderr.decode().splitlines()
        assert line.startswith("chute: error: ")
        assert "memory_high_watermark" in line
        assert "no room within 11000 ms (block_timeout_ms)" in line
    finally:
        server.stop()


def test_a_send_held_by_a_full_queue_under_overflow_block_waits_for_the_broker_too(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chute.toml"
    path.write_text(
        '[destinations."queue:bounded"]\nmax_messages = 1\noverflow = "block"\n'
        "block_timeout_ms = 2500\n"
    )
    server = start_server(tmp_path, "--config", str(path))
    try:
        with chute.connect(server.url, timeout=CLIENT_TIMEOUT) as conn, conn.session() as s:
            s.send("queue:bounded", b"first")
            s.flush()
            with pytest.raises(DestinationFull) as refused:
                send_held(s, "queue:bounded")
            assert "no room within 2500 ms (overflow = block)" in refused.value.reason
    finally:
        server.stop()
