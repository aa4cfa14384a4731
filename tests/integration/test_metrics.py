"""``/metrics`` of a real ``chute serve``: what a client did, counted exactly.

Each test drives the broker with the chute client, then scrapes the HTTP port
and parses the answer with Prometheus' own parser. Figures the broker settles
asynchronously (an ack travels after ``ack()`` returned) are polled for with a
deadline; then every figure is checked exactly.
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import chute

from .conftest import ChuteServer, free_port, start_server

WAIT = 10.0
Labels = tuple[tuple[str, str], ...]


@dataclass
class Broker:
    server: ChuteServer
    http_port: int

    def connect(self, client_id: str | None = None) -> chute.Connection:
        return chute.connect(self.server.url, client_id=client_id)

    def fetch(self, path: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}")
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=WAIT) as answer:  # noqa: S310 - http
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def scrape(self, auth: tuple[str, str] | None = None) -> dict[tuple[str, Labels], float]:
        """Every sample of ``/metrics``: (name, sorted labels) -> value."""
        status, text = self.fetch("/metrics", auth)
        assert status == 200, text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }


def start(tmp_path: Path, *extra: str) -> Broker:
    http_port = free_port()
    return Broker(start_server(tmp_path, "--http-port", str(http_port), *extra), http_port)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = start(tmp_path)
    yield running
    running.server.stop()


def queue_figures(
    samples: dict[tuple[str, Labels], float], address: str, subscription: str = ""
) -> dict[str, float]:
    """The ``chute_destination_*`` samples of one queue or subscription, by short name."""
    kind = "subscription" if subscription else "queue"
    labels = (("address", address), ("kind", kind), ("subscription", subscription))
    prefix = "chute_destination_"
    return {
        name.removeprefix(prefix): value
        for (name, found), value in samples.items()
        if name.startswith(prefix) and found == labels
    }


Samples = dict[tuple[str, Labels], float]


def wait_for(broker: Broker, condition: str, check: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``check(samples)`` holds (the broker settles acks after they left)."""
    deadline = time.monotonic() + WAIT
    while True:
        samples = broker.scrape()
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"never {condition}: {samples}")
        time.sleep(0.05)  # polling the condition, not synchronising on time


def test_counters_match_what_the_client_did(broker: Broker) -> None:
    address, sent, received, acked = "queue:metrics.orders", 20, 12, 5
    with broker.connect() as conn:
        with conn.session() as s:
            for i in range(sent):
                s.send(address, f"m{i}")
        with conn.session(ack="individual") as s:
            consumer = s.consumer(address, prefetch=100)  # room for all: every one delivered
            got = [consumer.receive(timeout=WAIT) for _ in range(received)]
            assert all(m is not None for m in got)
            for message in got[:acked]:
                assert message is not None
                message.ack()
            samples = wait_for(
                broker,
                f"{acked} acked",
                lambda m: queue_figures(m, address).get("acked_total") == acked,
            )
            figures = queue_figures(samples, address)
            assert figures.pop("bytes") > 0
            assert figures == {
                "messages": sent - acked,
                "ready_messages": 0,
                "inflight_messages": sent - acked,
                "consumers": 1,
                "paged_messages": 0,
                "paged_bytes": 0,
                "enqueued_total": sent,
                "delivered_total": sent,
                "acked_total": acked,
                "redelivered_total": 0,
                "expired_total": 0,
                "dead_lettered_total": 0,
            }
            assert samples[("chute_connections", (("protocol", "native"),))] == 1
        # the session closed: what it did not ack goes back, and is delivered again
        with conn.session(ack="individual") as s:
            consumer = s.consumer(address, prefetch=100)
            again = [consumer.receive(timeout=WAIT) for _ in range(sent - acked)]
            for message in again:
                assert message is not None
                assert message.redelivered
                message.ack()
            samples = wait_for(
                broker,
                "every message acked",
                lambda m: queue_figures(m, address).get("acked_total") == sent,
            )
    figures = queue_figures(samples, address)
    assert (figures["messages"], figures["inflight_messages"], figures["bytes"]) == (0, 0, 0)
    assert figures["enqueued_total"] == sent
    assert figures["delivered_total"] == sent + (sent - acked)
    assert figures["redelivered_total"] == sent - acked
    assert samples[("chute_ready", ())] == 1
    assert samples[("chute_destinations", ())] >= 1
    assert samples[("chute_memory_high_watermark_bytes", ())] == 256 << 20
    assert samples[("chute_memory_low_watermark_bytes", ())] == int((256 << 20) * 0.9)
    assert samples[("chute_event_loop_stalls_total", ())] >= 0  # exported, for alerts


def test_persistent_sends_show_in_the_journal_histograms(broker: Broker) -> None:
    before = broker.scrape()
    with broker.connect() as conn, conn.session() as s:
        for i in range(10):
            s.send("queue:metrics.journal", f"durable {i}")  # each waits for its fsync
    after = broker.scrape()
    count = ("chute_journal_fsync_seconds_count", ())
    assert after[count] >= before.get(count, 0) + 1
    assert after[("chute_journal_fsync_seconds_sum", ())] > 0
    assert after[("chute_journal_fsync_seconds_bucket", (("le", "+Inf"),))] == after[count]
    records = after[("chute_journal_fsync_records_sum", ())]
    assert records >= 10  # every add was made durable by some fsync
    assert after[("chute_journal_fsync_records_count", ())] == after[count]
    assert after[("chute_journal_written_bytes_total", ())] > before.get(
        ("chute_journal_written_bytes_total", ()), 0
    )
    assert after[("chute_journal_segments", ())] >= 1


def test_a_topic_counts_what_was_published_and_each_subscription_its_own(
    broker: Broker,
) -> None:
    topic = "topic:metrics.prices"
    with broker.connect(client_id="watcher") as conn:
        with conn.session() as s:
            s.consumer(topic, subscription="audit", durable=True).close()
            for i in range(3):
                s.send(topic, f"p{i}")
        samples = broker.scrape()
    assert (
        samples[
            (
                "chute_destination_enqueued_total",
                (("address", topic), ("kind", "topic"), ("subscription", "")),
            )
        ]
        == 3
    )
    [(labels, depth)] = [
        (found, value)
        for (name, found), value in samples.items()
        if name == "chute_destination_messages" and ("kind", "subscription") in found
    ]
    assert ("address", topic) in labels
    assert depth == 3


def test_metrics_need_a_monitor_when_the_broker_has_users(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(
        '[users.root]\npassword = "root-pw"\nroles = ["admin"]\n\n'
        '[users.app]\npassword = "app-pw"\nroles = ["app"]\n\n'
        '[users.prometheus]\npassword = "prom-pw"\nroles = ["monitor"]\n\n'
        '[roles.app]\nsend = ["queue:app.*"]\n\n'
        '[roles.monitor]\nmonitor = ["*"]\n'
    )
    running = start(tmp_path, "--config", str(config))
    try:
        status, text = running.fetch("/metrics")
        assert status == 401
        assert "credentials" in text
        status, text = running.fetch("/metrics", ("app", "app-pw"))
        assert status == 403
        assert 'monitor = ["*"]' in text
        assert running.fetch("/metrics", ("root", "wrong"))[0] == 401
        assert running.scrape(("prometheus", "prom-pw"))[("chute_ready", ())] == 1
        # monitoring is looking only: the admin API refuses the same user
        assert running.fetch("/api/overview", ("prometheus", "prom-pw"))[0] == 403
        assert running.scrape(("root", "root-pw"))[("chute_ready", ())] == 1
        assert running.fetch("/healthz") == (200, '{"status": "alive"}')  # never needs a login
    finally:
        running.server.stop()
