"""The asyncio client against a fake broker on a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

import chute.aio
from chute.errors import (
    AuthenticationFailed,
    ConnectError,
    ConsumerError,
    DestinationFull,
    RequestTimeout,
)
from chute.message import Short
from chute.protocol import packets as p

from .fake_broker import FakeBroker


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    b = FakeBroker()
    yield b
    b.close()


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await main()

    asyncio.run(bounded())


def test_send_and_receive(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url) as conn, conn.session(ack="client") as s:
            assert conn.connection_id == "fake-1"
            await s.send("queue:a", b"one", properties={"s": Short(2)}, priority=1)
            await s.send("queue:a", "two", persistent=False)
            c = await s.consumer("queue:a")
            m1 = await c.receive(timeout=5)
            m2 = await c.receive(timeout=5)
            assert m1 is not None
            assert m2 is not None
            assert (m1.body, m1.priority, m1.properties) == (b"one", 1, {"s": Short(2)})
            assert type(m1.properties["s"]) is Short
            assert m2.text == "two"
            m2.ack()
            assert await c.receive(timeout=0.05) is None

    run(main)
    ack = broker.packets(p.Ack)[0]
    assert isinstance(ack, p.Ack)
    assert (ack.seq, ack.cumulative) == (2, True)


def test_await_connect_and_batched_sends(broker: FakeBroker) -> None:
    n = 5000

    async def main() -> None:
        conn = await chute.aio.connect(broker.url)
        s = conn.session()
        for i in range(n):
            await s.send("queue:batch", str(i), persistent=False)
        await s.send("queue:batch", b"last")
        await conn.close()

    run(main)
    assert len(broker.queues["queue:batch"]) == n + 1
    assert broker.connections[0].reads < n / 10


def test_errors(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url, timeout=10) as conn:
            s = conn.session()
            with pytest.raises(DestinationFull):
                await s.send("queue:full", b"x")
            await s.send("queue:full", b"x", persistent=False)

            async def keep_sending() -> None:
                for _ in range(100):
                    await s.send("queue:ok", b"x", persistent=False)
                    await asyncio.sleep(0.01)

            with pytest.raises(DestinationFull):
                await keep_sending()
            assert "queue:ok" in (await conn.stat())["queues"]
        # a short timeout only where the answer never comes: under load, the fake
        # broker's thread may take longer than 0.3 s over an answer it does give
        async with chute.aio.connect(broker.url, timeout=1.0) as quick:
            with pytest.raises(RequestTimeout):
                await quick.session().send("queue:silent", b"x")

    run(main)


def test_connection_level_error_wakes_receivers(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url) as conn:
            s = conn.session()
            c = await s.consumer("queue:empty")
            waiting = asyncio.create_task(c.receive(timeout=10))
            await asyncio.sleep(0.05)
            with pytest.raises(ConnectError, match="going away"):
                await s.send("queue:kill", b"x")
            with pytest.raises(ConnectError, match="going away"):
                await waiting
            assert conn.closed

    run(main)


def test_iteration_management_and_close(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url) as conn:
            async with conn.session() as s:
                for i in range(3):
                    await s.send("queue:it", str(i))
                assert [m.text for m in await s.browse("queue:it")] == ["0", "1", "2"]
                assert [m.text for m in await s.browse("queue:it", limit=1)] == ["0"]
                walk = [m.text async for m in s.iter_browse("queue:it", page_messages=1)]
                assert walk == ["0", "1", "2"]
                assert await s.temporary_queue() == "queue:__tmp__.fake-1.1"
                await s.unsubscribe("sub")
                await s.callback("topic:t", "cb", "queue:out")
                c = await s.consumer("queue:it", prefetch=1)
                got: list[str] = []
                async for m in c:
                    got.append(m.text)
                    if len(got) == 3:
                        await c.close()
                assert got == ["0", "1", "2"]
                with pytest.raises(ConsumerError):
                    await c.receive(timeout=0)
            async with conn.session(transacted=True) as t:
                await t.send("queue:t", b"x")
                await t.commit()
                await t.rollback()

    run(main)


def test_close_wakes_a_waiting_receive(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url) as conn:
            s = conn.session()
            c = await s.consumer("queue:none")
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(c.close()))
            with pytest.raises(ConsumerError):
                await c.receive(timeout=5)

    run(main)


def test_connect_errors(broker: FakeBroker) -> None:
    async def main() -> None:
        with pytest.raises(AuthenticationFailed):
            await chute.aio.connect(broker.url, login="bad")
        with pytest.raises(ConnectError, match="cannot connect"):
            await chute.aio.connect("chute://127.0.0.1:1", timeout=2)
        with pytest.raises(ConnectError, match="cannot connect"):
            await chute.aio.connect("wss://127.0.0.1:1", timeout=2)
        with pytest.raises(ConnectError, match="cannot connect"):
            await chute.aio.connect("http://127.0.0.1:1", timeout=2)

    run(main)


def test_broker_vanishing_fails_pending_requests(broker: FakeBroker) -> None:
    async def main() -> None:
        conn = await chute.aio.connect(broker.url, timeout=5)
        s = conn.session()
        asyncio.get_running_loop().call_later(0.1, broker.close)
        with pytest.raises(ConnectError):
            await s.send("queue:silent", b"x")
        await conn.close()
        assert conn.closed

    run(main)


def test_heartbeats(broker: FakeBroker) -> None:
    # 1 s, not less: the client gives up after two heartbeats without a word from the
    # broker, and on a loaded machine a thread can stand still for a few hundred ms.
    broker.heartbeat_ms = 1000

    async def main() -> None:
        async with chute.aio.connect(broker.url, heartbeat=1.0) as conn:
            # the fake broker records packets on its own thread; run()'s deadline bounds this
            while len(broker.packets(p.Ping)) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            assert not conn.closed

    run(main)
    assert len(broker.packets(p.Ping)) >= 2


def test_a_broker_older_than_move_says_so(broker: FakeBroker) -> None:
    async def main() -> None:
        async with chute.aio.connect(broker.url) as conn:
            with pytest.raises(ConnectError, match=r"^this broker does not support move; upgrade"):
                await conn.move("queue:a", "queue:b", selector="x = 1", limit=5)
        async with chute.aio.connect(broker.url) as conn:
            with pytest.raises(ConnectError, match="does not support dead-letter retry"):
                await conn.retry_dead_letters()

    run(main)
    assert broker.packets(p.Move) == [p.Move("queue:a", "queue:b", "x = 1", (), 5)]
    assert broker.packets(p.DeadLetterRetry) == [p.DeadLetterRetry()]
