"""A subscriber's bound over real sockets: large messages reach a subscriber that keeps
up, and one that never reads costs nobody else anything.

RabbitMQ's STOMP suite sends two 16 MiB messages to a topic with two subscribers
(``test_send_multiple_with_a_large_message``); each must get both. A subscription's
bound (``max_subscription_bytes``, 16 MiB) is on its backlog: it never refuses a
message to an empty subscription. (A 16 MiB body and its headers exceed the default
frame limit, ``max_packet_size`` = 16 MiB, so the test raises that.)
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

import chute
from chute.errors import ChuteError

from .conftest import free_port, start_server
from .test_small_disk import config, small_disk
from .test_stomp import Client

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

MiB = 1 << 20


def test_two_16_mib_messages_reach_both_idle_stomp_subscribers(tmp_path: Path) -> None:
    stomp_port = free_port()
    config = tmp_path / "chute.toml"
    # a 16 MiB body and its headers pass the default frame limit (16 MiB): raise it, and
    # leave max_subscription_bytes at its default (16 MiB), below each message's size
    config.write_text('[server]\nmax_packet_size = "32MiB"\n', encoding="utf-8")
    server = start_server(tmp_path, "--config", str(config), "--stomp-port", str(stomp_port))
    try:
        subscribers = [Client(stomp_port) for _ in range(2)]
        for i, subscriber in enumerate(subscribers):
            subscriber.conn.subscribe("/topic/16mb", id=str(i), ack="auto", receipt=f"s{i}")
            subscriber.receipt(f"s{i}")
        producer = Client(stomp_port)
        body = b"x" * (16 * MiB)
        for i in range(2):
            producer.conn.send("/topic/16mb", body, receipt=f"m{i}")
            producer.receipt(f"m{i}")
        for subscriber in subscribers:
            for _ in range(2):
                frame = subscriber.message(timeout=20)
                assert len(frame.body) == len(body)
        dead = Client(stomp_port)
        dead.conn.subscribe("/queue/__sys__deadLetter", id="d", ack="auto")
        dead.no_message()  # nothing went to the dead-letter queue
        for client in (*subscribers, producer, dead):
            client.conn.disconnect()
    finally:
        server.stop()


def test_a_subscriber_that_never_reads_stops_no_producer_on_a_small_disk(tmp_path: Path) -> None:
    """A non-persistent flood to a topic whose one subscriber reads nothing, on a 200 MiB
    filesystem, with the default limits: what the subscription drops goes to the
    dead-letter queue without a journal write (a dead letter keeps its persistence), so
    the disk never passes ``disk_free_limit`` (64 MiB) and an unrelated producer's
    persistent send is answered at once, not after ``block_timeout_ms``."""
    stomp_port = free_port()
    with small_disk(tmp_path, "200m") as disk:
        server = start_server(
            tmp_path,
            "--config",
            str(config(tmp_path, "block_timeout_ms = 5000")),  # a stuck send fails, not hangs
            "--stomp-port",
            str(stomp_port),
            data_dir=disk.path / "data",
            prefix=disk.prefix,
        )
        try:
            stuck = socket.create_connection(("127.0.0.1", stomp_port))
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
            stuck.recv(4096)  # CONNECTED
            stuck.sendall(b"SUBSCRIBE\nid:0\ndestination:/topic/flood\nack:auto\nreceipt:r\n\n\0")
            answer = b""
            while b"RECEIPT" not in answer:
                answer += stuck.recv(4096)
            body = b"f" * (16 << 10)
            flooded = 0
            with chute.connect(server.url) as conn, conn.session() as s:
                # 400 MiB: twice the disk; the old dead-letter queue paged it to the journal
                for _ in range(25_600):
                    try:
                        s.send("topic:flood", body, persistent=False)
                    except ChuteError:
                        break  # the broker stopped the flood: the bystander below tells why
                    flooded += 1
                with contextlib.suppress(ChuteError):
                    s.flush()
                # an unrelated producer's persistent send to its own queue
                with chute.connect(server.url) as other, other.session() as p:
                    p.send("queue:own", b"b" * 100)  # raises after block_timeout_ms if held
                stats = {d["address"]: d for d in conn.stat()["destinations"]}
            assert flooded == 25_600
            assert stats["topic:flood"]["dead_lettered"] > 20_000
            assert not any("disk_free_limit" in line for line in server.lines)
            dead = stats["queue:__sys__deadLetter"]
            assert dead["depth"] > 0  # the newest dead letters, within max_memory
            assert dead["dead_lettered"] > 0  # the oldest made room for them
            dropped = "queue:__sys__deadLetter discarded (the oldest, to make room)"
            server.wait_for_line(dropped)
            assert sum(dropped in line for line in server.lines) == 1  # not once per message
            with chute.connect(server.url) as conn, conn.session() as c:
                got = c.consumer("queue:own").receive(timeout=10)
                assert got is not None
                assert got.body == b"b" * 100
                letter = c.consumer("queue:__sys__deadLetter").receive(timeout=10)
                assert letter is not None
                assert not letter.persistent  # a dead letter keeps its persistence
                assert letter.properties["chute_reason"] == "dropped-oldest"
            stuck.close()
        finally:
            server.stop()
