"""AMQP under chute's users and roles (declare → create, publish → send, consume and get →
consume, delete and purge → delete), and what ``chute stat`` and ``/metrics`` show of
AMQP clients."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from .amqp_support import AmqpServer, serve
from .conftest import free_port

CONFIG = """
[users.admin]
password = "adminpw"
roles = ["admin"]

[users.bob]
password = "bobpw"
roles = ["ok"]

[roles.ok]
create = ["queue:ok.*"]
send = ["queue:ok.*"]
consume = ["queue:ok.*"]
delete = ["queue:ok.*"]
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    tmp = tmp_path_factory.mktemp("amqp-access")
    config = tmp / "chute.toml"
    config.write_text(CONFIG)
    yield from serve(tmp, "--config", str(config))


def _as(broker: AmqpServer, user: str, password: str) -> pika.BlockingConnection:
    return broker.connect(credentials=pika.PlainCredentials(user, password))


def test_each_action_needs_its_permission(broker: AmqpServer) -> None:
    with _as(broker, "admin", "adminpw") as admin:
        admin.channel().queue_declare("secret")
    with _as(broker, "bob", "bobpw") as bob:
        channel = bob.channel()
        channel.queue_declare("ok.jobs")
        channel.basic_publish("", "ok.jobs", b"mine")
        method, _, body = channel.basic_get("ok.jobs")
        assert body == b"mine"
        channel.basic_ack(method.delivery_tag)
        channel.queue_purge("ok.jobs")
        channel.queue_delete("ok.jobs")
        refusals: tuple[Callable[[Any], object], ...] = (
            lambda ch: ch.queue_declare("other"),
            lambda ch: ch.basic_get("secret"),
            lambda ch: ch.basic_consume("secret", lambda *a: None),
            lambda ch: ch.queue_delete("secret"),
            lambda ch: ch.queue_purge("secret"),
        )
        for refused in refusals:
            channel = bob.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                refused(channel)
            assert info.value.reply_code == 403
        channel = bob.channel()
        channel.basic_publish("", "secret", b"not allowed")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.basic_qos(prefetch_count=1)  # a round trip: the close arrives first
        assert info.value.reply_code == 403
    with _as(broker, "admin", "adminpw") as admin:
        assert admin.channel().queue_declare("secret", passive=True).method.message_count == 0


def test_a_wrong_password_is_refused(broker: AmqpServer) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        _as(broker, "bob", "wrong")
    assert "403" in str(info.value)


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AmqpServer, int]]:
    http_port = free_port()
    for srv in serve(tmp_path_factory.mktemp("amqp-stat"), "--http-port", str(http_port)):
        yield srv, http_port


def test_chute_stat_and_metrics_show_amqp_clients(
    open_broker: tuple[AmqpServer, int], tmp_path: Path
) -> None:
    broker, http_port = open_broker
    queue = f"stat.{uuid.uuid4().hex[:6]}"
    with broker.connect() as conn, broker.connect():
        channel = conn.channel()
        channel.queue_declare(queue)
        channel.basic_consume(queue, lambda *a: None)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "chute.cli",
                "stat",
                f"queue:{queue}",
                "--json",
                "--url",
                broker.server.url,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout)
        assert stats["connections"] >= 2
        row = next(d for d in stats["destinations"] if d["address"] == f"queue:{queue}")
        assert row["consumers"] == 1
        url = f"http://127.0.0.1:{http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            metrics = response.read().decode()
        line = next(x for x in metrics.splitlines() if 'chute_connections{protocol="AMQP"' in x)
        assert float(line.rsplit(" ", 1)[1]) >= 2
