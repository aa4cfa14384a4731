"""STOMP interop: the stomp.py client against a ``chute serve --stomp-port`` subprocess."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

import chute

from .conftest import ChuteServer, free_port, start_server

TIMEOUT = 10.0


class Client(stomp.ConnectionListener):  # type: ignore[misc]
    """A stomp.py connection whose frames land in queues the test waits on."""

    def __init__(self, port: int, version: str = "1.2", **connect: Any) -> None:
        cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11}.get(
            version, stomp.Connection12
        )
        kwargs: dict[str, Any] = {"auto_decode": False}
        if "heartbeats" in connect:
            kwargs["heartbeats"] = connect.pop("heartbeats")
        self._listen(cls([("127.0.0.1", port)], **kwargs), **connect)

    def _listen(self, conn: Any, **connect: Any) -> None:
        """Take ``conn``'s frames into this client's queues, then connect it (how every
        kind of stomp.py connection a test makes, TLS or WebSocket, becomes a Client)."""
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()
        self.errors: queue.Queue[Any] = queue.Queue()
        self.heartbeat = threading.Event()
        self.disconnected = threading.Event()
        self.order: list[str] = []  # RECEIPT and ERROR frames as they came, e.g. "RECEIPT r1"
        self.conn = conn
        conn.set_listener("", self)
        conn.connect(wait=True, **connect)

    # stomp.py callbacks (its threads)
    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.order.append(f"RECEIPT {frame.headers['receipt-id']}")
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.order.append(f"ERROR {frame.headers.get('receipt-id')}")
        self.errors.put(frame)

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def on_heartbeat(self) -> None:
        self.heartbeat.set()

    # waiting
    def message(self, timeout: float = TIMEOUT) -> Any:
        return self.messages.get(timeout=timeout)

    def no_message(self, timeout: float = 0.3) -> bool:
        try:
            frame = self.messages.get(timeout=timeout)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message {frame.headers}")

    def receipt(self, receipt_id: str) -> None:
        assert self.receipts.get(timeout=TIMEOUT) == receipt_id

    def error(self) -> Any:
        return self.errors.get(timeout=TIMEOUT)

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    tmp = tmp_path_factory.mktemp("stomp")
    stomp_port = free_port()
    srv = start_server(tmp, "--stomp-port", str(stomp_port))
    srv.stomp_port = stomp_port  # type: ignore[attr-defined]
    yield srv
    if srv.process.poll() is None:
        srv.stop()


@pytest.fixture
def port(server: ChuteServer) -> int:
    p: int = server.stomp_port  # type: ignore[attr-defined]
    return p


@pytest.fixture
def clients(port: int) -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def _client(clients: list[Client], port: int, version: str = "1.2", **kw: Any) -> Client:
    client = Client(port, version, **kw)
    clients.append(client)
    return client


def test_send_and_receive_on_a_queue_with_headers(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/plain", id="s1", ack="auto")
    c.conn.send(
        "/queue/plain",
        b"hello",
        content_type="text/plain",
        headers={
            "priority": "7",
            "correlation-id": "corr-1",
            "reply-to": "/queue/replies",
            "type": "greeting",
            "color": "red",
            "persistent": "true",
        },
        receipt="sent-1",
    )
    c.receipt("sent-1")
    frame = c.message()
    h = frame.headers
    assert frame.body == b"hello"
    assert h["destination"] == "/queue/plain"
    assert h["subscription"] == "s1"
    assert h["priority"] == "7"
    assert h["correlation-id"] == "corr-1"
    assert h["reply-to"] == "/queue/replies"
    assert h["type"] == "greeting"
    assert h["content-type"] == "text/plain"
    assert h["color"] == "red"
    assert h["redelivered"] == "false"
    assert h["chute-delivery-count"] == "1"
    assert h["persistent"] == "true"
    assert int(h["timestamp"]) > 0
    assert h["expires"] == "0"
    assert h["message-id"]
    assert "ack" not in h


def test_topic_delivers_to_every_subscriber(port: int, clients: list[Client]) -> None:
    a, b = _client(clients, port), _client(clients, port)
    a.conn.subscribe("/topic/news", id="a", receipt="sub-a")
    a.receipt("sub-a")
    b.conn.subscribe("/topic/news", id="b", receipt="sub-b")
    b.receipt("sub-b")
    for i in range(5):
        a.conn.send("/topic/news", b"n%d" % i, persistent="false")
    for sub in (a, b):
        assert [sub.message().body for _ in range(5)] == [b"n%d" % i for i in range(5)]
        assert sub.no_message()


def test_auto_ack_window_refills_as_deliveries_are_written(
    port: int, clients: list[Client]
) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/many", id="s", headers={"activemq.prefetchSize": "10"})
    count = 500
    for i in range(count):
        c.conn.send("/queue/many", b"%d" % i, persistent="false")
    assert [c.message().body for _ in range(count)] == [b"%d" % i for i in range(count)]


def test_selector_filters_a_subscription(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/sel", id="s", headers={"selector": "color = 'blue'"})
    c.conn.send("/queue/sel", b"red", color="red")
    c.conn.send("/queue/sel", b"blue", color="blue")
    assert c.message().body == b"blue"
    assert c.no_message()


def test_client_individual_nack_redelivers_with_delivery_count(
    port: int, clients: list[Client]
) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/nacked", id="s", ack="client-individual")
    c.conn.send("/queue/nacked", b"one")
    c.conn.send("/queue/nacked", b"two")
    first, second = c.message(), c.message()
    assert (first.body, second.body) == (b"one", b"two")
    c.conn.nack(first.headers["ack"], receipt="nacked")
    c.receipt("nacked")
    again = c.message()
    assert again.body == b"one"
    assert again.headers["redelivered"] == "true"
    assert again.headers["chute-delivery-count"] == "2"
    c.conn.ack(again.headers["ack"])
    c.conn.ack(second.headers["ack"], receipt="acked")
    c.receipt("acked")
    assert c.no_message()


def test_client_ack_is_cumulative(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/cumulative", id="s", ack="client")
    for i in range(3):
        c.conn.send("/queue/cumulative", b"m%d" % i)
    frames = [c.message() for _ in range(3)]
    c.conn.ack(frames[-1].headers["ack"], receipt="acked")  # settles all three
    c.receipt("acked")
    c.close()
    d = _client(clients, port)
    d.conn.subscribe("/queue/cumulative", id="s", ack="client")
    d.conn.send("/queue/cumulative", b"marker")
    assert d.message().body == b"marker"


def test_disconnect_with_unacked_messages_redelivers_them(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/unacked", id="s", ack="client-individual")
    c.conn.send("/queue/unacked", b"pending")
    assert c.message().body == b"pending"
    c.close()
    d = _client(clients, port)
    d.conn.subscribe("/queue/unacked", id="s", ack="client-individual")
    frame = d.message()
    assert frame.body == b"pending"
    assert frame.headers["redelivered"] == "true"
    assert frame.headers["chute-delivery-count"] == "2"


def test_error_frame_then_close(port: int, clients: list[Client]) -> None:
    # STOMP 1.2 §ERROR: the server closes the connection after an ERROR frame
    c = _client(clients, port)
    c.conn.subscribe("/queue/receipts", id="s", ack="client-individual", receipt="r-sub")
    c.receipt("r-sub")
    c.conn.send("/queue/receipts", b"x", receipt="r-send")  # persistent: receipt after fsync
    c.conn.send("/queue/bad..name", b"x", receipt="r-bad")
    c.conn.send("/queue/receipts", b"after the error", receipt="r-after")
    error = c.error()
    assert error.headers["receipt-id"] == "r-bad"
    assert error.headers["code"] == "invalid-address"
    assert b"invalid destination name" in error.body
    assert c.disconnected.wait(TIMEOUT), "the broker kept the connection after ERROR"
    # the receipt owed before the failing frame came first; nothing after it was acted on
    assert c.order[-2:] == ["RECEIPT r-send", "ERROR r-bad"]
    other = _client(clients, port)
    other.conn.subscribe("/queue/receipts", id="s", ack="client-individual")
    frame = other.message()  # unacked by the closed connection: it comes back
    assert frame.body == b"x"
    other.conn.ack(frame.headers["ack"])
    assert other.no_message()


def test_transaction_commit_and_abort(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/tx", id="s", ack="client-individual")
    tx = c.conn.begin()
    c.conn.send("/queue/tx", b"committed", transaction=tx)
    assert c.no_message()
    c.conn.commit(tx, receipt="commit")
    c.receipt("commit")
    frame = c.message()
    assert frame.body == b"committed"

    tx2 = c.conn.begin()
    c.conn.send("/queue/tx", b"aborted", transaction=tx2)
    c.conn.ack(frame.headers["ack"], transaction=tx2)
    c.conn.abort(tx2, receipt="abort")
    c.receipt("abort")
    again = c.message()  # the aborted ack gives the message back
    assert again.body == b"committed"
    assert again.headers["redelivered"] == "true"
    tx3 = c.conn.begin()
    c.conn.ack(again.headers["ack"], transaction=tx3)
    c.conn.commit(tx3, receipt="commit-ack")
    c.receipt("commit-ack")
    assert c.no_message()


def test_binary_body_with_nul_bytes(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/binary", id="s")
    body = bytes(range(256)) * 4 + b"\x00\x00end\x00"
    c.conn.send("/queue/binary", body)
    frame = c.message()
    assert frame.body == body
    assert frame.headers["content-length"] == str(len(body))


def test_stomp_and_native_interoperate(
    server: ChuteServer, port: int, clients: list[Client]
) -> None:
    c = _client(clients, port)
    with chute.connect(server.url) as native, native.session(ack="client") as s:
        consumer = s.consumer("queue:to-native")
        c.conn.send(
            "/queue/to-native",
            b"from stomp",
            headers={"priority": "8", "correlation-id": "k", "type": "t", "region": "eu"},
            receipt="sent",
        )
        c.receipt("sent")
        got = consumer.receive(timeout=TIMEOUT)
        assert got is not None
        assert got.body == b"from stomp"
        assert (got.priority, got.correlation_id, got.type) == (8, "k", "t")
        assert got.properties == {"region": "eu"}
        got.ack()

        c.conn.subscribe("/queue/to-stomp", id="s")
        s.send(
            "queue:to-stomp",
            "from native",
            priority=2,
            correlation_id="c2",
            reply_to="queue:answers",
            properties={"n": 42, "ok": True, "name": "x"},
        )
    frame = c.message()
    h = frame.headers
    assert frame.body == b"from native"
    assert (h["priority"], h["correlation-id"], h["reply-to"]) == ("2", "c2", "/queue/answers")
    assert (h["n"], h["ok"], h["name"]) == ("42", "true", "x")
    assert h["content-type"].startswith("text/plain")


def test_temporary_reply_queue(port: int, clients: list[Client]) -> None:
    requester, responder = _client(clients, port), _client(clients, port)
    requester.conn.subscribe("/temp-queue/answers", id="r", receipt="sub")
    requester.receipt("sub")
    responder.conn.subscribe("/queue/requests", id="q")
    requester.conn.send("/queue/requests", b"ping", headers={"reply-to": "/temp-queue/answers"})
    request = responder.message()
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/queue/__tmp__.")
    responder.conn.send(reply_to, b"pong")
    assert requester.message().body == b"pong"


def test_durable_subscription_across_reconnect(port: int, clients: list[Client]) -> None:
    headers = {"durable-subscription-name": "audit"}
    c = _client(clients, port, headers={"client-id": "auditor"})
    c.conn.subscribe("/topic/events", id="d", ack="client-individual", headers=headers)
    c.conn.send("/topic/events", b"e1")
    frame = c.message()
    c.conn.ack(frame.headers["ack"], receipt="acked")
    c.receipt("acked")
    c.close()
    p = _client(clients, port)
    p.conn.send("/topic/events", b"e2", receipt="sent")  # sent while the subscriber is away
    p.receipt("sent")
    d = _client(clients, port, headers={"client-id": "auditor"})
    d.conn.subscribe("/topic/events", id="d", ack="client-individual", headers=headers)
    assert d.message().body == b"e2"


def test_heart_beats_are_sent(port: int, clients: list[Client]) -> None:
    c = _client(clients, port, heartbeats=(0, 1000))
    assert c.heartbeat.wait(TIMEOUT)


def test_stomp_11_acks_by_message_id(port: int, clients: list[Client]) -> None:
    c = _client(clients, port, version="1.1")
    c.conn.subscribe("/queue/v11", id="s", ack="client-individual")
    c.conn.send("/queue/v11", b"a")
    frame = c.message()
    c.conn.nack(frame.headers["message-id"], subscription="s")
    again = c.message()
    assert again.headers["redelivered"] == "true"
    c.conn.ack(again.headers["message-id"], subscription="s", receipt="acked")
    c.receipt("acked")
    assert c.no_message()


def _raw_frames(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_hostile_client_gets_an_error_and_others_carry_on(port: int, clients: list[Client]) -> None:
    good = _client(clients, port)
    good.conn.subscribe("/queue/survivor", id="s", receipt="sub")
    good.receipt("sub")
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\n\n\x00")
        sock.sendall(b"\x01\x02garbage\xff\nheader\n\n\x00")
        data = _raw_frames(sock)  # the broker closes after the ERROR frame
    assert data.startswith(b"CONNECTED\n")
    assert b"\x00ERROR\n" in data
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"SEND\ndestination:/queue/x\n\nnot connected\x00")
        assert _raw_frames(sock).startswith(b"ERROR\n")
    good.conn.send("/queue/survivor", b"still here")
    assert good.message().body == b"still here"


def test_login_is_checked_against_users(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text('[users.alice]\npassword = "secret"\nroles = ["admin"]\n')
    stomp_port = free_port()
    srv = start_server(tmp_path, "--config", str(config), "--stomp-port", str(stomp_port))
    try:
        with socket.create_connection(("127.0.0.1", stomp_port), timeout=TIMEOUT) as sock:
            sock.sendall(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wrong\n\n\x00")
            assert _raw_frames(sock).startswith(b"ERROR\n")
        client = Client(stomp_port, username="alice", passcode="secret")
        client.conn.send("/queue/auth", b"ok", receipt="r")
        client.receipt("r")
        client.close()
    finally:
        srv.stop()
