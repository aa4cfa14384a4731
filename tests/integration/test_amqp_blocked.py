"""``connection.blocked`` and ``connection.unblocked`` with pika: a publisher the broker
holds for its memory limit is told so, and told again when it may go on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

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
    """A publisher with confirms (one publish in flight, so what the broker holds is one
    publish, not a socket's worth) publishes until the broker holds it at 2 MiB; a
    consumer on another connection drains meanwhile. The publisher is told
    ``connection.blocked`` once, ``connection.unblocked`` once the queue holds less than
    the low watermark (90% of the high), and publishes on without being held again:
    what it sends next (~130 KiB) fits under the high watermark."""
    events: list[str] = []
    drainer = _Drainer(tight, b"after")
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", tight.amqp_port)) as conn:
        conn.add_on_connection_blocked_callback(
            lambda c, frame: events.append("blocked:" + frame.method.reason)
        )
        conn.add_on_connection_unblocked_callback(lambda c, frame: events.append("unblocked"))
        channel = conn.channel()
        channel.queue_declare("q")
        channel.confirm_delivery()  # each publish returns once the broker took it
        drainer.start()  # drains once the broker says producers wait
        sent = 0
        while "unblocked" not in events:
            assert sent < 3000, f"{sent} sent (~7.5 MiB held) and no connection.unblocked"
            channel.basic_publish("", "q", BODY)  # the held one returns once let go
            sent += 1
            conn.process_data_events(time_limit=0)
        for _ in range(50):  # on, while the consumer drains: not held again
            channel.basic_publish("", "q", BODY)
            sent += 1
        channel.basic_publish("", "q", b"after")
        conn.process_data_events(time_limit=0)
        drainer.finish()
        conn.process_data_events(time_limit=0)
    assert len(events) == 2, events  # once each, not per publish
    assert events[0].startswith("blocked:")
    assert "memory_high_watermark" in events[0]
    assert events[1] == "unblocked"
    assert drainer.drained == sent + 1  # nothing published while held was lost
    assert sum("producers wait" in line for line in tight.server.lines) == 1
    assert sum("producers resume" in line for line in tight.server.lines) == 1


class _Drainer(threading.Thread):
    """A consumer on its own connection (in its own thread: a pika connection is not
    shared between threads) that reads queue ``q`` with ``basic.get`` once the broker
    holds producers, up to the message ``last``."""

    def __init__(self, tight: AmqpServer, last: bytes) -> None:
        super().__init__(daemon=True)
        self.tight = tight
        self.last = last
        self.drained = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.tight.server.wait_for_line("producers wait", timeout=60)
            with self.tight.connect() as conn:
                channel = conn.channel()
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    method, _, body = channel.basic_get("q", auto_ack=True)
                    if method is None:  # empty for now: the publisher is on its way
                        conn.process_data_events(time_limit=0.01)
                        continue
                    self.drained += 1
                    if body == self.last:
                        return
                raise AssertionError(f"read {self.drained}, and {self.last!r} never arrived")
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish() on the test's thread
            self.error = exc

    def finish(self) -> None:
        """Wait until it has read ``last``; raise what went wrong in it."""
        self.join(90)
        assert not self.is_alive(), f"the consumer read {self.drained} and is still reading"
        if self.error is not None:
            raise self.error


def test_connection_blocked_is_advertised(tight: AmqpServer) -> None:
    with tight.connect() as conn:
        capabilities = conn._impl.server_capabilities
        assert capabilities["connection.blocked"] is True


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
