"""STOMP semantics beyond interop: NACK in transactions, shared subscriptions, bounded queues.

Driven by stomp.py against one ``chute serve`` subprocess whose configuration
bounds two queues (``block`` and ``reject`` overflow policies).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT, Client

CONFIG = """
[destinations."queue:stomp.block"]
max_messages = 2
overflow = "block"
block_timeout_ms = 1500

[destinations."queue:stomp.reject"]
max_messages = 1
overflow = "reject"
"""


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("stomp-semantics")
    config = tmp / "chute.toml"
    config.write_text(CONFIG)
    stomp_port = free_port()
    srv: ChuteServer = start_server(tmp, "--config", str(config), "--stomp-port", str(stomp_port))
    yield stomp_port
    assert srv.stop() == 0, srv.output


@pytest.fixture
def clients(port: int) -> Iterator[list[Client]]:
    opened: list[Client] = []
    yield opened
    for client in opened:
        client.close()


def _client(clients: list[Client], port: int, **kw: str) -> Client:
    client = Client(port, **kw)
    clients.append(client)
    return client


def _dead_letter(clients: list[Client], port: int, case: str) -> bytes:
    dlq = _client(clients, port)
    dlq.conn.subscribe("/queue/__sys__deadLetter", id="dlq", selector=f"case = '{case}'")
    frame = dlq.message()
    body: bytes = frame.body
    return body


def test_nack_in_a_transaction_waits_for_commit(port: int, clients: list[Client]) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/stomp.txnack", id="s", ack="client-individual")
    c.conn.send("/queue/stomp.txnack", b"one", case="txnack", receipt="sent")
    c.receipt("sent")
    first = c.message()

    tx = c.conn.begin()
    c.conn.nack(first.headers["ack"], transaction=tx)
    assert c.no_message()  # not applied before COMMIT
    c.conn.abort(tx, receipt="abort")
    c.receipt("abort")
    again = c.message()  # the aborted NACK gives the message back, like an aborted ACK
    assert (again.body, again.headers["redelivered"]) == (b"one", "true")
    assert again.headers["chute-delivery-count"] == "2"

    tx = c.conn.begin()
    c.conn.nack(again.headers["ack"], transaction=tx)
    assert c.no_message()
    c.conn.commit(tx, receipt="commit")
    c.receipt("commit")
    third = c.message()  # the committed NACK requeued it
    assert third.headers["chute-delivery-count"] == "3"

    tx = c.conn.begin()
    c.conn.nack(third.headers["ack"], transaction=tx, requeue="false")
    c.conn.commit(tx, receipt="reject")
    c.receipt("reject")
    assert c.no_message()
    assert _dead_letter(clients, port, "txnack") == b"one"


def test_nack_of_an_open_transaction_comes_back_when_the_connection_ends(
    port: int, clients: list[Client]
) -> None:
    c = _client(clients, port)
    c.conn.subscribe("/queue/stomp.txnack-lost", id="s", ack="client-individual")
    c.conn.send("/queue/stomp.txnack-lost", b"kept", receipt="sent")
    c.receipt("sent")
    frame = c.message()
    tx = c.conn.begin()
    c.conn.nack(frame.headers["ack"], transaction=tx, requeue="false", receipt="nacked")
    c.receipt("nacked")
    c.close()  # never committed
    other = _client(clients, port)
    other.conn.subscribe("/queue/stomp.txnack-lost", id="s", ack="client-individual")
    back = other.message()
    assert (back.body, back.headers["redelivered"]) == (b"kept", "true")
    other.conn.ack(back.headers["ack"])


def test_shared_subscription_competes_and_outlives_its_consumers(
    port: int, clients: list[Client]
) -> None:
    a = _client(clients, port)
    b = _client(clients, port)
    for c in (a, b):
        c.conn.subscribe(
            "/topic/stomp.shared",
            id="s",
            ack="client-individual",
            durable="true",
            receipt="sub",
            **{"shared-subscription-name": "workers", "prefetch-count": "1"},
        )
        c.receipt("sub")
    producer = _client(clients, port)
    for i in range(6):
        producer.conn.send("/topic/stomp.shared", f"m{i}".encode(), receipt=f"r{i}")
        producer.receipt(f"r{i}")
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    deadline = time.monotonic() + TIMEOUT
    while len(got["a"]) + len(got["b"]) < 6 and time.monotonic() < deadline:
        for name, c in (("a", a), ("b", b)):
            try:
                frame = c.message(timeout=0.05)
            except queue.Empty:
                continue
            got[name].append(frame.body)
            c.conn.ack(frame.headers["ack"])
    assert sorted(got["a"] + got["b"]) == [f"m{i}".encode() for i in range(6)]
    assert got["a"], "each consumer of a shared subscription gets a share"
    assert got["b"], "each consumer of a shared subscription gets a share"
    # durable and shared: it keeps messages while nobody is subscribed
    a.close()
    b.close()
    producer.conn.send("/topic/stomp.shared", b"while away", receipt="away")
    producer.receipt("away")
    back = _client(clients, port)
    back.conn.subscribe(
        "/topic/stomp.shared",
        id="s",
        durable="true",
        **{"shared-subscription-name": "workers"},
    )
    assert back.message().body == b"while away"


def test_block_policy_holds_the_producer_until_there_is_room(
    port: int, clients: list[Client]
) -> None:
    producer = _client(clients, port)
    for i in range(2):
        producer.conn.send("/queue/stomp.block", f"m{i}".encode(), receipt=f"r{i}")
        producer.receipt(f"r{i}")
    producer.conn.send("/queue/stomp.block", b"m2", receipt="r2")  # the queue is full
    with pytest.raises(queue.Empty):
        producer.receipts.get(timeout=0.3)
    consumer = _client(clients, port)
    consumer.conn.subscribe("/queue/stomp.block", id="s", ack="client-individual")
    first = consumer.message()
    consumer.conn.ack(first.headers["ack"])
    producer.receipt("r2")  # room: the held SEND went through, in order
    bodies = [first.body]
    for _ in range(2):
        frame = consumer.message()
        bodies.append(frame.body)
        consumer.conn.ack(frame.headers["ack"])
    assert bodies == [b"m0", b"m1", b"m2"]


def test_block_policy_times_out_with_an_error_and_a_close(port: int, clients: list[Client]) -> None:
    producer = _client(clients, port)
    for i in range(2):
        producer.conn.send("/queue/stomp.block", f"t{i}".encode(), receipt=f"t{i}")
        producer.receipt(f"t{i}")
    started = time.monotonic()
    producer.conn.send("/queue/stomp.block", b"t2", receipt="t2")
    error = producer.error()
    waited = time.monotonic() - started
    assert error.headers["code"] == "destination-full"
    assert error.headers["receipt-id"] == "t2"
    assert b"overflow = block" in error.body
    assert 1.0 < waited < TIMEOUT
    assert producer.disconnected.wait(TIMEOUT)
    consumer = _client(clients, port)
    consumer.conn.subscribe("/queue/stomp.block", id="s")
    assert [consumer.message().body, consumer.message().body] == [b"t0", b"t1"]
    assert consumer.no_message()


def test_reject_policy_answers_with_an_error(port: int, clients: list[Client]) -> None:
    producer = _client(clients, port)
    producer.conn.send("/queue/stomp.reject", b"fits", receipt="ok")
    producer.receipt("ok")
    producer.conn.send("/queue/stomp.reject", b"too many", receipt="full")
    error = producer.error()
    assert (error.headers["code"], error.headers["receipt-id"]) == ("destination-full", "full")
    assert producer.disconnected.wait(TIMEOUT)
