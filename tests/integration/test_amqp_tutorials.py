"""RabbitMQ's six Python tutorials' patterns, with pika's blocking client, against chute:
hello world, work queues, publish/subscribe, routing, topics and RPC."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-tutorials"))


def _drain(channel: Any, queue: str, count: int, *, ack: bool = False) -> list[bytes]:
    """Consume ``count`` messages of ``queue`` (acking each if ``ack``)."""
    got: list[bytes] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        got.append(body)
        if ack:
            ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            ch.stop_consuming()

    channel.basic_consume(queue=queue, on_message_callback=on_message, auto_ack=not ack)
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        channel.connection.process_data_events(time_limit=0.2)
    channel.stop_consuming()
    return got


def test_hello_world(broker: AmqpServer) -> None:
    with broker.connect() as sender:
        channel = sender.channel()
        channel.queue_declare(queue="hello")
        channel.basic_publish(exchange="", routing_key="hello", body=b"Hello World!")
    with broker.connect() as receiver:
        channel = receiver.channel()
        channel.queue_declare(queue="hello")
        assert _drain(channel, "hello", 1) == [b"Hello World!"]


def test_work_queues_fair_dispatch_with_manual_acks(broker: AmqpServer) -> None:
    tasks = [f"task {i}".encode() for i in range(20)]
    with broker.connect() as sender:
        channel = sender.channel()
        channel.queue_declare(queue="task_queue", durable=True)
        for body in tasks:
            channel.basic_publish(
                exchange="",
                routing_key="task_queue",
                body=body,
                properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
            )
    done: list[list[bytes]] = [[], []]

    def worker(index: int) -> None:
        with broker.connect() as conn:
            channel = conn.channel()
            channel.queue_declare(queue="task_queue", durable=True)
            channel.basic_qos(prefetch_count=1)

            def callback(ch: Any, method: Any, props: Any, body: bytes) -> None:
                done[index].append(body)
                ch.basic_ack(delivery_tag=method.delivery_tag)

            channel.basic_consume(queue="task_queue", on_message_callback=callback)
            deadline = time.monotonic() + TIMEOUT
            while sum(map(len, done)) < len(tasks) and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    assert sorted(done[0] + done[1]) == sorted(tasks)
    assert done[0], "prefetch 1 shares the work between both workers"
    assert done[1], "prefetch 1 shares the work between both workers"


def test_publish_subscribe_fanout(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        channel.exchange_declare(exchange="logs", exchange_type="fanout")
        queues = []
        for _ in range(2):
            result = channel.queue_declare(queue="", exclusive=True)
            assert result.method.queue.startswith("amq.gen-")
            channel.queue_bind(exchange="logs", queue=result.method.queue)
            queues.append(result.method.queue)
        channel.basic_publish(exchange="logs", routing_key="", body=b"info: hello")
        for name in queues:
            assert _drain(channel, name, 1) == [b"info: hello"]
    with broker.connect() as conn:  # exclusive queues went with their connection
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare(queue=queues[0], passive=True)
        assert info.value.reply_code == 404


def test_routing_direct(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        channel.exchange_declare(exchange="direct_logs", exchange_type="direct")
        errors = channel.queue_declare(queue="", exclusive=True).method.queue
        everything = channel.queue_declare(queue="", exclusive=True).method.queue
        channel.queue_bind(exchange="direct_logs", queue=errors, routing_key="error")
        for severity in ("info", "warning", "error"):
            channel.queue_bind(exchange="direct_logs", queue=everything, routing_key=severity)
        for severity in ("info", "warning", "error"):
            channel.basic_publish("direct_logs", severity, f"{severity} msg".encode())
        assert _drain(channel, errors, 1) == [b"error msg"]
        assert _drain(channel, everything, 3) == [b"info msg", b"warning msg", b"error msg"]


def test_topics(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        channel.exchange_declare(exchange="topic_logs", exchange_type="topic")
        q1 = channel.queue_declare(queue="", exclusive=True).method.queue
        q2 = channel.queue_declare(queue="", exclusive=True).method.queue
        channel.queue_bind(exchange="topic_logs", queue=q1, routing_key="*.orange.*")
        channel.queue_bind(exchange="topic_logs", queue=q2, routing_key="*.*.rabbit")
        channel.queue_bind(exchange="topic_logs", queue=q2, routing_key="lazy.#")
        for key in (
            "quick.orange.rabbit",
            "lazy.orange.elephant",
            "quick.orange.fox",
            "lazy.brown.fox",
            "lazy.pink.rabbit",
            "quick.brown.fox",
            "orange",
            "lazy",
        ):
            channel.basic_publish("topic_logs", key, key.encode())
        assert _drain(channel, q1, 3) == [
            b"quick.orange.rabbit",
            b"lazy.orange.elephant",
            b"quick.orange.fox",
        ]
        assert _drain(channel, q2, 5) == [
            b"quick.orange.rabbit",
            b"lazy.orange.elephant",
            b"lazy.brown.fox",
            b"lazy.pink.rabbit",
            b"lazy",
        ]


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_rpc(broker: AmqpServer) -> None:
    ready = threading.Event()
    stop = threading.Event()

    def server() -> None:
        with broker.connect() as conn:
            channel = conn.channel()
            channel.queue_declare(queue="rpc_queue")

            def on_request(ch: Any, method: Any, props: Any, body: bytes) -> None:
                response = _fib(int(body))
                ch.basic_publish(
                    exchange="",
                    routing_key=props.reply_to,
                    properties=pika.BasicProperties(correlation_id=props.correlation_id),
                    body=str(response).encode(),
                )
                ch.basic_ack(delivery_tag=method.delivery_tag)

            channel.basic_qos(prefetch_count=1)
            channel.basic_consume(queue="rpc_queue", on_message_callback=on_request)
            ready.set()
            while not stop.is_set():
                conn.process_data_events(time_limit=0.1)

    thread = threading.Thread(target=server)
    thread.start()
    try:
        assert ready.wait(TIMEOUT)
        with broker.connect() as conn:
            channel = conn.channel()
            callback_queue = channel.queue_declare(queue="", exclusive=True).method.queue
            answers: dict[str, bytes] = {}

            def on_response(ch: Any, method: Any, props: Any, body: bytes) -> None:
                answers[props.correlation_id] = body

            channel.basic_consume(
                queue=callback_queue, on_message_callback=on_response, auto_ack=True
            )
            for n in (1, 10, 20):
                corr_id = str(uuid.uuid4())
                channel.basic_publish(
                    exchange="",
                    routing_key="rpc_queue",
                    properties=pika.BasicProperties(
                        reply_to=callback_queue, correlation_id=corr_id
                    ),
                    body=str(n).encode(),
                )
                deadline = time.monotonic() + TIMEOUT
                while corr_id not in answers and time.monotonic() < deadline:
                    conn.process_data_events(time_limit=0.1)
                assert answers[corr_id] == str(_fib(n)).encode()
    finally:
        stop.set()
        thread.join(TIMEOUT)
