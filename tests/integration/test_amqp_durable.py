"""Durable AMQP exchanges and bindings are kept in the journal: after a restart they
route again, with the messages they routed before; transient ones and deleted ones
are gone."""

from __future__ import annotations

import contextlib
import decimal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .amqp_support import AmqpServer
from .conftest import free_port, start_server


@contextlib.contextmanager
def _running(tmp: Path, amqp_port: int) -> Iterator[AmqpServer]:
    """A broker over the journal in ``tmp``, stopped cleanly (no traceback) at the end:
    each use is one run of the broker, the next one a restart."""
    srv = start_server(tmp, "--amqp-port", str(amqp_port), data_dir=tmp / "data")
    broker = AmqpServer(srv, amqp_port, 0)
    try:
        yield broker
    finally:
        assert broker.server.stop() == 0
        assert "Traceback" not in broker.server.output, broker.server.output


def test_durable_exchanges_and_bindings_survive_a_restart(tmp_path: Path) -> None:
    port = free_port()
    with _running(tmp_path, port) as broker, broker.connect() as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.exchange_declare("orders", "direct", durable=True)
        channel.exchange_declare("gone", "fanout", durable=True)
        channel.exchange_declare("scratch", "fanout", durable=False)
        channel.exchange_declare("headers.x", "headers", durable=True)
        channel.queue_declare("orders.eu", durable=True)
        channel.queue_declare("orders.all", durable=True)
        channel.queue_bind("orders.eu", "orders", routing_key="eu")
        channel.queue_bind("orders.all", "orders", routing_key="eu")
        channel.queue_bind("orders.all", "orders", routing_key="us")
        channel.queue_unbind("orders.all", "orders", routing_key="us")
        channel.queue_bind(
            "orders.all", "headers.x", arguments={"x-match": "any", "region": "apac"}
        )
        channel.exchange_delete("gone")
        persistent = pika.BasicProperties(delivery_mode=2)
        channel.basic_publish("orders", "eu", b"before", persistent)
    with _running(tmp_path, port) as broker:
        with broker.connect() as conn:
            channel = conn.channel()
            channel.exchange_declare("orders", "direct", durable=True, passive=True)
            channel.basic_publish("orders", "eu", b"after")
            channel.basic_publish("orders", "us", b"unbound")
            channel.basic_publish(
                "headers.x", "", b"apac", pika.BasicProperties(headers={"region": "apac"})
            )
            eu = [channel.basic_get("orders.eu", auto_ack=True)[2] for _ in range(3)]
            assert eu == [b"before", b"after", None]
            every = [channel.basic_get("orders.all", auto_ack=True)[2] for _ in range(4)]
            assert every == [b"before", b"after", b"apac", None]
        for name in ("gone", "scratch"):
            with broker.connect() as conn:
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                    conn.channel().exchange_declare(name, passive=True)
                assert info.value.reply_code == 404


DELAY = {
    "x-message-ttl": 200,
    "x-dead-letter-exchange": "",
    "x-dead-letter-routing-key": "ready",
    "x-custom": {"nested": [1, b"\xff", decimal.Decimal("1.5")]},
}
"""A delay queue's arguments: its messages go to ``ready`` after 200 ms."""


def _get_within(channel: Any, queue: str, timeout: float) -> bytes | None:
    """The next message of ``queue`` (auto-acked), polling until ``timeout`` passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        _, _, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            return bytes(body)
        channel.connection.process_data_events(time_limit=0.05)
    return None


def test_a_durable_queues_arguments_hold_after_a_restart_without_a_redeclare(
    tmp_path: Path,
) -> None:
    """A durable queue's x-arguments are part of it, as in RabbitMQ: after a restart its
    bound and its TTL with dead-lettering (a delay queue) hold before anyone declares it
    again, and a redeclare with other arguments is refused; a deleted queue's
    declaration is not kept."""
    port = free_port()
    with _running(tmp_path, port) as broker, broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare("bounded", durable=True, arguments={"x-max-length": 2})
        channel.queue_declare("ready", durable=True)
        channel.queue_declare("delay", durable=True, arguments=DELAY)
        channel.queue_declare("dropped", durable=True, arguments={"x-max-length": 1})
        channel.queue_delete("dropped")
    with _running(tmp_path, port) as broker:
        with broker.connect() as conn:
            channel = conn.channel()
            channel.confirm_delivery()
            for i in range(5):
                channel.basic_publish("", "bounded", f"m{i}".encode())
            depth = channel.queue_declare("bounded", passive=True).method.message_count
            assert depth == 2  # the oldest dropped: x-max-length's drop-head
            assert channel.basic_get("bounded", auto_ack=True)[2] == b"m3"
            channel.basic_publish("", "delay", b"later")
            assert _get_within(channel, "ready", 30.0) == b"later"  # expired, dead-lettered
            channel.queue_declare("delay", durable=True, arguments=DELAY)  # the same: accepted
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                channel.queue_declare("bounded", durable=True, arguments={"x-max-length": 3})
            assert info.value.reply_code == 406
            assert "x-max-length" in info.value.reply_text
        with broker.connect() as conn:
            channel = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                channel.queue_declare("dropped", passive=True)
            assert info.value.reply_code == 404
