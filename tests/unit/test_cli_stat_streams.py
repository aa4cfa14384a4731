"""``chute stat``'s table with streams: their kind, what they keep, their offsets."""

from __future__ import annotations

from typing import Any

from chute.cli.stat import Sample, render


def stats(appended: int = 5000) -> dict[str, Any]:
    return {
        "destinations": [
            {
                "address": "queue:orders",
                "kind": "queue",
                "depth": 4,
                "ready": 4,
                "inflight": 0,
                "bytes": 400,
                "consumers": 0,
                "enqueued": 4,
                "acked": 0,
                "dead_lettered": 0,
            },
            {
                "address": "stream:ticks",
                "kind": "stream",
                "depth": 1200,
                "ready": 1200,
                "inflight": 5,
                "bytes": 3 << 20,
                "consumers": 2,
                "enqueued": appended,
                "acked": 0,
                "dead_lettered": 0,
                "first": 3801,
                "head": 5001,
                "removed": 3800,
                "readers": [{"position": 4000, "consumers": 1}, {"position": 5001, "consumers": 1}],
            },
        ],
        "connections": 1,
        "destination_count": 2,
    }


def columns(line: str, header: str, *titles: str) -> list[str]:
    """The cells of ``line`` under ``titles`` of ``header`` (right-aligned to them, but
    KIND, left-aligned as the address)."""
    cells = []
    for title in titles:
        start = header.index(title)
        if title == "KIND":
            cells.append(line[start : start + len("stream")].strip())
            continue
        end = start + len(title)
        blank = line[end - 1 : end].strip() == ""
        cells.append("" if blank else line[:end].rsplit("  ", 1)[-1].strip())
    return cells


def test_a_stream_row_says_its_kind_bytes_and_offsets() -> None:
    header, queue, stream = render(stats()).splitlines()[:3]
    assert header.split()[:5] == ["ADDRESS", "KIND", "DEPTH", "BYTES", "OFFSETS"]
    assert columns(stream, header, "KIND", "DEPTH", "BYTES", "OFFSETS") == [
        "stream",
        "1,200",
        "3.0 MiB",
        "3,801..5,001",
    ]
    assert columns(queue, header, "KIND", "DEPTH", "BYTES", "OFFSETS") == [
        "queue",
        "4",
        "400 B",
        "",
    ]


def test_what_a_stream_does_not_count_is_blank_on_its_row() -> None:
    header, queue, stream = render(stats()).splitlines()[:3]
    titles = ("READY", "ACKED", "DEAD-LETTERED")
    assert columns(stream, header, *titles) == ["", "", ""]
    assert columns(queue, header, *titles) == ["4", "0", "0"]
    assert columns(stream, header, "INFLIGHT", "CONSUMERS", "ENQUEUED") == ["5", "2", "5,000"]


def test_a_streams_in_rate_is_what_was_appended() -> None:
    table = render(stats(appended=5400), Sample(10.0, stats()), 12.0)
    header, _, stream = table.splitlines()[:3]
    assert header.split()[-2:] == ["IN/S", "OUT/S"]
    assert columns(stream, header, "IN/S", "OUT/S") == ["200", ""]


def test_without_streams_the_table_is_as_before() -> None:
    only_queues = {**stats(), "destinations": stats()["destinations"][:1]}
    header = render(only_queues).splitlines()[0]
    assert "KIND" not in header
    assert "OFFSETS" not in header
