"""Sessions' send_many_framed: messages already encoded as a SendMany carries them are
stored as send_many would store them, with both clients, in a transaction or confirmed
one request at a time."""

from __future__ import annotations

import asyncio

import pyarrow as pa

import chute
import chute.aio
from chute.client.aio_client import AioSession
from chute.client.blocking import BlockingSession
from chute.message import BodyKind, Message
from chute.spark.framing import framed, packets
from tests.integration.conftest import ChuteServer

BODIES = [f"body-{i}".encode() * (i % 7) for i in range(500)]


def stored(url: str, address: str) -> list[Message]:
    with chute.connect(url) as conn:
        first, head = conn.cursor_open(address)
        return [m for page in conn.cursor_read(address, None, first, head) for _, m in page]


def pieces(max_bytes: int = 1000) -> list[tuple[int, bytes]]:
    entries = framed(pa.record_batch({"body": pa.array(BODIES, pa.binary())}))
    return [(p.entries, bytes(p.framed)) for p in packets(entries, max_bytes=max_bytes)]


def test_blocking_sessions_store_framed_messages(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        with conn.session() as plain:  # each request confirmed
            assert isinstance(plain, BlockingSession)
            for count, data in pieces():
                plain.send_many_framed("stream:plain", count, data)
        with conn.session(transacted=True) as tx:
            assert isinstance(tx, BlockingSession)
            for count, data in pieces():
                tx.send_many_framed("stream:tx", count, data)
            assert stored(server.url, "stream:tx") == []
            tx.commit()
    for address in ("stream:plain", "stream:tx"):
        messages = stored(server.url, address)
        assert [m.body for m in messages] == BODIES
        assert {(m.kind, m.priority, m.persistent) for m in messages} == {(BodyKind.BYTES, 4, True)}


def test_asyncio_sessions_store_framed_messages(server: ChuteServer) -> None:
    async def send() -> None:
        async with await chute.aio.connect(server.url) as conn, conn.session() as session:
            assert isinstance(session, AioSession)
            for count, data in pieces():
                await session.send_many_framed("queue:aio", count, data)

    asyncio.run(send())
    assert [m.body for m in stored(server.url, "queue:aio")] == BODIES
