"""Dead-lettering through an exchange with pika: rejected, expired and pushed-out
messages reach the queues bound to the dead-letter exchange, with RabbitMQ's
``x-death`` header."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-dlx"))


def _name(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


def _get(channel: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue)
        if method is not None:
            return method, props, body
        channel.connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"nothing arrived on {queue}")


def _dead_letter_setup(channel: Any, **arguments: Any) -> tuple[str, str, str]:
    """A work queue dead-lettering to a direct exchange, and the queue bound there."""
    dlx, work, dead = _name("dlx"), _name("work"), _name("dead")
    channel.exchange_declare(dlx, "direct")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx, "k")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx, **arguments})
    return dlx, work, dead


def test_a_rejected_message_goes_through_the_dead_letter_exchange_with_x_death(
    broker: AmqpServer,
) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        dlx, work, dead = _dead_letter_setup(channel, **{"x-dead-letter-routing-key": "k"})
        before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        channel.basic_publish(
            "", work, b"job", pika.BasicProperties(headers={"mine": "kept"}, delivery_mode=2)
        )
        method, _, _ = _get(channel, work)
        channel.basic_reject(method.delivery_tag, requeue=False)
        method, props, body = _get(channel, dead)
        assert body == b"job"
        assert (method.exchange, method.routing_key) == (dlx, "k")
        headers = props.headers
        assert headers["mine"] == "kept"
        [death] = headers["x-death"]
        assert death["count"] == 1
        assert death["reason"] == "rejected"
        assert death["queue"] == work
        assert death["exchange"] == ""
        assert death["routing-keys"] == [work]
        assert before <= death["time"] <= datetime.datetime.now(datetime.UTC)
        assert headers["x-first-death-queue"] == work
        assert headers["x-first-death-reason"] == "rejected"
        assert headers["x-first-death-exchange"] == ""
        assert headers["x-last-death-queue"] == work
        assert channel.queue_declare(work, passive=True).method.message_count == 0


def test_without_a_dead_letter_key_the_published_keys_are_kept(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        source = _name("src")
        channel.exchange_declare(source, "direct")
        dlx, work, dead = _dead_letter_setup(channel)
        channel.queue_bind(work, source, "k")
        channel.basic_publish(source, "k", b"nacked")
        method, _, _ = _get(channel, work)
        channel.basic_nack(method.delivery_tag, requeue=False)
        method, props, body = _get(channel, dead)
        assert body == b"nacked"
        assert (method.exchange, method.routing_key) == (dlx, "k")
        [death] = props.headers["x-death"]
        assert (death["exchange"], death["routing-keys"]) == (source, ["k"])


def test_an_expired_message_is_dead_lettered_as_expired(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        _, work, dead = _dead_letter_setup(
            channel, **{"x-dead-letter-routing-key": "k", "x-message-ttl": 50}
        )
        channel.basic_publish("", work, b"too slow")
        _, props, body = _get(channel, dead)
        assert body == b"too slow"
        assert props.headers["x-death"][0]["reason"] == "expired"
        assert props.expiration is None


def test_drop_head_overflow_dead_letters_the_oldest_as_maxlen(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        _, work, dead = _dead_letter_setup(
            channel, **{"x-dead-letter-routing-key": "k", "x-max-length": 1}
        )
        channel.basic_publish("", work, b"first")
        channel.basic_publish("", work, b"second")
        _, props, body = _get(channel, dead)
        assert body == b"first"
        assert props.headers["x-death"][0]["reason"] == "maxlen"
        assert _get(channel, work)[2] == b"second"


def test_a_retry_loop_counts_each_death_per_queue_and_reason(broker: AmqpServer) -> None:
    """The delay-and-retry pattern: rejected from work into retry, expired from retry back
    into work; x-death keeps one entry per (queue, reason), newest first, counting."""
    with broker.connect() as conn:
        channel = conn.channel()
        work, retry = _name("work"), _name("retry")
        channel.queue_declare(
            work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": retry}
        )
        channel.queue_declare(
            retry,
            arguments={
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": work,
                "x-message-ttl": 20,
            },
        )
        channel.basic_publish("", work, b"flaky")
        method, _, _ = _get(channel, work)
        channel.basic_reject(method.delivery_tag, requeue=False)
        method, props, _ = _get(channel, work)
        deaths = [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]
        assert deaths == [(retry, "expired", 1), (work, "rejected", 1)]
        channel.basic_reject(method.delivery_tag, requeue=False)
        method, props, _ = _get(channel, work)
        deaths = [(d["queue"], d["reason"], d["count"]) for d in props.headers["x-death"]]
        assert deaths == [(retry, "expired", 2), (work, "rejected", 2)]
        assert props.headers["x-first-death-reason"] == "rejected"
        assert props.headers["x-last-death-reason"] == "expired"
        channel.basic_ack(method.delivery_tag)


def test_an_expiry_loop_without_a_rejection_is_dropped(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        a, b, probe = _name("a"), _name("b"), _name("probe")
        for here, there in ((a, b), (b, a)):
            channel.queue_declare(
                here,
                arguments={
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": there,
                    "x-message-ttl": 20,
                },
            )
        channel.basic_publish("", a, b"round and round")
        channel.queue_declare(probe)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            counts = [channel.queue_declare(q, passive=True).method.message_count for q in (a, b)]
            if counts == [0, 0]:
                break
            conn.process_data_events(time_limit=0.05)
        assert counts == [0, 0]
