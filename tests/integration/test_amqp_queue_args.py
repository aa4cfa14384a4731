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
