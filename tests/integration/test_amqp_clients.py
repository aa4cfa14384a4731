"""kombu (Celery's transport, over py-amqp) and aio-pika (over aiormq and pamqp) against
chute's AMQP listener, unchanged."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import aio_pika
import kombu
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-clients"))


def test_kombu_producer_and_consumer(broker: AmqpServer) -> None:
    name = f"kombu.{uuid.uuid4().hex[:8]}"
    exchange = kombu.Exchange(name, type="direct", durable=True)
    queue = kombu.Queue(name, exchange, routing_key=name, durable=True)
    with kombu.Connection(broker.url) as conn:
        producer = conn.Producer()
        for i in range(10):
            producer.publish(
                {"n": i},
                exchange=exchange,
                routing_key=name,
                declare=[queue],
                serializer="json",
                headers={"timelimit": [None, None], "eta": None, "retries": i},
            )
        got: list[dict[str, int]] = []

        def on_message(body: dict[str, int], message: kombu.Message) -> None:
            assert message.headers["timelimit"] == [None, None]
            assert message.headers["retries"] == body["n"]
            got.append(body)
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], prefetch_count=4):
            while len(got) < 10:
                conn.drain_events(timeout=TIMEOUT)
    assert got == [{"n": i} for i in range(10)]


def test_kombu_simple_queue_get_and_requeue(broker: AmqpServer) -> None:
    name = f"simple.{uuid.uuid4().hex[:8]}"
    with kombu.Connection(broker.url) as conn:
        simple = conn.SimpleQueue(name)
        simple.put({"hello": "world"})
        message = simple.get(block=True, timeout=TIMEOUT)
        assert message.payload == {"hello": "world"}
        message.requeue()
        message = simple.get(block=True, timeout=TIMEOUT)
        assert message.payload == {"hello": "world"}
        message.ack()
        assert simple.qsize() == 0
        simple.close()


def test_kombu_fanout_with_pidbox_style_queues(broker: AmqpServer) -> None:
    """Celery's remote-control shape: a non-durable fanout exchange and exclusive,
    auto-delete queues named like ``celery@host.celery.pidbox`` with x-expires and
    x-message-ttl, consumed no-ack."""
    tag = uuid.uuid4().hex[:6]
    exchange = kombu.Exchange(f"{tag}.pidbox", type="fanout", durable=False)
    queues = [
        kombu.Queue(
            f"celery@host{i}.{tag}.celery.pidbox",
            exchange,
            exclusive=True,
            auto_delete=True,
            durable=False,
            queue_arguments={"x-expires": 10000, "x-message-ttl": 300000},
        )
        for i in range(2)
    ]
    with kombu.Connection(broker.url) as conn:
        got: list[str] = []
        with conn.Consumer(queues, callbacks=[lambda body, m: got.append(body)], no_ack=True):
            conn.Producer().publish("ping", exchange=exchange, routing_key="")
            while len(got) < 2:
                conn.drain_events(timeout=TIMEOUT)
    assert got == ["ping", "ping"]


def test_aio_pika_confirms_mandatory_and_iterator(broker: AmqpServer) -> None:
    async def run() -> list[bytes]:
        connection = await aio_pika.connect_robust(broker.url)
        async with connection:
            # publisher confirms are on by default
            channel = await connection.channel(on_return_raises=True)
            queue = await channel.declare_queue(f"aio.{uuid.uuid4().hex[:8]}")
            for i in range(5):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"m{i}".encode(), headers={"i": i}),
                    routing_key=queue.name,
                )
            with pytest.raises(aio_pika.exceptions.DeliveryError):
                await channel.default_exchange.publish(
                    aio_pika.Message(b"nowhere"), routing_key="no-such-queue-" + queue.name
                )
            got: list[bytes] = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        assert message.headers["i"] == len(got)
                        got.append(message.body)
                    if len(got) == 5:
                        break
            return got

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2)) == [f"m{i}".encode() for i in range(5)]


def test_aio_pika_topic_exchange_and_rpc_reply_queue(broker: AmqpServer) -> None:
    async def run() -> bytes:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(
                f"aio.topic.{uuid.uuid4().hex[:6]}", aio_pika.ExchangeType.TOPIC
            )
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(exchange, routing_key="a.*.c")
            await exchange.publish(aio_pika.Message(b"miss"), routing_key="a.b.d", mandatory=False)
            await exchange.publish(aio_pika.Message(b"hit"), routing_key="a.b.c")
            message = await queue.get(timeout=TIMEOUT)
            assert message is not None
            await message.ack()
            return message.body

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2)) == b"hit"
