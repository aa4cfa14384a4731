"""``chute stat`` with a stream, against a ``chute serve`` subprocess: the table lists it
with its kind, what it keeps and its offsets; ``--json`` carries every stream field."""

from __future__ import annotations

import json

import chute

from .conftest import ChuteServer
from .test_cli_admin import run


def test_stat_lists_a_stream_with_its_kind_and_offsets(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session() as session:
        for n in range(3):
            session.send("stream:cli.ticks", f"tick {n}")
        session.send("queue:cli.orders", "order")
        reader = session.consumer("stream:cli.ticks", offset="first")
        first = reader.receive(timeout=10)
        assert first is not None

        done = run(server, "stat", "--json")
        table = run(server, "stat")

    assert done.returncode == 0, done.stderr
    row = next(d for d in json.loads(done.stdout)["destinations"] if d["kind"] == "stream")
    assert row["address"] == "stream:cli.ticks"
    assert (row["depth"], row["first"], row["head"], row["removed"]) == (3, 1, 4, 0)
    assert row["bytes"] > 0
    assert row["readers"] == [{"position": 4, "consumers": 1}]

    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:5] == ["ADDRESS", "KIND", "DEPTH", "BYTES", "OFFSETS"]
    stream = next(line for line in lines if line.startswith("stream:cli.ticks "))
    assert stream.split()[1:3] == ["stream", "3"]
    assert "1..4" in stream.split()
    queue = next(line for line in lines if line.startswith("queue:cli.orders "))
    assert queue.split()[1:3] == ["queue", "1"]
