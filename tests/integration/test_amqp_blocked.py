"""``connection.blocked`` and ``connection.unblocked`` with pika: a publisher the broker
holds for its memory limit is told so, and told again when it may go on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve

BODY = b"m" * 1024


@pytest.fixture
def tight(tmp_path: Path) -> Iterator[AmqpServer]:
    """A broker whose queues cannot page (memory store) and that holds producers at 2 MiB."""
    config = tmp_path / "chute.toml"
    config.write_text(
        '[server]\nstore = "memory"\nmemory_high_watermark = "2MiB"\nblock_timeout_ms = 60000\n'
    )
    yield from serve(tmp_path, "--config", str(config))


def test_a_held_publisher_gets_connection_blocked_then_unblocked(tight: AmqpServer) -> None:
    events: list[str] = []
    params = pika.ConnectionParameters("127.0.0.1", tight.amqp_port)
    with pika.BlockingConnection(params) as conn:
        conn.add_on_connection_blocked_callback(
            lambda c, frame: events.append("blocked:" + frame.method.reason)
        )
        conn.add_on_connection_unblocked_callback(lambda c, frame: events.append("unblocked"))
        channel = conn.channel()
        channel.queue_declare("q")
        sent = 0
        while not events and sent < 3000:  # ~3 MiB: the broker holds it before 2 MiB
            channel.basic_publish("", "q", BODY)
            sent += 1
            conn.process_data_events(time_limit=0)
        assert events, f"{sent} sent and no connection.blocked"
        assert events[0].startswith("blocked:")
        assert "memory_high_watermark" in events[0]
        tight.server.wait_for_line("producers wait")
        with tight.connect() as other:
            reader = other.channel()
            drained = 0
            deadline = time.monotonic() + TIMEOUT
            while "unblocked" not in events and time.monotonic() < deadline:
                method, _, _ = reader.basic_get("q", auto_ack=True)
                drained += method is not None
                conn.process_data_events(time_limit=0)
            _wait(conn, lambda: "unblocked" in events)
        assert events == [events[0], "unblocked"]  # once each, not per publish
        channel.basic_publish("", "q", b"after")
        with tight.connect() as last:
            rest = _read_until(last.channel(), b"after")
        assert drained + rest == sent + 1  # nothing published while held was lost


def test_connection_blocked_is_advertised(tight: AmqpServer) -> None:
    with tight.connect() as conn:
        capabilities = conn._impl.server_capabilities
        assert capabilities["connection.blocked"] is True


def _wait(conn: Any, done: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert done(), "it did not come in time"


def _read_until(channel: Any, body: bytes) -> int:
    """Read queue ``q`` up to ``body``: how many messages that took."""
    count = 0
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        method, _, got = channel.basic_get("q", auto_ack=True)
        count += method is not None
        if got == body:
            return count
        if method is None:
            channel.connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"{body!r} never arrived")


def test_nothing_published_while_the_broker_holds_producers_is_lost(tight: AmqpServer) -> None:
    total = 3000  # ~3 MiB against 2 MiB: the broker holds the publisher part of the way
    params = pika.ConnectionParameters("127.0.0.1", tight.amqp_port)
    with pika.BlockingConnection(params) as conn:
        channel = conn.channel()
        channel.queue_declare("q")
        for n in range(total):
            channel.basic_publish("", "q", BODY + str(n).encode())
        channel.basic_publish("", "q", b"after")
        tight.server.wait_for_line("producers wait")
        with tight.connect() as other:
            reader = other.channel()
            seen: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while b"after" not in seen[-1:] and time.monotonic() < deadline:
                method, _, got = reader.basic_get("q", auto_ack=True)
                if method is None:
                    conn.process_data_events(time_limit=0.01)
                else:
                    seen.append(got)
        assert seen == [BODY + str(n).encode() for n in range(total)] + [b"after"]
