"""Queue arguments with pika: ``x-max-priority`` (AMQP priorities spread over chute's,
none counting as 0) and ``x-single-active-consumer`` (one consumer receives, the next
takes over when it goes)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-args"))


def _name() -> str:
    return f"q.{uuid.uuid4().hex[:8]}"


def _wait(conns: list[Any], done: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done() and time.monotonic() < deadline:
        for conn in conns:
            conn.process_data_events(time_limit=0.02)
    assert done(), "not in time"


def test_x_max_priority_orders_by_amqp_priority_with_none_as_zero(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        queue = _name()
        channel.queue_declare(queue, arguments={"x-max-priority": 10})
        for priority in (None, 1, 5, 10, 200):
            channel.basic_publish(
                "", queue, str(priority).encode(), pika.BasicProperties(priority=priority)
            )
        got = []
        for _ in range(5):
            method, _, body = channel.basic_get(queue, auto_ack=True)
            assert method is not None
            got.append(body.decode())
        # 10 and 200 (over the maximum) are the same level, kept in order
        assert got == ["10", "200", "5", "1", "None"]


def test_x_max_priority_must_be_1_to_255(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(_name(), arguments={"x-max-priority": 256})
        assert info.value.reply_code == 406
        assert "x-max-priority" in info.value.reply_text


def test_a_single_active_consumer_receives_and_the_next_takes_over(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as first, broker.connect() as second, broker.connect() as sender:
        publisher = sender.channel()
        publisher.queue_declare(queue, arguments={"x-single-active-consumer": True})
        got: dict[str, list[bytes]] = {"first": [], "second": []}
        for who, conn in (("first", first), ("second", second)):
            channel = conn.channel()
            channel.basic_qos(prefetch_count=2)

            def take(ch: Any, m: Any, p: Any, b: bytes, who: str = who) -> None:
                got[who].append(b)
                ch.basic_ack(m.delivery_tag)

            channel.basic_consume(queue, take)
            conn.process_data_events(time_limit=0)
        for n in range(6):
            publisher.basic_publish("", queue, f"a{n}".encode())
        _wait([first, second], lambda: len(got["first"]) == 6)
        assert got["second"] == []
        first.close()
        for n in range(4):
            publisher.basic_publish("", queue, f"b{n}".encode())
        _wait([second], lambda: len(got["second"]) == 4)
        assert got["second"] == [b"b0", b"b1", b"b2", b"b3"]


def _exists(conn: Any, queue: str) -> bool:
    try:
        conn.channel().queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code != 404:
            raise
        return False
    return True


def _wait_gone(conn: Any, queue: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while _exists(conn, queue) and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    assert not _exists(conn, queue), f"{queue} is still there"


def test_x_expires_deletes_an_unused_queue_with_its_messages_and_bindings(
    broker: AmqpServer,
) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        queue, exchange = _name(), _name()
        channel.exchange_declare(exchange, "direct")
        channel.queue_declare(queue, arguments={"x-expires": 300})
        channel.queue_bind(queue, exchange, "k")
        channel.basic_publish(exchange, "k", b"left behind")
        _wait_gone(conn, queue)
        broker.server.wait_for_line(f"AMQP queue '{queue}' deleted: unused for its x-expires")
        channel = conn.channel()
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish(exchange, "k", b"no binding left", mandatory=True)


def test_x_expires_waits_while_the_queue_has_a_consumer(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        consumed, witness = _name(), _name()
        for queue in (consumed, witness):
            channel.queue_declare(queue, arguments={"x-expires": 200})
        tag = channel.basic_consume(consumed, lambda *a: None, auto_ack=True)
        _wait_gone(conn, witness)  # declared with it, unused: gone
        assert _exists(conn, consumed)
        channel.basic_cancel(tag)
        _wait_gone(conn, consumed)
