"""Delivery over real TCP against a ``chute serve`` subprocess, with the Python client."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import chute
import chute.aio
from chute.errors import ChuteError, DestinationFull, InvalidAddress, InvalidSelector

from .conftest import ChuteServer, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChuteServer]:
    """One broker for the module's tests that take ``server``: none restarts or stops
    it and each uses destinations of its own (the tests that do stop a broker start
    their own)."""
    srv = start_server(tmp_path_factory.mktemp("broker"))
    yield srv
    srv.stop()


FIRST_MESSAGE = 60.0
"""Seconds a competing consumer waits for its first message: the producer starts only
once every consumer process is up, which on a loaded machine takes many seconds."""


def _consume_all(url: str, address: str, ready: Any, out: Any, idle: float) -> None:
    """A competing consumer process: take messages, from the first one on until the
    queue stays idle for ``idle`` seconds."""
    bodies: list[bytes] = []
    with chute.connect(url) as conn, conn.session(ack="client") as s:
        c = s.consumer(address, prefetch=50)
        ready.set()
        timeout = FIRST_MESSAGE
        while (m := c.receive(timeout=timeout)) is not None:
            timeout = idle
            bodies.append(m.body)
            m.ack()
    out.put(bodies)


def test_competing_consumers_get_each_message_exactly_once(server: ChuteServer) -> None:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    readies = [ctx.Event() for _ in range(3)]
    procs = [
        ctx.Process(target=_consume_all, args=(server.url, "queue:work", r, out, 3.0))
        for r in readies
    ]
    for proc in procs:
        proc.start()
    for ready in readies:
        assert ready.wait(30)
    count = 3000
    with chute.connect(server.url) as conn, conn.session() as s:
        for i in range(count):
            s.send("queue:work", b"job-%d" % i, persistent=(i % 2 == 0))
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    seen = Counter(body for bodies in results for body in bodies)
    assert len(seen) == count
    assert set(seen.values()) == {1}
    assert all(results), "every consumer should have competed for work"


def test_topic_subscribers_each_get_every_message(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        subscribers = [conn.session() for _ in range(3)]
        consumers = [s.consumer("topic:news", prefetch=100) for s in subscribers]
        with conn.session() as producer:
            for i in range(200):
                producer.send("topic:news", b"n%d" % i, persistent=False)
        for c in consumers:
            got = [c.receive(timeout=5) for _ in range(200)]
            assert [m.body for m in got if m is not None] == [b"n%d" % i for i in range(200)]
            assert c.receive(timeout=0.2) is None


def test_priority_then_fifo_and_message_fields(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session(ack="client") as s:
        for i, prio in enumerate([1, 7, 1, 9, 7]):
            s.send(
                "queue:prio",
                b"%d" % i,
                priority=prio,
                properties={"i": i, "eu": True},
                correlation_id=f"c{i}",
                type="t",
                ttl=60_000,
            )
        c = s.consumer("queue:prio", prefetch=10)
        got = [c.receive(timeout=5) for _ in range(5)]
        assert [m.body for m in got if m] == [b"3", b"1", b"4", b"0", b"2"]
        first = got[0]
        assert first is not None
        assert first.priority == 9
        assert first.properties == {"i": 3, "eu": True}
        assert first.correlation_id == "c3"
        assert first.type == "t"
        assert first.timestamp > 0
        assert first.expiration == first.timestamp + 60_000
        assert first.delivery_count == 1
        assert not first.redelivered
        last = got[-1]
        assert last is not None
        last.ack()  # cumulative: settles all five


def test_selector_and_redelivery_after_consumer_close(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        with conn.session() as s:
            s.send("queue:sel", b"us", properties={"region": "us"})
            s.send("queue:sel", b"eu", properties={"region": "eu"})
        s1 = conn.session(ack="client")
        c1 = s1.consumer("queue:sel", selector="region = 'eu'", prefetch=10)
        m = c1.receive(timeout=5)
        assert m is not None
        assert m.body == b"eu"
        s1.close()  # not acked: goes back
        with conn.session(ack="individual") as s2:
            c2 = s2.consumer("queue:sel", prefetch=10)
            bodies = {}
            for _ in range(2):
                got = c2.receive(timeout=5)
                assert got is not None
                bodies[got.body] = got
            assert bodies[b"eu"].redelivered
            assert bodies[b"eu"].delivery_count == 2
            assert not bodies[b"us"].redelivered
            for got in bodies.values():
                got.ack()


def test_errors_are_clean(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session() as s:
        with pytest.raises(InvalidAddress):
            s.send("queue:../etc", b"x")
        with pytest.raises(InvalidSelector):
            s.consumer("queue:x", selector="a = = 1")
        # the connection is still usable after errors
        s.send("queue:x", b"still fine")
        assert [m.body for m in s.browse("queue:x")] == [b"still fine"]


def test_reject_policy_reaches_the_producer(tmp_path: Any) -> None:
    config = tmp_path / "chute.toml"
    config.write_text('[destinations."queue:small"]\nmax_messages = 2\noverflow = "reject"\n')
    srv = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(srv.url) as conn, conn.session() as s:
            s.send("queue:small", b"1")
            s.send("queue:small", b"2")
            with pytest.raises(DestinationFull):
                s.send("queue:small", b"3")
            assert len(s.browse("queue:small")) == 2
    finally:
        srv.stop()


def test_transaction_commit_and_rollback(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        tx = conn.session(transacted=True)
        tx.send("queue:tx", b"a")
        with conn.session() as peek:
            assert peek.browse("queue:tx") == []
        tx.commit()
        tx.send("queue:tx", b"b")
        tx.rollback()
        with conn.session() as peek:
            assert [m.body for m in peek.browse("queue:tx")] == [b"a"]
        tx.close()


def test_stat_counts(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session(ack="client") as s:
        for i in range(3):
            s.send("queue:counted", b"%d" % i)
        c = s.consumer("queue:counted", prefetch=10)
        m = c.receive(timeout=5)
        assert m is not None
        m.ack()
        stats = conn.stat()
    row = next(d for d in stats["destinations"] if d["address"] == "queue:counted")
    assert row["enqueued"] == 3
    assert row["acked"] == 1
    assert row["depth"] == 2
    assert row["consumers"] == 1


def test_temporary_queue_request_reply(server: ChuteServer) -> None:
    with chute.connect(server.url) as requester, chute.connect(server.url) as responder:
        rs = requester.session()
        reply_to = rs.temporary_queue()
        replies = rs.consumer(reply_to)
        with responder.session() as ws:
            ws.send("queue:service", b"ping", reply_to=reply_to)
            c = ws.consumer("queue:service")
            request = c.receive(timeout=5)
            assert request is not None
            assert request.reply_to == reply_to
            ws.send(request.reply_to, b"pong", correlation_id=request.id)
            with pytest.raises(ChuteError):
                ws.consumer(reply_to)  # only its connection may consume
        reply = replies.receive(timeout=5)
        assert reply is not None
        assert reply.body == b"pong"


async def _aio_roundtrip(url: str) -> list[bytes]:
    async with chute.aio.connect(url) as conn, conn.session(ack="client") as s:
        await s.send("queue:aio", b"one")
        await s.send("queue:aio", b"two", persistent=False)
        c = await s.consumer("queue:aio")
        out = []
        for _ in range(2):
            m = await c.receive(timeout=5)
            assert m is not None
            out.append(m.body)
            m.ack()
        return out


def test_asyncio_client(server: ChuteServer) -> None:
    import asyncio

    assert asyncio.run(_aio_roundtrip(server.url)) == [b"one", b"two"]


def test_graceful_stop_returns_unacked_messages(tmp_path: Any) -> None:
    srv = start_server(tmp_path)
    with chute.connect(srv.url) as conn, conn.session(ack="client") as s:
        s.send("queue:g", b"kept")
        c = s.consumer("queue:g")
        assert c.receive(timeout=5) is not None
        assert srv.stop() == 0
    assert "stopped" in srv.output
