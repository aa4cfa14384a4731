"""``/metrics`` of a real ``chute serve`` with streams: what a stream keeps, its offsets,
what retention removed and how far its slowest reader is behind, counted exactly.

A stream with ``max_messages`` retention drops its oldest messages as new ones
come; a reader from ``first`` with a small prefetch holds only its window, so
it stays behind the head until its consumer reads on. Everything is parsed with
Prometheus' own parser and checked against what the client did.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.core.model.readers import WINDOW

from .test_metrics import Broker, Labels, Samples, start, wait_for

WAIT = 10.0
KEPT = 3
"""The retention of ``stream:metrics.kept`` (``max_messages``)."""
CONFIG = f"""
[destinations."stream:metrics.kept"]
max_messages = {KEPT}
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    config = tmp_path / "chute.toml"
    config.write_text(CONFIG)
    running = start(tmp_path, "--config", str(config))
    yield running
    running.server.stop()


def stream_labels(address: str) -> Labels:
    return (("address", address), ("kind", "stream"), ("subscription", ""))


def stream_figures(samples: Samples, address: str) -> dict[str, float]:
    """A stream's samples by short name: ``chute_destination_*`` (its kind's series) and
    ``chute_stream_*`` (its own)."""
    figures: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name.startswith("chute_destination_") and labels == stream_labels(address):
            figures[name.removeprefix("chute_destination_")] = value
        elif name.startswith("chute_stream_") and labels == (("address", address),):
            figures[name.removeprefix("chute_")] = value
    return figures


def api(broker: Broker, address: str) -> dict[str, Any]:
    status, text = broker.fetch(f"/api/destinations/{address}")
    assert status == 200, text
    answer: dict[str, Any] = json.loads(text)
    return answer


def test_a_stream_shows_what_it_keeps_and_what_retention_removed(broker: Broker) -> None:
    address, sent = "stream:metrics.kept", 5
    with broker.connect() as conn, conn.session() as session:
        for n in range(sent):
            session.send(address, f"tick {n}")
    head = api(broker, address)["head"]

    figures = stream_figures(broker.scrape(), address)

    assert figures == {
        "messages": KEPT,
        "inflight_messages": 0,
        "bytes": api(broker, address)["bytes"],
        "consumers": 0,
        "enqueued_total": sent,  # appended
        "delivered_total": 0,
        "redelivered_total": 0,
        "stream_first_offset": head - KEPT,
        "stream_head_offset": head,
        "stream_readers": 0,
        "stream_lag_messages": 0,
        "stream_removed_total": sent - KEPT,
    }
    assert figures["bytes"] > 0


def test_the_lag_is_how_far_the_slowest_reader_is_behind_the_head(broker: Broker) -> None:
    address, sent = "stream:metrics.log", WINDOW + 44
    with broker.connect() as conn, conn.session() as session:
        for n in range(sent):
            session.send(address, f"entry {n}")
        first = api(broker, address)["first"]
        slow = session.consumer(address, offset="first", prefetch=1)
        received = slow.receive(timeout=WAIT)
        assert received is not None
        assert received.seq == first
        # one reader from the first offset: it holds its window, the rest is ahead of it
        samples = wait_for(
            broker,
            "a reader",
            lambda m: stream_figures(m, address).get("stream_readers") == 1,
        )
        figures = stream_figures(samples, address)
        assert figures["stream_lag_messages"] == sent - WINDOW
        assert figures["consumers"] == 1
        # a second reader at the head is not behind: the lag is the slowest one's
        session.consumer(address, offset="next")
        samples = wait_for(
            broker,
            "two readers",
            lambda m: stream_figures(m, address).get("stream_readers") == 2,
        )
        assert stream_figures(samples, address)["stream_lag_messages"] == sent - WINDOW
        (position,) = {r["position"] for r in api(broker, address)["readers"]} - {first + sent}
        assert position == first + WINDOW  # what the API shows is the same
    samples = wait_for(
        broker,
        "the readers gone",
        lambda m: stream_figures(m, address).get("stream_readers") == 0,
    )
    figures = stream_figures(samples, address)
    assert figures["stream_lag_messages"] == 0
    assert figures["messages"] == sent  # reading removed nothing
    assert figures["stream_removed_total"] == 0


def test_no_queue_only_series_for_a_stream_and_streams_are_counted(broker: Broker) -> None:
    with broker.connect() as conn, conn.session() as session:
        session.send("stream:metrics.other", "x")
        session.send("queue:metrics.q", "y")
    samples = broker.scrape()
    figures = stream_figures(samples, "stream:metrics.other")
    for series in ("ready_messages", "acked_total", "paged_messages", "dead_lettered_total"):
        assert series not in figures  # a stream keeps its messages for every reader
    status, text = broker.fetch("/api/destinations")
    assert status == 200, text
    listed = [d["address"] for d in json.loads(text)["destinations"]]
    assert {"stream:metrics.other", "stream:metrics.kept", "queue:metrics.q"} <= set(listed)
    assert samples[("chute_destinations", ())] == len(listed)  # streams counted too


def test_delivered_stays_counted_after_the_readers_close(broker: Broker) -> None:
    """``chute_destination_delivered_total`` is a counter: a reader closing never takes
    back what it delivered, and a new reader counts on from there."""
    address, sent = "stream:metrics.counted", 3
    with broker.connect() as conn, conn.session() as session:
        for n in range(sent):
            session.send(address, f"event {n}")
        for _ in range(2):  # two readers one after the other, each reads it all
            reader = session.consumer(address, offset="first")
            for _ in range(sent):
                message = reader.receive(timeout=WAIT)
                assert message is not None
                message.ack()
            reader.close()
    samples = wait_for(
        broker,
        "the readers gone",
        lambda m: stream_figures(m, address).get("stream_readers") == 0,
    )
    assert stream_figures(samples, address)["delivered_total"] == 2 * sent
    assert api(broker, address)["delivered"] == 2 * sent
