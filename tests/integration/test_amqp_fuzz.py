"""Hostile bytes at chute's AMQP listener over real sockets: every bad frame is refused
with its reply code (``connection.close`` for hard errors, ``channel.close`` for soft
ones), never a hang, and the broker and a bystander client carry on."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from chute.amqp.codec import PROTOCOL_HEADER, content, frame_bytes

from .amqp_support import TIMEOUT, AmqpServer, serve


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpServer]:
    yield from serve(tmp_path_factory.mktemp("amqp-fuzz"))


@pytest.fixture(scope="module")
def bystander(broker: AmqpServer) -> Iterator[Any]:
    conn = broker.connect()
    channel = conn.channel()
    channel.queue_declare("fuzz.bystander")
    yield channel
    conn.close()


class Raw:
    """A client speaking AMQP frame by frame over a socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, method: Any) -> None:
        self.send(frame.marshal(method, channel))

    def read(self) -> tuple[int, Any] | None:
        """The next frame (None: the broker closed the connection)."""
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack_from(">I", self.buf, 3)[0]
                if len(self.buf) >= size + 8:
                    used, channel, decoded = frame.unmarshal(self.buf[: size + 8])
                    self.buf = self.buf[used:]
                    return channel, decoded
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def read_method(self, kind: type) -> Any:
        while True:
            got = self.read()
            assert got is not None, f"closed while waiting for {kind.__name__}"
            if isinstance(got[1], kind):
                return got[1]

    def open(self) -> Raw:
        self.send(PROTOCOL_HEADER)
        self.read_method(commands.Connection.Start)
        self.method(
            0,
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
            ),
        )
        tune = self.read_method(commands.Connection.Tune)
        self.method(0, commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        self.method(0, commands.Connection.Open(virtual_host="/"))
        self.read_method(commands.Connection.OpenOk)
        self.method(1, commands.Channel.Open())
        self.read_method(commands.Channel.OpenOk)
        return self

    def closed_with(self) -> tuple[str, int]:
        """What the broker closed with: ("connection"|"channel", reply code)."""
        while True:
            got = self.read()
            assert got is not None, "closed without connection.close"
            if isinstance(got[1], commands.Connection.Close):
                self.method(0, commands.Connection.CloseOk())
                return "connection", got[1].reply_code or 0
            if isinstance(got[1], commands.Channel.Close):
                return "channel", got[1].reply_code or 0

    def close(self) -> None:
        self.sock.close()


def _still_works(channel: Any, broker: AmqpServer, tag: str) -> None:
    assert broker.server.process.poll() is None, "the broker died:\n" + broker.server.output
    channel.basic_publish("", "fuzz.bystander", tag.encode())
    _, _, body = channel.basic_get("fuzz.bystander", auto_ack=True)
    assert body == tag.encode()


def _publish(channel: int) -> bytes:
    return frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), channel)


BAD: list[tuple[str, bytes, tuple[str, int]]] = [
    (
        "frame end",
        frame_bytes(1, 1, b"\x00\x3c\x00\x0a" + b"\x00" * 7)[:-1] + b"\x00",
        ("connection", 501),
    ),
    ("unknown frame type", frame_bytes(9, 1, b""), ("connection", 501)),
    ("oversized frame", struct.pack(">BHI", 3, 1, 10 << 20), ("connection", 501)),
    ("unknown method", frame_bytes(1, 1, b"\x00\x63\x00\x01"), ("connection", 503)),
    ("short method", frame_bytes(1, 1, b"\x00"), ("connection", 502)),
    (
        "header without publish",
        frame_bytes(2, 1, b"\x00\x3c\x00\x00" + b"\x00" * 10),
        ("connection", 505),
    ),
    ("body without publish", frame_bytes(3, 1, b"xyz"), ("connection", 505)),
    (
        "method inside content",
        _publish(1) + frame.marshal(commands.Basic.Qos(), 1),
        ("connection", 505),
    ),
    ("unopened channel", frame.marshal(commands.Basic.Qos(), 5), ("connection", 504)),
    ("channel over channel_max", frame.marshal(commands.Channel.Open(), 4000), ("connection", 530)),
    ("channel opened twice", frame.marshal(commands.Channel.Open(), 1), ("connection", 504)),
    ("heartbeat on a channel", frame_bytes(8, 1, b""), ("connection", 503)),
    (
        "server method from a client",
        frame.marshal(commands.Basic.ConsumeOk(consumer_tag="x"), 1),
        ("connection", 503),
    ),
    (
        "unknown delivery tag",
        frame.marshal(commands.Basic.Ack(delivery_tag=42), 1),
        ("channel", 406),
    ),
    (
        "immediate",
        _publish(1).replace(b"\x01q\x00", b"\x01q\x02") + content(1, {}, b"", 4096),
        ("connection", 540),
    ),
    ("prefetch size", frame.marshal(commands.Basic.Qos(prefetch_size=10), 1), ("connection", 540)),
    (
        "exchange type",
        frame.marshal(commands.Exchange.Declare(exchange="fz", exchange_type="nonsense"), 1),
        ("channel", 406),
    ),
    (
        "declare default exchange",
        frame.marshal(commands.Exchange.Declare(exchange=""), 1),
        ("channel", 403),
    ),
    (
        "recover without requeue",
        frame.marshal(commands.Basic.Recover(requeue=False), 1),
        ("connection", 540),
    ),
    ("tx.commit without tx.select", frame.marshal(commands.Tx.Commit(), 1), ("channel", 406)),
]


@pytest.mark.parametrize(("what", "data", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_frames_get_their_reply_code(
    broker: AmqpServer, bystander: Any, what: str, data: bytes, expected: tuple[str, int]
) -> None:
    client = Raw(broker.amqp_port).open()
    try:
        client.send(data)
        assert client.closed_with() == expected
    finally:
        client.close()
    _still_works(bystander, broker, what)


def test_a_reused_consumer_tag_is_530(broker: AmqpServer, bystander: Any) -> None:
    client = Raw(broker.amqp_port).open()
    try:
        client.method(1, commands.Queue.Declare(queue="fuzz.tags"))
        client.read_method(commands.Queue.DeclareOk)
        for _ in range(2):
            client.method(1, commands.Basic.Consume(queue="fuzz.tags", consumer_tag="mine"))
        client.read_method(commands.Basic.ConsumeOk)
        assert client.closed_with() == ("connection", 530)
    finally:
        client.close()
    _still_works(bystander, broker, "tags")


def test_a_wrong_protocol_header_gets_ours_back(broker: AmqpServer) -> None:
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=TIMEOUT)
    try:
        sock.sendall(b"AMQP\x01\x01\x00\x0a")
        answer = b""
        while chunk := sock.recv(100):
            answer += chunk
        assert answer == PROTOCOL_HEADER
    finally:
        sock.close()


def test_a_wrong_password_is_403(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("amqp-users")
    config = tmp / "chute.toml"
    config.write_text('[users.alice]\npassword = "secret"\nroles = ["admin"]\n')
    for srv in serve(tmp, "--config", str(config)):
        client = Raw(srv.amqp_port)
        client.send(PROTOCOL_HEADER)
        client.read_method(commands.Connection.Start)
        client.method(
            0,
            commands.Connection.StartOk(mechanism="PLAIN", response="\0alice\0wrong"),
        )
        assert client.closed_with() == ("connection", 403)
        client.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.binary(min_size=1, max_size=400), st.booleans())
def test_garbage_gets_a_close_never_a_hang(
    broker: AmqpServer, bystander: Any, garbage: bytes, opened: bool
) -> None:
    client = Raw(broker.amqp_port)
    try:
        if opened:
            client.open()
        else:
            client.send(PROTOCOL_HEADER)
            client.read_method(commands.Connection.Start)
        client.send(garbage + b"\xff" * 8 + frame_bytes(9, 0, b""))  # ends in a bad frame
        while (got := client.read()) is not None:
            if isinstance(got[1], commands.Connection.Close):
                assert (got[1].reply_code or 0) >= 500
                break
            if isinstance(got[1], commands.Channel.Close):
                client.method(got[0], commands.Channel.CloseOk())
    finally:
        client.close()
    _still_works(bystander, broker, "garbage")
