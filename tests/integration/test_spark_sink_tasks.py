"""A sink task's sending against a real broker, without Spark (chute.spark.sink's
write_staged as an executor runs it): Arrow batches of bodies alone go as framed
SendMany packets, other batches row by row, and what the broker stores is the same
either way, in the order of the rows, once the driver commits."""

from __future__ import annotations

import pyarrow as pa

import chute
from chute.message import BodyKind, Message
from chute.spark.options import ChuteOptions, Side
from chute.spark.sink import CHUNK_ROWS, write_staged
from tests.integration.conftest import ChuteServer


def stored(url: str, address: str) -> list[Message]:
    with chute.connect(url) as conn:
        first, head = conn.cursor_open(address)
        return [m for page in conn.cursor_read(address, None, first, head) for _, m in page]


def test_framed_and_row_by_row_batches_store_the_same_messages_in_order(
    server: ChuteServer,
) -> None:
    options = ChuteOptions.parse({"url": server.url, "destination": "stream:out"}, Side.WRITE)
    n = CHUNK_ROWS + 1500  # more than a prepared chunk
    plain = [f"p{i}".encode() * 40 for i in range(n)]
    keyed = [f"k{i}".encode() for i in range(30)]
    schema = pa.schema([("body", pa.binary()), ("key", pa.string())])
    batches = [
        pa.record_batch([pa.array(plain[:5000]), pa.nulls(5000, pa.string())], schema=schema),
        pa.record_batch([pa.array(keyed), pa.array(["a"] * 30)], schema=schema),  # row by row
        pa.record_batch([pa.array(plain[5000:]), pa.nulls(n - 5000, pa.string())], schema=schema),
        pa.record_batch([pa.array([], pa.binary()), pa.array([], pa.string())], schema=schema),
    ]
    staged = write_staged(options, "job", 0, iter(batches))
    assert staged.count == n + 30
    assert len(staged.xids) == 2  # prepared every CHUNK_ROWS rows
    assert stored(server.url, "stream:out") == []  # prepared, not visible
    with chute.connect(server.url) as conn:
        assert conn.commit_batch("job", 0, list(staged.xids), keep=False)
    messages = stored(server.url, "stream:out")
    assert [m.body for m in messages] == plain[:5000] + keyed + plain[5000:]
    for m in messages:
        assert (m.priority, m.persistent, m.kind) == (4, True, BodyKind.BYTES)
        assert m.correlation_id is None
    assert {m.properties.get("key") for m in messages} == {None, "a"}
    assert len({m.id for m in messages}) == len(messages)
    assert all(len(m.id) == 32 for m in messages)


def test_text_bodies_framed_are_text_messages(server: ChuteServer) -> None:
    options = ChuteOptions.parse({"url": server.url, "destination": "queue:out"}, Side.WRITE)
    batch = pa.record_batch({"body": pa.array(["héllo", "", "wörld"], pa.string())})
    staged = write_staged(options, "job", 0, iter([batch]))
    with chute.connect(server.url) as conn:
        conn.commit_batch("job", 0, list(staged.xids), keep=False)
    messages = stored(server.url, "queue:out")
    assert [(m.body.decode(), m.kind) for m in messages] == [
        ("héllo", BodyKind.TEXT),
        ("", BodyKind.TEXT),
        ("wörld", BodyKind.TEXT),
    ]
