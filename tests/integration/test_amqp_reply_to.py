"""Direct reply-to with pika: a requester consumes ``amq.rabbitmq.reply-to`` with no-ack,
publishes with ``reply_to`` set to it, and the responder's reply comes back to that
channel, as with RabbitMQ."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve

REPLY_TO = "amq.rabbitmq.reply-to"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-reply-to"))


def _wait(conn: Any, done: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert done(), "nothing arrived in time"


def test_a_reply_to_amq_rabbitmq_reply_to_comes_back_to_the_requesters_channel(
    broker: AmqpServer,
) -> None:
    requests = f"rpc.{uuid.uuid4().hex[:8]}"
    with broker.connect() as server_conn, broker.connect() as client_conn:
        server = server_conn.channel()
        server.queue_declare(requests)
        client = client_conn.channel()
        replies: list[tuple[Any, Any, bytes]] = []
        client.basic_consume(REPLY_TO, lambda ch, m, p, b: replies.append((m, p, b)), auto_ack=True)
        for n in range(3):
            client.basic_publish(
                "",
                requests,
                f"question {n}".encode(),
                pika.BasicProperties(reply_to=REPLY_TO, correlation_id=str(n)),
            )
        seen: list[Any] = []
        for _ in range(3):
            method, props, body = _get(server, requests)
            seen.append(props.reply_to)
            server.basic_ack(method.delivery_tag)
            server.basic_publish(
                "",
                props.reply_to,
                body.replace(b"question", b"answer"),
                pika.BasicProperties(correlation_id=props.correlation_id),
            )
        _wait(client_conn, lambda: len(replies) == 3)
        assert [b for _, _, b in replies] == [b"answer 0", b"answer 1", b"answer 2"]
        assert [p.correlation_id for _, p, _ in replies] == ["0", "1", "2"]
        # the responder sees a routable name of the requester's channel, not the pseudo-queue
        assert len(set(seen)) == 1
        assert seen[0].startswith(REPLY_TO + ".")
        assert replies[0][0].routing_key == seen[0]


def test_a_reply_once_the_requester_is_gone_is_unroutable(broker: AmqpServer) -> None:
    requests = f"rpc.{uuid.uuid4().hex[:8]}"
    with broker.connect() as server_conn:
        server = server_conn.channel()
        server.queue_declare(requests)
        with broker.connect() as client_conn:
            client = client_conn.channel()
            client.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
            client.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=REPLY_TO))
            client_conn.process_data_events(time_limit=0)
            method, props, _ = _get(server, requests)
            server.basic_ack(method.delivery_tag)
        server.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            server.basic_publish("", props.reply_to, b"too late", mandatory=True)


def test_publishing_with_reply_to_and_no_reply_consumer_is_406(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare("rpc.nobody")
        channel.basic_publish("", "rpc.nobody", b"q", pika.BasicProperties(reply_to=REPLY_TO))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("rpc.nobody", passive=True)
        assert info.value.reply_code == 406
        assert "fast reply consumer does not exist" in info.value.reply_text


def test_a_reply_consumer_must_be_no_ack(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
        assert info.value.reply_code == 406
        assert "no_ack" in info.value.reply_text


def test_another_connection_cannot_consume_a_reply_queue(broker: AmqpServer) -> None:
    requests = f"rpc.{uuid.uuid4().hex[:8]}"
    with broker.connect() as a, broker.connect() as b:
        server = b.channel()
        server.queue_declare(requests)
        client = a.channel()
        client.basic_consume(REPLY_TO, lambda *x: None, auto_ack=True)
        client.basic_publish("", requests, b"q", pika.BasicProperties(reply_to=REPLY_TO))
        _, props, _ = _get(server, requests)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            b.channel().basic_consume(props.reply_to, lambda *x: None, auto_ack=True)
        assert info.value.reply_code in (403, 405)


def _get(channel: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue)
        if method is not None:
            return method, props, body
        channel.connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"nothing arrived on {queue}")
