"""Durable AMQP exchanges and bindings are kept in the journal: after a restart they
route again, with the messages they routed before; transient ones and deleted ones
are gone."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest

from .amqp_support import AmqpServer
from .conftest import free_port, start_server


def _start(tmp: Path, amqp_port: int) -> AmqpServer:
    srv = start_server(tmp, "--amqp-port", str(amqp_port), data_dir=tmp / "data")
    return AmqpServer(srv, amqp_port, 0)


def _stop(broker: AmqpServer) -> None:
    assert broker.server.stop() == 0
    assert "Traceback" not in broker.server.output, broker.server.output


def test_durable_exchanges_and_bindings_survive_a_restart(tmp_path: Path) -> None:
    port = free_port()
    broker = _start(tmp_path, port)
    try:
        with broker.connect() as conn:
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
    finally:
        _stop(broker)
    broker = _start(tmp_path, port)
    try:
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
    finally:
        _stop(broker)
