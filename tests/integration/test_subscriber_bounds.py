"""A subscriber's bound over real sockets: large messages reach a subscriber that keeps
up, and one that never reads costs nobody else anything.

RabbitMQ's STOMP suite sends two 16 MiB messages to a topic with two subscribers
(``test_send_multiple_with_a_large_message``); each must get both. A subscription's
bound (``max_subscription_bytes``, 16 MiB) is on its backlog: it never refuses a
message to an empty subscription. (A 16 MiB body and its headers exceed the default
frame limit, ``max_packet_size`` = 16 MiB, so the test raises that.)
"""

from __future__ import annotations

from pathlib import Path

from .conftest import free_port, start_server
from .test_stomp import Client

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
