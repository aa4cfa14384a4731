"""A stream's range read as stored content blocks (``Store.page_blocks``,
``Stream.read_blocks``): the same messages, and the same CursorPage bytes, as reading
them decoded."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.content import encode_content
from chute.core.model.settings import SettingsResolver
from chute.core.model.store import AckOp, AddOp, Store, StoredBlock, StoredMessage
from chute.core.model.stream import Stream
from chute.core.rules.broker import Broker
from chute.message import Message
from chute.protocol import packets as p
from chute.protocol.spec import encode_cursor_blocks
from chute.protocol.wire import encode_packet
from chute.server.native_manage import delivered_view
from chute.store.journal import Journal
from chute.store.memory import MemoryStore
from chute.store.segment import list_segments, segment_path

S = "stream:s"


def message(i: int) -> Message:
    """Messages of every shape the content block has: properties, optional strings."""
    return Message(
        f"body {i}".encode() * (1 + i % 7),
        id=f"ID:{i}",
        timestamp=1_700_000_000_000 + i,
        expiration=0 if i % 3 else 1_800_000_000_000 + i,
        correlation_id=f"c{i}" if i % 2 else None,
        reply_to="queue:r" if i % 5 == 0 else None,
        type="t" if i % 4 == 0 else None,
        properties={"n": i, "s": "é" * (i % 3), "f": 1.5} if i % 4 == 1 else None,
    )


def assert_same(blocks: list[StoredBlock], stored: list[StoredMessage]) -> None:
    assert [b[0] for b in blocks] == [s.seq for s in stored]
    for block, found in zip(blocks, stored, strict=True):
        _, delivery_count, redelivered, timestamp, expiration, content, size = block
        m = found.message
        assert (delivery_count, redelivered) == (0, 0)
        assert (timestamp, expiration, size) == (m.timestamp, m.expiration, m.size)
        assert bytes(content) == (m.encoded or encode_content(m))


def fill(store: Store) -> None:
    """Adds to the stream alone and with another queue, in and out of transactions, and
    some acked (as retention does)."""
    store.add(AddOp(S, (S,), 1, message(1)))
    store.commit([AddOp(S, (S,), seq, message(seq)) for seq in range(2, 40)])
    store.add(AddOp("topic:t", ("other", S), 40, message(40)))  # a fan-out's shared add
    store.commit(
        [
            AddOp(S, (S,), 41, message(41)),
            AckOp(S, 3),
            AddOp("queue:q", ("queue:q",), 1, message(0)),
        ]
    )
    store.commit([AddOp(S, (S,), seq, message(seq)) for seq in range(42, 60)])
    store.acks(S, [5, 6, 43])


@pytest.fixture(params=["journal", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    yield journal
    journal.close()


@pytest.mark.parametrize(("after", "limit"), [(0, 1000), (0, 10), (4, 3), (30, 15), (58, 5)])
def test_blocks_are_the_stored_messages(store: Store, after: int, limit: int) -> None:
    fill(store)
    blocks = store.page_blocks(S, after, limit)
    assert_same(blocks, store.page_in(S, after, limit))
    assert blocks
    assert store.page_blocks("stream:none", 0, 10) == []


def test_windows_read_one_after_another_are_the_whole_stream(tmp_path: Path) -> None:
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    try:
        fill(journal)
        seen: list[int] = []
        after = 0
        while window := journal.page_blocks(S, after, 7):  # windows cut transactions
            seen += [b[0] for b in window]
            after = window[-1][0]
        assert seen == [s.seq for s in journal.page_in(S, 0, 1000)]
        assert 3 not in seen
        assert 43 not in seen
        assert 40 in seen
    finally:
        journal.close()


def test_windows_of_a_record_read_again_are_the_stored_messages(tmp_path: Path) -> None:
    """A record's later windows, and a second pass, read only what their blocks need (the
    record's layout is remembered): the same blocks, times and sizes as decoding them."""
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    try:
        fill(journal)
        journal.commit([AddOp(S, (S,), seq, message(seq)) for seq in range(60, 200)])
        journal.acks(S, [61, 100, 101, 199])
        stored = journal.page_in(S, 0, 1000)
        for _ in range(2):
            blocks: list[StoredBlock] = []
            while window := journal.page_blocks(S, blocks[-1][0] if blocks else 0, 9):
                blocks += window
            assert_same(blocks, stored)
    finally:
        journal.close()


def test_a_record_of_many_short_batches_reads_in_windows(tmp_path: Path) -> None:
    """A transaction to two streams in turn is one record of many short batches (and
    single adds) of each: every window finds its messages among them."""
    journal = Journal(tmp_path, sync="never", segment_size=1 << 20)
    try:
        ops: list[AddOp] = []
        seq = {S: 1, "stream:t": 1}
        for turn in range(120):
            address = S if turn % 2 else "stream:t"
            for _ in range(turn % 4 + 1):
                ops.append(AddOp(address, (address,), seq[address], message(seq[address])))
                seq[address] += 1
        journal.commit(ops)
        journal.acks(S, [2, 50, 51])
        stored = journal.page_in(S, 0, 1000)
        for size in (1, 5, 64, 1000):
            blocks: list[StoredBlock] = []
            while window := journal.page_blocks(S, blocks[-1][0] if blocks else 0, size):
                blocks += window
            assert_same(blocks, stored)
    finally:
        journal.close()


def test_blocks_survive_a_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    fill(journal)
    journal.close()
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    try:
        journal.recover()
        assert_same(journal.page_blocks(S, 0, 1000), journal.page_in(S, 0, 1000))
    finally:
        journal.close()


def test_a_damaged_record_is_left_out_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    try:
        journal.add(AddOp(S, (S,), 1, message(1)))
        journal.add(AddOp(S, (S,), 2, message(2)))
        journal.flush()
        segment = list_segments(str(tmp_path))[-1]
        path = segment_path(str(tmp_path), segment)
        data = Path(path).read_bytes()
        at = data.rindex(b"body 2")  # in the second record's body
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"X", at)
        finally:
            os.close(fd)
        with caplog.at_level(logging.ERROR):
            blocks = journal.page_blocks(S, 0, 10)
        assert [b[0] for b in blocks] == [1]
        assert "damaged" in caplog.text
    finally:
        journal.close()


def read_pages(stream: Stream, start: int, max_messages: int, max_bytes: int) -> int:
    """Read the stream's range both ways, page by page; the pages must be the same bytes."""
    pages = 0
    while start < stream.head:
        nxt, entries = stream.read(
            start, stream.head, max_messages=max_messages, max_bytes=max_bytes
        )
        nxt2, blocks = stream.read_blocks(
            start, stream.head, max_messages=max_messages, max_bytes=max_bytes
        )
        assert nxt2 == nxt
        decoded = p.CursorPage(nxt, tuple((e.seq, delivered_view(e)) for e in entries))
        assert encode_cursor_blocks(nxt, blocks, 9, 1) == encode_packet(decoded, 9, 0, 0, 1)
        start = nxt
        pages += 1
    return pages


@pytest.mark.parametrize(("max_messages", "max_bytes"), [(0, 0), (100, 0), (64, 4000), (0, 9000)])
def test_a_stream_read_as_blocks_makes_the_same_pages(
    tmp_path: Path, max_messages: int, max_bytes: int
) -> None:
    journal = Journal(tmp_path, sync="never", segment_size=64 << 10)
    try:
        broker = Broker(journal, SettingsResolver({}))
        broker.recover()
        stream = broker.destination(S, create=True)
        assert isinstance(stream, Stream)
        big = b"x" * 20_000  # a tail of 8 MiB: most of the stream is read from the store
        for t in range(30):
            with broker.atomically():
                for i in range(20):
                    m = message(t * 20 + i)
                    broker.send(S, Message(big + m.body, properties=m.properties, id=m.id))
        broker.send(S, message(7))  # the newest, outside a transaction
        assert read_pages(stream, stream.first, max_messages, max_bytes) >= 1
        assert read_pages(stream, 250, 10, 0) >= 1  # from inside a transaction record
        assert stream.read_blocks(stream.head, stream.head + 5) == (stream.head, [])
    finally:
        journal.close()
