"""The blocking client against a fake broker on a real socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator

import pytest

import chute
from chute.client.blocking import BlockingConnection, connect
from chute.client.link import open_link
from chute.client.url import parse_url
from chute.errors import (
    AuthenticationFailed,
    ConnectError,
    ConsumerError,
    DestinationFull,
    RequestTimeout,
)
from chute.message import Byte, Float
from chute.protocol import packets as p

from .fake_broker import FakeBroker


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    b = FakeBroker()
    yield b
    b.close()


@pytest.fixture
def conn(broker: FakeBroker) -> Iterator[BlockingConnection]:
    with connect(broker.url, client_id="c1", timeout=5) as c:
        yield c


def wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_send_and_receive(conn: BlockingConnection, broker: FakeBroker) -> None:
    assert conn.connection_id == "fake-1"
    with conn.session(ack="client") as s:
        props = {"region": "eu", "n": Byte(3), "f": Float(0.5), "ok": True}
        s.send("queue:orders", b"hello", priority=7, properties=props, correlation_id="c")
        s.send("orders", "text body", persistent=False, type="t", reply_to="queue:r")
        c = s.consumer("queue:orders", prefetch=10)
        m1 = c.receive(timeout=5)
        m2 = c.receive(timeout=5)
        assert m1 is not None
        assert m2 is not None
        assert (m1.body, m1.priority, m1.correlation_id, m1.persistent) == (
            b"hello",
            7,
            "c",
            True,
        )
        assert m1.properties == props
        assert type(m1.properties["n"]) is Byte
        assert (m2.text, m2.type, m2.reply_to, m2.kind) == (
            "text body",
            "t",
            "queue:r",
            chute.BodyKind.TEXT,
        )
        assert (m1.redelivered, m1.delivery_count, m1.timestamp) == (False, 0, 1000)
        assert m1.seq == 1
        m2.ack()
        assert c.receive(timeout=0.05) is None
    wait_for(lambda: broker.packets(p.Ack))
    ack = broker.packets(p.Ack)[0]
    assert isinstance(ack, p.Ack)
    assert (ack.seq, ack.cumulative, ack.credit) == (2, True, 2)


def test_persistent_send_waits_for_the_broker(conn: BlockingConnection, broker: FakeBroker) -> None:
    with conn.session() as s:
        s.send("queue:a", b"x")
        assert len(broker.queues["queue:a"]) == 1  # stored before send() returned


def test_one_way_sends_are_batched(conn: BlockingConnection, broker: FakeBroker) -> None:
    n = 5000
    with conn.session() as s:
        for i in range(n):
            s.send("queue:batch", str(i), persistent=False)
        s.send("queue:batch", b"last")  # a request: flushes and waits behind the others
    assert len(broker.queues["queue:batch"]) == n + 1
    assert broker.connections[0].reads < n / 10


def test_one_way_error_surfaces_on_the_next_call(conn: BlockingConnection) -> None:
    with conn.session() as s:
        s.send("queue:full", b"x", persistent=False)

        def keep_sending() -> None:
            for _ in range(200):
                s.send("queue:ok", b"y", persistent=False)
                time.sleep(0.01)

        with pytest.raises(DestinationFull):
            keep_sending()


def test_request_error_is_raised_by_its_class(conn: BlockingConnection) -> None:
    with conn.session() as s, pytest.raises(DestinationFull, match="full"):
        s.send("queue:full", b"x")


def test_request_timeout(broker: FakeBroker) -> None:
    # 1 s, not less: under load the fake broker's thread may take a few tenths of a
    # second over the connect and the send that is answered
    with chute.connect(broker.url, timeout=1.0) as c, c.session() as s:
        with pytest.raises(RequestTimeout):
            s.send("queue:silent", b"x")
        s.send("queue:a", b"still works")


def test_connection_level_error_wakes_every_waiter(conn: BlockingConnection) -> None:
    s = conn.session()
    c = s.consumer("queue:empty")
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            c.receive(timeout=10)
        except ConnectError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    with pytest.raises(ConnectError, match="broker going away"):
        s.send("queue:kill", b"x")
    waiter.join(5)
    assert len(errors) == 1
    assert "broker going away" in str(errors[0])
    assert conn.closed
    with pytest.raises(ConnectError):
        conn.stat()


def test_management_calls(conn: BlockingConnection, broker: FakeBroker) -> None:
    with conn.session() as s:
        for i in range(3):
            s.send("queue:b", f"m{i}")
        browsed = s.browse("queue:b", limit=2)
        assert [m.text for m in browsed] == ["m0", "m1"]
        assert [m.text for m in s.browse("queue:b")] == ["m0", "m1", "m2"]  # two pages
        walk = s.iter_browse("queue:b")
        assert isinstance(walk, Generator)
        assert next(walk).text == "m0"
        walk.close()  # given up: the request for the next page is forgotten
        assert [m.text for m in s.iter_browse("queue:b", page_messages=1)] == ["m0", "m1", "m2"]
        assert len(broker.packets(p.BrowseFetch)) == 1 + 2 + 2 + 3
        assert conn.stat() == {"queues": {"queue:b": 3}}
        assert s.temporary_queue() == "queue:__tmp__.fake-1.1"
        s.unsubscribe("sub")
        s.callback("topic:t", "cb", "queue:out")
    assert broker.packets(p.Unsubscribe) == [p.Unsubscribe("sub")]


def test_transactions(broker: FakeBroker) -> None:
    with chute.connect(broker.url) as c, c.session(transacted=True) as s:
        s.send("queue:t", b"x")
        s.commit()
        s.rollback()
    with chute.connect(broker.url) as c, c.session() as s, pytest.raises(chute.TransactionError):
        s.commit()


def test_iteration_stops_when_the_consumer_closes(
    conn: BlockingConnection, broker: FakeBroker
) -> None:
    with conn.session() as s:
        for i in range(3):
            s.send("queue:it", str(i))
        c = s.consumer("queue:it", prefetch=1)
        got: list[str] = []
        for m in c:
            got.append(m.text)
            if len(got) == 3:
                c.close()
        assert got == ["0", "1", "2"]
        with pytest.raises(ConsumerError):
            c.receive(timeout=0)


def test_close_from_another_thread_wakes_receive(conn: BlockingConnection) -> None:
    s = conn.session()
    c = s.consumer("queue:none")
    threading.Timer(0.1, c.close).start()
    with pytest.raises(ConsumerError):
        c.receive(timeout=5)


def test_prefetch_window_and_credit(conn: BlockingConnection, broker: FakeBroker) -> None:
    with conn.session(ack="auto") as s:
        for i in range(20):
            s.send("queue:w", str(i))
        c = s.consumer("queue:w", prefetch=4)
        got = [c.receive(timeout=5) for _ in range(20)]
        assert [m.text for m in got if m is not None] == [str(i) for i in range(20)]


def test_connect_errors(broker: FakeBroker) -> None:
    with pytest.raises(AuthenticationFailed, match="bad login"):
        chute.connect(broker.url, login="bad", timeout=2)
    with pytest.raises(ConnectError, match="cannot connect"):
        chute.connect("chute://127.0.0.1:1", timeout=2)
    with pytest.raises(ConnectError, match="cannot"):
        chute.connect("ws://127.0.0.1:1", timeout=2)
    with pytest.raises(ConnectError, match="cannot connect"):
        chute.connect("http://127.0.0.1:1", timeout=2)


def test_close_is_idempotent_and_quiet(broker: FakeBroker) -> None:
    c = chute.connect(broker.url)
    s = c.session()
    cons = s.consumer("queue:x")
    c.close()
    c.close()
    s.close()
    cons.close()
    assert c.closed
    with pytest.raises(ConnectError):
        c.session()


def test_broker_vanishing_fails_pending_requests(broker: FakeBroker) -> None:
    c = chute.connect(broker.url, timeout=5)
    s = c.session()
    threading.Timer(0.1, broker.close).start()
    with pytest.raises(ConnectError):
        s.send("queue:silent", b"x")
    c.close()


def test_heartbeats(broker: FakeBroker) -> None:
    broker.heartbeat_ms = 100
    with chute.connect(broker.url, heartbeat=0.1) as c:
        wait_for(lambda: len(broker.packets(p.Ping)) >= 2)
        assert not c.closed


def test_a_burst_of_one_way_output_notifies_the_sleeping_writer_once(broker: FakeBroker) -> None:
    link = open_link(parse_url(broker.url), 5, None)
    try:
        link.handshake("c1", None, None, 0)
        notified: list[int] = []
        notify = link._writer_cond.notify

        def counting(n: int = 1) -> None:
            notified.append(n)
            notify(n)

        link._writer_cond.notify = counting  # type: ignore[method-assign]
        wait_for(lambda: link._writer_waiting)
        with link._lock:
            assert link._writer_waiting
            for _ in range(3):
                link._nudge()
            assert not link._writer_waiting
        assert notified == [1]
    finally:
        link.close()


def test_a_broker_older_than_move_says_so(broker: FakeBroker) -> None:
    with chute.connect(broker.url) as conn, pytest.raises(ConnectError) as info:
        conn.move("queue:a", "queue:b")
    assert str(info.value) == "this broker does not support move; upgrade it"
    with chute.connect(broker.url) as conn, pytest.raises(ConnectError) as info:
        conn.retry_dead_letters()
    assert str(info.value) == "this broker does not support dead-letter retry; upgrade it"
