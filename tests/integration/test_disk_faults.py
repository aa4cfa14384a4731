"""A full or failing disk under a live broker: producers get an error, never an ack.

A failing ``fdatasync`` cannot be caused from outside ``chute serve``, so this file
runs :class:`~chute.server.app.BrokerServer` in the test's event loop over a real
journal whose disk seam (:class:`~chute.store.disk.FaultyDisk`) fails on demand,
with the asyncio client over real sockets. What a user relies on (issue 3, disk
faults): no acknowledgement for what is not on disk, a clear error instead;
consumers keep receiving what is stored; once space is back the broker carries on
by itself, and a restart finds everything acknowledged.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from chute import aio
from chute.client.received import Received
from chute.config import ListenSettings, ServerConfig, StorageSettings
from chute.errors import StoreError
from chute.server.app import BrokerServer
from chute.store.disk import FaultyDisk
from chute.store.errors import DiskFailure, DiskFull
from chute.store.journal import Journal

from .conftest import free_port

TIMEOUT = 10.0


def run(
    tmp_path: Path,
    disk: FaultyDisk,
    body: Callable[[str], Awaitable[None]],
    *,
    inline_sync: bool = True,
) -> None:
    """Run ``body(url)`` against an in-process broker whose journal writes through ``disk``."""

    async def main() -> None:
        port = free_port()
        journal = Journal(tmp_path / "journal", disk=disk)
        config = ServerConfig(
            ListenSettings(port=port, stomp_port=0, http_port=0),
            storage=StorageSettings(inline_sync=inline_sync),
        )
        server = BrokerServer(config, store=journal)
        await server.start()
        try:
            await body(f"chute://127.0.0.1:{port}")
        finally:
            await server.stop()

    asyncio.run(main())


def stored_bodies(tmp_path: Path, queue: str) -> list[bytes]:
    """What a restart finds in ``queue`` (the journal reopened on its own)."""
    with Journal(tmp_path / "journal") as journal:
        return [s.message.body for s in journal.recover().messages.get(queue, [])]


@pytest.mark.parametrize(
    ("failure", "error"), [(errno.ENOSPC, DiskFull), (errno.EIO, DiskFailure)], ids=["full", "eio"]
)
def test_a_failing_sync_is_an_error_to_the_producer_and_the_broker_recovers_by_itself(
    tmp_path: Path, failure: int, error: type[StoreError]
) -> None:
    disk = FaultyDisk()

    async def body(url: str) -> None:
        async with aio.connect(url) as conn:
            producer = conn.session()
            await producer.send("queue:q", b"stored")
            disk.sync_error = failure
            with pytest.raises(StoreError) as refused:
                await producer.send("queue:q", b"not acknowledged")
            assert "not stored" in str(refused.value)
            assert ("No space left" in str(refused.value)) == (error is DiskFull)
            # consumers keep receiving what is stored while the disk fails
            consumer = await conn.session(ack="client").consumer("queue:q")
            first = await consumer.receive(TIMEOUT)
            assert first is not None
            assert first.body == b"stored"
            disk.sync_error = None  # space is back: no restart, no operator
            await producer.send("queue:q", b"after")

    run(tmp_path, disk, body)
    # everything acknowledged is there, and the refused one is not: it was not stored,
    # so a producer that sends it again makes no duplicate
    assert stored_bodies(tmp_path, "queue:q") == [b"stored", b"after"]


def test_a_failing_write_is_an_error_too(tmp_path: Path) -> None:
    disk = FaultyDisk()

    async def body(url: str) -> None:
        async with aio.connect(url) as conn:
            session = conn.session()
            await session.send("queue:w", b"one")
            disk.write_error = errno.ENOSPC
            with pytest.raises(StoreError, match="not stored"):
                await session.send("queue:w", b"two")
            disk.write_error = None
            await session.send("queue:w", b"three")

    run(tmp_path, disk, body)
    assert stored_bodies(tmp_path, "queue:w") == [b"one", b"three"]


def test_a_transaction_committed_on_a_failing_disk_is_not_acknowledged(tmp_path: Path) -> None:
    disk = FaultyDisk()

    async def body(url: str) -> None:
        async with aio.connect(url) as conn:
            session = conn.session(transacted=True)
            await session.send("queue:t", b"a")
            await session.send("queue:t", b"b")
            disk.sync_error = errno.ENOSPC
            with pytest.raises(StoreError, match="not stored"):
                await session.commit()
            disk.sync_error = None
            await session.send("queue:t", b"c")
            await session.commit()

    run(tmp_path, disk, body)
    assert stored_bodies(tmp_path, "queue:t") == [b"c"]  # the refused commit: none of it


@pytest.mark.parametrize("inline_sync", [True, False], ids=["inline", "writer-thread"])
def test_a_send_refused_by_a_full_disk_is_never_delivered_and_a_resend_is_no_duplicate(
    tmp_path: Path, inline_sync: bool
) -> None:
    """The refused message was already pushed to a waiting consumer; its delivery waited
    for the same sync, and is dropped instead of written (issue 13)."""
    disk = FaultyDisk()

    async def body(url: str) -> None:
        async with aio.connect(url) as consuming, aio.connect(url) as producing:
            consumer = await consuming.session(ack="client").consumer("queue:r", prefetch=10)
            producer = producing.session()
            await producer.send("queue:r", b"one")
            disk.sync_error = errno.ENOSPC
            with pytest.raises(StoreError, match="not stored"):
                await producer.send("queue:r", b"two")
            disk.sync_error = None
            await producer.send("queue:r", b"two")  # what a producer does with "not stored"
            await producer.send("queue:r", b"end")
            received: list[Received] = []
            while not received or received[-1].body != b"end":
                message = await consumer.receive(TIMEOUT)
                assert message is not None, f"only {[m.body for m in received]} arrived"
                received.append(message)
            assert [m.body for m in received] == [b"one", b"two", b"end"]
            assert not any(m.redelivered for m in received)

    run(tmp_path, disk, body, inline_sync=inline_sync)
    assert stored_bodies(tmp_path, "queue:r") == [b"one", b"two", b"end"]


def stream_bodies(tmp_path: Path, stream: str) -> list[bytes]:
    """What a restart finds in ``stream``, in offset order."""
    with Journal(tmp_path / "journal") as journal:
        stored = journal.recover().messages.get(stream, [])
        return [s.message.body for s in sorted(stored, key=lambda s: s.seq)]


def test_pipelined_sends_to_a_stream_on_a_failing_disk_are_each_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A producer's sends that arrive together are taken together (one record): when its
    sync fails, every one of them is an error to the producer and none is kept."""
    disk = FaultyDisk()

    async def body(url: str) -> None:
        with pytest.raises(StoreError, match="not stored"):  # noqa: PT012 - raised by flush, again by close
            async with aio.connect(url) as conn:
                session = conn.session(confirm_window=100)
                await session.send("stream:s", b"stored")
                await session.flush()
                disk.sync_error = errno.ENOSPC
                for i in range(50):
                    await session.send("stream:s", b"refused-%d" % i)
                await session.flush()
        disk.sync_error = None
        async with aio.connect(url) as conn:
            session = conn.session(confirm_window=100)
            for i in range(50):
                await session.send("stream:s", b"after-%d" % i)
            await session.flush()

    run(tmp_path, disk, body)
    assert "50 messages the store could not keep were taken out" in caplog.text
    assert stream_bodies(tmp_path, "stream:s") == [b"stored"] + [b"after-%d" % i for i in range(50)]
