"""Streams with partitions over the wire: a real ``chute serve`` with ``partitions = 3``,
the Python client (``key=``) and stomp.py (the ``key`` header).

A message goes to the partition its key picks (round robin without one); a reader of
the whole stream gets every partition, in order within each, each message saying its
partition and offset; a reader of ``stream:orders#N`` reads that partition alone, its
offsets its own. A ``kill -9`` loses nothing and keeps every offset.
"""

from __future__ import annotations

import signal
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import Client

S = "stream:orders"
PARTITIONS = 3
DEADLINE = 30.0
CONFIG = f'[destinations."{S}"]\npartitions = {PARTITIONS}\n'


def partition_of(key: str) -> int:
    return zlib.crc32(key.encode()) % PARTITIONS


def start(tmp_path: Path, data_dir: Path | None = None) -> ChuteServer:
    config = tmp_path / "chute.toml"
    config.write_text(CONFIG)
    stomp_port = free_port()
    server = start_server(
        tmp_path, "--config", str(config), "--stomp-port", str(stomp_port), data_dir=data_dir
    )
    server.stomp_port = stomp_port  # type: ignore[attr-defined]
    return server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChuteServer]:
    srv = start(tmp_path)
    yield srv
    if srv.process.poll() is None:
        srv.stop()


def send_all(conn: chute.Connection) -> dict[str, str | None]:
    """60 messages with 6 keys and 30 without; returns each body's key."""
    keys: dict[str, str | None] = {}
    session = conn.session()
    for i in range(90):
        key = f"customer-{i % 6}" if i < 60 else None
        body = f"order-{i:03d}"
        session.send(S, body, key=key)
        keys[body] = key
    session.close()
    return keys


def read(
    conn: chute.Connection, address: str, count: int, offset: str | int = "first"
) -> list[tuple[int, int, int, str]]:
    """``count`` messages as (partition, offset, seq, body)."""
    session = conn.session("client")
    got: list[tuple[int, int, int, str]] = []
    with session.consumer(address, offset=offset, prefetch=50) as consumer:
        end = time.monotonic() + DEADLINE
        while len(got) < count:
            received = consumer.receive(timeout=max(0.0, end - time.monotonic()))
            assert received is not None, f"only {len(got)} of {count} messages came"
            got.append((received.partition, received.offset, received.seq, received.text))
            received.ack()
        assert consumer.receive(timeout=0.3) is None
    session.close()
    return got


def check_whole(got: list[tuple[int, int, int, str]], keys: dict[str, str | None]) -> None:
    assert sorted(body for *_, body in got) == sorted(keys)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _, body in got:
        by_partition[partition].append(offset)
        key = keys[body]
        if key is not None:
            assert partition == partition_of(key), body
    assert set(by_partition) == set(range(PARTITIONS))
    for offsets in by_partition.values():  # in order within each partition, from 1
        assert offsets == list(range(1, len(offsets) + 1))
    assert [seq for _, _, seq, _ in got] == list(range(1, len(got) + 1))


def test_keys_pick_partitions_and_a_whole_reader_gets_them_all(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        keys = send_all(conn)
        check_whole(read(conn, S, 90), keys)
        mine = [b for b, k in keys.items() if k is not None and partition_of(k) == 1]
        one = read(conn, f"{S}#1", 10 + len(mine))  # the 30 keyless ones go 10 to each
        assert {p for p, *_ in one} == {1}
        assert [o for _, o, _, _ in one] == [s for _, _, s, _ in one]  # seq is the offset
        assert [o for _, o, _, _ in one] == list(range(1, len(one) + 1))
        # a partition the stream does not have
        with pytest.raises(chute.ChuteError, match="has 3"):
            conn.session().consumer(f"{S}#3", offset="first")


def test_partitions_keep_their_messages_and_offsets_across_a_kill(
    tmp_path: Path, server: ChuteServer
) -> None:
    with chute.connect(server.url) as conn:
        keys = send_all(conn)
        before = sorted(read(conn, S, 90))
    server.stop(signal.SIGKILL)
    again = start(tmp_path, data_dir=server.data_dir)
    try:
        with chute.connect(again.url) as conn:
            after = read(conn, S, 90)
            check_whole(after, keys)
            assert [g[:2] + g[3:] for g in sorted(after)] == [g[:2] + g[3:] for g in before]
            conn.session().send(S, "late", key="customer-0")
            [(partition, offset, _, body)] = read(
                conn, f"{S}#{partition_of('customer-0')}", 1, offset="last"
            )
            assert (partition, body) == (partition_of("customer-0"), "late")
            home = partition_of("customer-0")
            assert offset == 1 + 10 + sum(1 for k in keys.values() if k and partition_of(k) == home)
    finally:
        again.stop()


def test_stomp_sends_with_a_key_header_and_reads_partitions(server: ChuteServer) -> None:
    client = Client(server.stomp_port)  # type: ignore[attr-defined]
    try:
        for i in range(12):
            headers = {"key": f"k{i % 3}"} if i < 6 else {}
            client.conn.send("/stream/orders", f"m{i}".encode(), headers=headers, receipt=f"r{i}")
            client.receipt(f"r{i}")
        client.conn.subscribe(
            "/stream/orders",
            id="all",
            ack="client-individual",
            headers={"x-stream-offset": "first"},
        )
        frames = [client.message() for _ in range(12)]
        client.no_message()
        seen: dict[int, list[int]] = defaultdict(list)
        for frame in frames:
            partition = int(frame.headers["x-stream-partition"])
            seen[partition].append(int(frame.headers["x-stream-offset"]))
            key = frame.headers.get("key")
            if key is not None:
                assert partition == partition_of(key)
            client.conn.ack(frame.headers["ack"])
        assert sorted(f.body.decode() for f in frames) == sorted(f"m{i}" for i in range(12))
        for offsets in seen.values():
            assert offsets == list(range(1, len(offsets) + 1))
        client.conn.subscribe(
            "/stream/orders#2", id="two", ack="auto", headers={"x-stream-offset": "first"}
        )
        two = [client.message() for _ in range(len(seen[2]))]
        client.no_message()
        assert [int(f.headers["x-stream-offset"]) for f in two] == seen[2]
        assert {f.headers["x-stream-partition"] for f in two} == {"2"}
    finally:
        client.conn.disconnect()
