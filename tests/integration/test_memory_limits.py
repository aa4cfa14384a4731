"""The broker's memory, tried over real sockets: past the high watermark producers wait
(and fail clearly after block_timeout_ms) while consumers drain, and go on once under the
low watermark, held once, not per message; a STOMP subscriber that
never reads its socket costs the broker its subscription's bound, not its memory."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp

import chute
from chute.errors import DestinationFull, TransactionError

from .conftest import ChuteServer, free_port, start_server
from .hostile import rss_kib
from .test_stomp import Client

BODY = b"m" * 1024


def stats(conn: chute.Connection, address: str = "queue:q") -> dict[str, int]:
    found: dict[str, int] = next(d for d in conn.stat()["destinations"] if d["address"] == address)
    return found


def serve(tmp_path: Path, config: str, *extra: str) -> ChuteServer:
    path = tmp_path / "chute.toml"
    path.write_text("[server]\n" + config)
    return start_server(tmp_path, "--config", str(path), *extra)


@pytest.fixture
def tight(tmp_path: Path) -> Iterator[ChuteServer]:
    """A broker whose queues cannot page (memory store) and that stops producers at 2 MiB."""
    server = serve(
        tmp_path, 'store = "memory"\nmemory_high_watermark = "2MiB"\nblock_timeout_ms = 1500\n'
    )
    yield server
    server.stop()


def test_a_producer_past_the_high_watermark_gets_a_clear_error_and_consumers_still_drain(
    tight: ChuteServer,
) -> None:
    with chute.connect(tight.url) as conn, conn.session() as s:

        def fill() -> int:
            for _ in range(10_000):
                s.send("queue:q", BODY)
                s.flush()
            return 10_000

        with pytest.raises(DestinationFull) as refused:
            fill()
        sent = stats(conn)["depth"]
        assert "memory_high_watermark" in refused.value.reason
        assert "not accepted" in refused.value.reason
        assert 100 < sent < 2000  # ~2.6 KiB a message against 2 MiB
        tight.wait_for_line("producers wait")
        with chute.connect(tight.url) as other, other.session(ack="auto") as reader:
            consumer = reader.consumer("queue:q")
            got = [consumer.receive(timeout=10) for _ in range(sent)]
            assert all(m is not None for m in got)
            assert consumer.receive(timeout=0.2) is None  # the refused one was not kept
        tight.wait_for_line("producers resume")
        s.send("queue:q", b"after")
        s.flush()
    assert sum("producers wait" in line for line in tight.lines) == 1  # once, not per send


def test_a_waiting_producer_goes_on_by_itself_once_consumers_drain(tmp_path: Path) -> None:
    server = serve(
        tmp_path, 'store = "memory"\nmemory_high_watermark = "2MiB"\nblock_timeout_ms = 30000\n'
    )
    total = 3000  # ~8 MiB: four times what the broker admits at once
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with chute.connect(server.url) as conn, conn.session() as s:
                for i in range(total):
                    s.send("queue:q", str(i).encode() + BODY)
                s.flush()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failure.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        server.wait_for_line("producers wait")
        with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
            consumer = s.consumer("queue:q")
            got: list[bytes] = []
            for _ in range(total):
                m = consumer.receive(timeout=20)
                assert m is not None, f"stalled after {len(got)} messages"
                got.append(m.body[: -len(BODY)])
        assert got == [str(i).encode() for i in range(total)]
    finally:
        producer.join(30)
        server.stop()
    assert not failure


def test_a_held_producer_goes_on_under_the_low_watermark_and_is_not_held_again_per_message(
    tmp_path: Path,
) -> None:
    """A 2 MiB high watermark and a 1 MiB low one. A native producer sending one message
    at a time (each flushed) is held near 2 MiB while a consumer drains; it goes on once
    the queue holds less than 1 MiB and sends the rest (~0.5 MiB) without being held
    again: the broker logs one wait and one resume, not one of each per message."""
    server = serve(
        tmp_path,
        'store = "memory"\nmemory_high_watermark = "2MiB"\nmemory_low_watermark = "1MiB"\n'
        "block_timeout_ms = 60000\n",
    )
    total = 1000  # ~2.6 MiB: held once near 800, then ~200 more from under 1 MiB
    got: list[bytes] = []
    failure: list[BaseException] = []

    def drain() -> None:
        try:
            server.wait_for_line("producers wait", timeout=60)
            with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
                consumer = s.consumer("queue:q")
                for _ in range(total):
                    m = consumer.receive(timeout=20)
                    assert m is not None, f"stalled after {len(got)} messages"
                    got.append(m.body[: -len(BODY)])
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failure.append(exc)

    drainer = threading.Thread(target=drain)
    drainer.start()
    try:
        with chute.connect(server.url) as conn, conn.session() as s:
            for i in range(total):
                s.send("queue:q", str(i).encode() + BODY)
                s.flush()  # one message in flight: the broker holds this producer, not a backlog
        drainer.join(90)
        assert not failure, failure
        assert got == [str(i).encode() for i in range(total)]
        resumed = server.wait_for_line("producers resume")
        assert "low 1.0 MiB" in resumed
        assert sum("producers wait" in line for line in server.lines) == 1
        assert sum("producers resume" in line for line in server.lines) == 1
    finally:
        server.stop()


def test_a_stomp_subscriber_that_never_reads_costs_its_bound_not_the_broker(
    tmp_path: Path,
) -> None:
    stomp_port = free_port()
    server = serve(
        tmp_path,
        'max_subscription_bytes = "2MiB"\nmax_memory = "4MiB"\nmemory_high_watermark = "16MiB"\n',
        "--stomp-port",
        str(stomp_port),
    )
    try:
        stuck = socket.create_connection(("127.0.0.1", stomp_port))
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        stuck.recv(4096)  # CONNECTED
        stuck.sendall(b"SUBSCRIBE\nid:0\ndestination:/topic/news\nack:auto\nreceipt:r\n\n\0")
        answer = b""
        while b"RECEIPT" not in answer:
            answer += stuck.recv(4096)
        before = rss_kib(server.process.pid) * 1024
        body = b"n" * 8192
        with chute.connect(server.url) as conn, conn.session() as s:
            for _ in range(24 * 1024):  # 192 MiB published to a subscriber that reads nothing
                s.send("topic:news", body, persistent=False)
            s.flush()
            grown = rss_kib(server.process.pid) * 1024 - before
            stats = conn.stat()
        topic = next(d for d in stats["destinations"] if d["address"] == "topic:news")
        assert topic["dead_lettered"] > 20_000  # the oldest went to the dead-letter queue
        # bounded by the subscription's bound, the paging line and the high watermark (22
        # MiB), what the journal's writer may be behind (4 MiB) and a margin for the
        # allocator; without the bound the broker grew by everything published
        assert grown < 112 << 20, f"the broker grew by {grown >> 20} MiB"
        server.wait_for_line("dropped-oldest")
        assert sum("dropped-oldest" in line for line in server.lines) == 1
        # the subscriber is still connected and gets the newest messages once it reads
        stuck.settimeout(10)
        seen = b""
        while b"MESSAGE" not in seen:
            chunk = stuck.recv(65536)
            assert chunk, "the broker closed the slow subscriber"
            seen += chunk
        stuck.close()
    finally:
        server.stop()


def test_a_transaction_bigger_than_the_broker_may_hold_is_refused_at_once(tmp_path: Path) -> None:
    # 2 MiB of memory, and a producer that puts ~10 MiB in one transaction: its own
    # messages keep the broker over the line, so waiting (60 s here) cannot help.
    server = serve(
        tmp_path, 'store = "memory"\nmemory_high_watermark = "2MiB"\nblock_timeout_ms = 60000\n'
    )
    try:
        with chute.connect(server.url) as conn, conn.session(transacted=True) as s:
            started = time.monotonic()

            def fill_and_commit() -> None:
                for _ in range(10_000):
                    s.send("queue:big", BODY)
                s.commit()

            with pytest.raises(TransactionError) as refused:
                fill_and_commit()
            assert time.monotonic() - started < 30  # well before block_timeout_ms
            assert "commit in smaller transactions" in str(refused.value)
            s.rollback()  # what a refused transaction can do (a commit would say so)
            s.send("queue:big", b"small")  # the session goes on
            s.commit()
        with chute.connect(server.url) as conn, conn.session(ack="auto") as reader:
            consumer = reader.consumer("queue:big")
            message = consumer.receive(timeout=10)
            assert message is not None
            assert message.body == b"small"
            assert consumer.receive(timeout=0.2) is None  # nothing of the refused one
            assert stats(conn, "queue:big")["depth"] == 0
    finally:
        server.stop()


def test_a_stomp_transaction_bigger_than_the_broker_may_hold_gets_an_error_at_once(
    tmp_path: Path,
) -> None:
    stomp_port = free_port()
    server = serve(
        tmp_path,
        'store = "memory"\nmemory_high_watermark = "2MiB"\nblock_timeout_ms = 60000\n',
        "--stomp-port",
        str(stomp_port),
    )
    clients: list[Client] = []
    try:
        big = Client(stomp_port)
        clients.append(big)
        tx = big.conn.begin()
        for _ in range(3000):  # ~8 MiB in one transaction, against 2 MiB
            try:
                big.conn.send("/queue/big", BODY, transaction=tx)
            except (OSError, stomp.exception.StompException):
                break  # the broker closed the connection after its ERROR
        error = big.error()  # within TIMEOUT, not block_timeout_ms
        assert "commit in smaller transactions" in error.headers["message"]
        other = Client(stomp_port)
        clients.append(other)
        other.conn.subscribe("/queue/big", id="s", ack="auto")
        other.conn.send("/queue/big", b"small")
        assert other.message().body == b"small"
        assert other.no_message()  # nothing of the refused transaction
    finally:
        for client in clients:
            client.close()
        server.stop()
