"""Producers resend what was not confirmed when their broker goes, and the broker drops a
resend it already stored (duplicate detection by message id, per producer, kept in the
journal): real ``chute serve`` processes killed with ``kill -9`` and started again on
their journal, or a URL's other node; both clients."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import chute
from chute.errors import TransactionError
from tests.integration.freeze import freeze

from . import sync_aio
from .conftest import ChuteServer, start_server

WAIT = 30.0
FAILOVER = "failover=30"

Connect = sync_aio.Connect


connect = sync_aio.connect_fixture(timeout=10)


class Broker:
    """One broker, killed and started again on its journal and port."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.server = start_server(tmp_path)

    @property
    def url(self) -> str:
        return f"{self.server.url}?{FAILOVER}"

    def restart(self) -> None:
        """``kill -9``, then start again on the same journal and port."""
        self.server.stop(signal.SIGKILL)
        self.server = start_server(
            self.tmp_path, port=self.server.port, data_dir=self.server.data_dir
        )

    def stop(self) -> None:
        if self.server.process.poll() is None:
            self.server.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.stop()


def restart_while_sending(
    broker: Broker, count: int, send: Callable[[int], object], flush: Callable[[], object]
) -> None:
    """``send(n)`` for each ``n`` of ``range(count)``, then ``flush()``, on a thread of
    their own; the broker is killed -9 and started again once a third was sent. Fails
    unless the sends then go on and end, without an error, within the wait."""
    sent = 0
    progress = threading.Condition()
    failure: list[BaseException] = []

    def produce() -> None:
        nonlocal sent
        try:
            for n in range(count):
                send(n)
                with progress:
                    sent = n + 1
                    progress.notify_all()
            flush()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failure.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    with progress:
        assert progress.wait_for(lambda: sent >= count // 3 or failure, WAIT)
    broker.restart()
    producer.join(2 * WAIT)
    assert not producer.is_alive()
    assert not failure, failure


def drain(url: str, address: str) -> list[bytes]:
    """Every message ``address`` holds, consumed: on a connection of its own."""
    got: list[bytes] = []
    with chute.connect(url) as conn, conn.session(ack="auto") as s, s.consumer(address) as c:
        while (m := c.receive(1.0)) is not None:
            got.append(m.message.body)
    return got


def held(url: str, address: str) -> list[bytes]:
    with chute.connect(url) as conn, conn.session() as s:
        return [m.body for m in s.browse(address)]


@pytest.mark.parametrize("window", [0, 8], ids=["synchronous", "windowed"])
def test_a_producer_whose_broker_is_killed_mid_stream_stores_each_message_once(
    broker: Broker, connect: Connect, window: int
) -> None:
    """The broker is killed -9 while the producer sends and started again on its journal:
    the producer's sends wait, go on, and every message is stored exactly once."""
    count = 600
    conn = connect(broker.url)
    session = conn.session(confirm_window=window)
    restart_while_sending(
        broker,
        count,
        lambda n: session.send("queue:stream", str(n), id=f"msg-{n}"),
        session.flush,
    )
    bodies = drain(broker.server.url, "queue:stream")
    assert sorted(bodies, key=int) == [str(n).encode() for n in range(count)]
    assert len(bodies) == count  # none stored twice


def test_a_bulk_producer_whose_broker_is_killed_stores_each_batch_once(
    broker: Broker, connect: Connect
) -> None:
    """``send_many`` with a confirm window: each request's messages are stored all or
    none, and a request resent after the restart is recognised by its first id."""
    batches = 60
    conn = connect(broker.url)
    session = conn.session(confirm_window=4)
    restart_while_sending(
        broker,
        batches,
        lambda b: session.send_many("queue:bulk", [str(10 * b + i) for i in range(10)]),
        session.flush,
    )
    bodies = drain(broker.server.url, "queue:bulk")
    assert sorted(bodies, key=int) == [str(n).encode() for n in range(10 * batches)]


def test_a_resend_of_what_the_broker_stored_before_a_restart_is_dropped(
    broker: Broker, connect: Connect
) -> None:
    """A message stored (and even consumed) before the broker died, sent again by the same
    producer with the same id on the broker started again, is confirmed and not stored."""
    conn = connect(broker.url)
    session = conn.session()
    session.send("queue:once", "first", id="id-1")
    session.send("queue:gone", "consumed", id="id-2")
    assert drain(broker.server.url, "queue:gone") == [b"consumed"]
    broker.restart()
    session.send("queue:once", "first", id="id-1")  # the session resumes: same producer
    session.send("queue:gone", "consumed", id="id-2")
    session.send("queue:once", "second", id="id-3")
    assert held(broker.server.url, "queue:once") == [b"first", b"second"]
    assert held(broker.server.url, "queue:gone") == []


def test_another_producer_s_message_with_the_same_id_is_stored(
    broker: Broker, connect: Connect
) -> None:
    conn = connect(broker.url)
    conn.session().send("queue:ids", "a", id="same")
    conn.session().send("queue:ids", "b", id="same")
    assert held(broker.server.url, "queue:ids") == [b"a", b"b"]


def test_a_transaction_in_progress_fails_with_an_error_that_says_to_retry_it(
    broker: Broker, connect: Connect
) -> None:
    conn = connect(broker.url)
    session = conn.session(transacted=True)
    session.send("queue:tx", "lost-1")
    session.send("queue:tx", "lost-2")
    broker.restart()
    session.send("queue:tx", "after the loss")
    with pytest.raises(TransactionError, match="retry the transaction"):
        session.commit()
    session.send("queue:tx", "retried-1")  # the retry: a new transaction, on the new broker
    session.send("queue:tx", "retried-2")
    session.commit()
    assert held(broker.server.url, "queue:tx") == [b"retried-1", b"retried-2"]


def test_a_consumer_gets_its_unacked_messages_again_flagged_redelivered(
    broker: Broker, connect: Connect
) -> None:
    conn = connect(broker.url)
    producer = conn.session()
    for n in range(3):
        producer.send("queue:work", f"job-{n}")
    consumer = conn.session(ack="client").consumer("queue:work", prefetch=10)
    first = [consumer.receive(WAIT) for _ in range(3)]
    assert all(m is not None and not m.redelivered for m in first)
    producer.send("queue:other", "synced")  # confirmed: the delivery marks before it are too
    broker.restart()
    again = [consumer.receive(WAIT) for _ in range(3)]
    assert [m.message.body if m else None for m in again] == [b"job-0", b"job-1", b"job-2"]
    assert all(m is not None and m.redelivered for m in again)
    assert again[-1] is not None
    again[-1].ack()
    deadline = time.monotonic() + WAIT
    while held(broker.server.url, "queue:work"):
        assert time.monotonic() < deadline, "the acks on the new broker did not arrive"


def test_a_producer_moves_to_another_node_of_the_url_and_resends(
    two_nodes: tuple[ChuteServer, ChuteServer], connect: Connect
) -> None:
    """Its node stops answering with a send unconfirmed, then dies: the connection moves
    to the URL's other node and the send is stored there."""
    first, second = two_nodes
    conn = connect(f"{first.url},127.0.0.1:{second.port}?order=listed")
    session = conn.session(confirm_window=10)
    session.send("queue:q", "confirmed", id="c-1")
    session.flush()
    freeze(first.process)
    session.send("queue:q", "unconfirmed", id="c-2")
    assert session.unconfirmed == 1
    first.stop(signal.SIGKILL)
    session.flush()  # resent on the second node
    assert conn.node == f"127.0.0.1:{second.port}"
    session.send("queue:q", "after the move", id="c-3")
    session.flush()
    assert held(second.url, "queue:q") == [b"unconfirmed", b"after the move"]
