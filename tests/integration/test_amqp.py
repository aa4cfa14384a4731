"""AMQP 0-9-1 with real clients: refusals with their reply codes, confirms and returns,
transactions, settling, heartbeats, and the same messages seen from STOMP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from .amqp_support import TIMEOUT, AmqpServer, serve
from .test_stomp import Client


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp"))


def _name() -> str:
    return f"q.{uuid.uuid4().hex[:10]}"


def _get(channel: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue)
        if method is not None:
            return method, props, body
        channel.connection.process_data_events(time_limit=0.05)
    raise AssertionError(f"nothing arrived on {queue}")


# -- refusals ----------------------------------------------------------------------------


def test_a_missing_queue_is_404_and_the_connection_serves_on(broker: AmqpServer) -> None:
    with broker.connect() as conn:
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare(queue="no-such-queue", passive=True)
        assert info.value.reply_code == 404
        assert "no queue 'no-such-queue'" in info.value.reply_text
        again = conn.channel()
        queue = _name()
        again.queue_declare(queue)
        again.basic_publish("", queue, b"still here")
        assert _get(again, queue)[2] == b"still here"


@pytest.mark.parametrize(
    ("action", "code"),
    [
        (lambda ch: ch.exchange_declare("missing-x", passive=True), 404),
        (lambda ch: ch.basic_publish("missing-x", "k", b"x") or ch.basic_get("nope-q"), 404),
        (lambda ch: ch.exchange_declare("amq.mine", "direct"), 403),
        (lambda ch: ch.exchange_delete("amq.direct"), 403),
        (lambda ch: ch.queue_bind("whatever", ""), 404),
        (lambda ch: ch.basic_ack(99), 406),
    ],
)
def test_channel_errors_carry_their_reply_code(broker: AmqpServer, action: Any, code: int) -> None:
    def act_then_round_trip(channel: Any) -> None:
        action(channel)
        channel.basic_qos(prefetch_count=1)  # a round trip: the close arrives first

    with broker.connect() as conn:
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            act_then_round_trip(channel)
        assert info.value.reply_code == code
        assert conn.is_open
        conn.channel().exchange_declare("amq.direct", "direct", passive=True)


def test_an_inequivalent_redeclare_is_406(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare(queue, durable=False)
        assert info.value.reply_code == 406
        assert "inequivalent arg 'durable'" in info.value.reply_text


def test_another_connections_exclusive_queue_is_405(broker: AmqpServer) -> None:
    with broker.connect() as owner, broker.connect() as other:
        queue = owner.channel().queue_declare("", exclusive=True).method.queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            other.channel().basic_consume(queue, lambda *a: None)
        assert info.value.reply_code == 405


def test_another_vhost_is_530(broker: AmqpServer) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        broker.connect(virtual_host="other")
    assert "(530)" in str(info.value)
    with broker.connect() as conn:  # the broker serves on
        assert conn.channel().is_open


# -- confirms, returns, transactions ------------------------------------------------------


def test_confirms_and_a_mandatory_return(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for i in range(50):
            channel.basic_publish(
                "", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2)
            )
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish("", "nowhere-" + queue, b"lost", mandatory=True)
        channel.basic_publish("", "nowhere-" + queue, b"dropped")  # not mandatory: fine
        assert channel.queue_declare(queue, passive=True, durable=True).method.message_count == 50


def test_transactions_commit_and_roll_back(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.tx_select()
        channel.basic_publish("", queue, b"rolled back")
        channel.tx_rollback()
        channel.basic_publish("", queue, b"committed")
        assert channel.queue_declare(queue, passive=True).method.message_count == 0
        channel.tx_commit()
        assert channel.queue_declare(queue, passive=True).method.message_count == 1
        method, _, body = _get(channel, queue)
        assert body == b"committed"
        channel.basic_ack(method.delivery_tag)
        channel.tx_rollback()  # the ack is undone: the message is back
        channel.basic_recover(requeue=True)
        method, _, body = _get(channel, queue)
        assert body == b"committed"
        assert method.redelivered
        channel.basic_ack(method.delivery_tag)
        channel.tx_commit()
        assert channel.queue_declare(queue, passive=True).method.message_count == 0


# -- settling ------------------------------------------------------------------------------


def test_nack_requeue_reject_and_multiple_ack(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        for i in range(4):
            channel.basic_publish("", queue, f"m{i}".encode())
        first = _get(channel, queue)
        channel.basic_nack(first[0].delivery_tag, requeue=True)
        again = _get(channel, queue)
        assert again[2] == b"m0"
        assert again[0].redelivered
        channel.basic_reject(again[0].delivery_tag, requeue=False)  # dead-lettered
        tags = [_get(channel, queue)[0].delivery_tag for _ in range(3)]
        channel.basic_ack(tags[-1], multiple=True)
        assert channel.basic_get(queue)[0] is None
    with broker.connect() as conn:  # nothing came back when the connection closed
        assert conn.channel().queue_declare(queue, passive=True).method.message_count == 0


def test_unacked_deliveries_come_back_when_the_channel_closes(broker: AmqpServer) -> None:
    queue = _name()
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"once")
        _get(channel, queue)
        channel.close()
        channel = conn.channel()
        method, _, body = _get(channel, queue)
        assert body == b"once"
        assert method.redelivered


def test_headers_and_properties_reach_amqp_consumers_whole(broker: AmqpServer) -> None:
    queue = _name()
    headers = {
        "retries": 3,
        "big": 1 << 40,
        "eta": None,
        "timelimit": [None, None],
        "stamps": {"a": ["x", 1]},
        "flag": True,
        "text": "ünï",
    }
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        correlation_id="corr",
        reply_to="reply",
        message_id="mid",
        type="kind",
        app_id="app",
        priority=7,
        delivery_mode=2,
        headers=headers,
    )
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"{}", props)
        _, got, body = _get(channel, queue)
    assert body == b"{}"
    assert got.headers == headers
    for field in (
        "content_type",
        "content_encoding",
        "correlation_id",
        "reply_to",
        "message_id",
        "type",
        "app_id",
        "priority",
        "delivery_mode",
    ):
        assert getattr(got, field) == getattr(props, field), field


def test_heartbeats_keep_an_idle_connection(broker: AmqpServer) -> None:
    with broker.connect(heartbeat=1) as conn:
        channel = conn.channel()
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.5)
        assert channel.is_open
        assert conn.is_open


def test_large_bodies_are_split_at_frame_max(broker: AmqpServer) -> None:
    queue = _name()
    body = bytes(range(256)) * 4000  # ~1 MB, many frames of 131072
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, body)
        assert _get(channel, queue)[2] == body


# -- interop with STOMP ---------------------------------------------------------------------


def test_amqp_and_stomp_meet_on_queues(broker: AmqpServer) -> None:
    queue = _name()
    stomp_client = Client(broker.stomp_port)
    try:
        with broker.connect() as conn:
            channel = conn.channel()
            channel.queue_declare(queue)
            stomp_client.conn.send(
                f"/queue/{queue}", b"from stomp", headers={"color": "red"}, receipt="r1"
            )
            stomp_client.receipt("r1")
            _, props, body = _get(channel, queue)
            assert body == b"from stomp"
            assert props.headers["color"] == "red"
            stomp_client.conn.subscribe(f"/queue/{queue}", id="s1", ack="auto")
            channel.basic_publish(
                "",
                queue,
                b"from amqp",
                pika.BasicProperties(headers={"n": 5}, correlation_id="c1"),
            )
            frame = stomp_client.message()
            assert frame.body == b"from amqp"
            assert frame.headers["n"] == "5"
            assert frame.headers["correlation-id"] == "c1"
    finally:
        stomp_client.close()


def test_amq_topic_meets_stomp_topics_both_ways(broker: AmqpServer) -> None:
    key = f"weather.{uuid.uuid4().hex[:6]}"
    stomp_client = Client(broker.stomp_port)
    try:
        with broker.connect() as conn:
            channel = conn.channel()
            queue = channel.queue_declare("", exclusive=True).method.queue
            channel.queue_bind(queue, "amq.topic", routing_key=key)
            stomp_client.conn.subscribe(f"/topic/{key}", id="t1", ack="auto", receipt="sub")
            stomp_client.receipt("sub")
            channel.basic_publish("amq.topic", key, b"from amqp")
            assert stomp_client.message().body == b"from amqp"
            assert _get(channel, queue)[2] == b"from amqp"  # once, through the bridge
            stomp_client.conn.send(f"/topic/{key}", b"from stomp", receipt="r2")
            stomp_client.receipt("r2")
            assert stomp_client.message().body == b"from stomp"
            assert _get(channel, queue)[2] == b"from stomp"
            assert channel.basic_get(queue)[0] is None
    finally:
        stomp_client.close()


# -- streams --------------------------------------------------------------------------------


def test_a_stream_queue_is_read_from_an_offset(broker: AmqpServer) -> None:
    name = f"s.{uuid.uuid4().hex[:8]}"
    with broker.connect() as conn:
        channel = conn.channel()
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(5):
            channel.basic_publish("", name, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
        reader = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            reader.basic_consume(name, lambda *a: None)  # no prefetch set: refused
        assert info.value.reply_code == 406
        got: list[tuple[bytes, int]] = []

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            got.append((body, props.headers["x-stream-offset"]))
            ch.basic_ack(method.delivery_tag)

        def read_from(start: str | int, want: int) -> None:
            reader = conn.channel()
            reader.basic_qos(prefetch_count=10)
            reader.basic_consume(name, on_message, arguments={"x-stream-offset": start})
            deadline = time.monotonic() + TIMEOUT
            while len(got) < want and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)
            reader.close()

        read_from("first", 5)
        assert [body for body, _ in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        offsets = [offset for _, offset in got]
        assert offsets == sorted(offsets)
        read_from(offsets[3], 7)  # again from m3's offset: nothing was consumed
        assert got[5:] == got[3:5]
