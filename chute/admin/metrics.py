"""``GET /metrics``: the broker's figures in Prometheus' text format.

Everything is read at scrape time, from what the broker counts anyway (the
core's per-queue counters, :mod:`chute.core.operations.stats`; the memory budget, the
connection limits, the journal's fsync histograms, :mod:`chute.store.syncstats`):
a :class:`BrokerCollector` on a private :class:`~prometheus_client.CollectorRegistry`
walks them when asked, so a broker nobody scrapes does no work for metrics at
all, and a scrape costs one pass over the destinations on the loop.

Series (docs/monitoring.md lists them with their meaning): per queue, topic,
subscription and stream (labels ``address``, ``kind`` = ``queue`` | ``topic`` |
``subscription`` | ``stream``, ``subscription`` = its name or ""),
``chute_destination_*`` gauges (messages, ready, in flight, bytes, paged,
consumers) and counters (``*_total``: enqueued, delivered, acked, redelivered,
expired, dead-lettered; a topic has only ``enqueued``, what was published to
it, so that summing a gauge over every series counts each held message once; a
stream only what it has: messages kept, in flight, bytes, consumers, enqueued
= appended, delivered, redelivered); per stream (label ``address``)
``chute_stream_*``: first and head offsets, readers, the slowest reader's lag,
and the messages retention removed (a counter); broker-wide gauges and
counters (connections by protocol, each client protocol's series there at 0
too, sockets by listener and what the limits refused, memory, paging,
producers held, prepared transactions, discarded messages, uptime) and the
journal's (fsync latency and records per fsync as histograms, bytes written,
segments, backlog); and the process's own
(``process_*``: CPU seconds, resident and virtual memory, open and maximum
file descriptors, start time), from prometheus_client's process collector.

On a node of a cluster every series of the broker's (``chute_*``, not ``process_*``)
carries the label ``node``, the node's name, and ``chute_cluster_peer_up`` (label
``peer``) says for each other node it knows whether it is linked to it: each node
exports its own figures; a query sums them over ``node`` for the cluster's.

While the broker recovers only the process, readiness and recovery series are
given (the broker is being built on another thread: nothing here touches it).

Who may scrape: the admin API's rule. With no users configured, anyone who
reaches the HTTP port (the broker then listens on loopback only) asking for a
loopback host (a DNS name rebound to 127.0.0.1 is refused, 403); with users,
HTTP Basic credentials of a user with ``manage`` on every address (``"*"``),
checked as the admin API checks them (:mod:`chute.admin.auth`); until the
broker is ready (its users are not loaded yet) such a broker answers 503.

Lives on the server's event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Final

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from chute.admin.auth import ApiError, Gate
from chute.admin.health import ReadyHost, add_health_routes
from chute.core.model.stream import Stream
from chute.core.operations.stats import queue_stats, stream_stats
from chute.core.rules.broker import Broker
from chute.server.peers import PeerLinks
from chute.server.watchdog import STALL_S
from chute.store.journal import Journal
from chute.store.syncstats import Histogram
from chute.version import __version__

DESTINATION_LABELS: Final = ("address", "kind", "subscription")

GAUGES: Final = (  # (the queue_stats key, the series, what it is)
    ("depth", "chute_destination_messages", "Messages held: ready, in flight and paged."),
    ("ready", "chute_destination_ready_messages", "Messages in memory waiting for a consumer."),
    ("inflight", "chute_destination_inflight_messages", "Messages delivered, not yet acked."),
    ("bytes", "chute_destination_bytes", "Bytes of the messages held (paged ones too)."),
    ("consumers", "chute_destination_consumers", "Consumers attached."),
)
COUNTERS: Final = (
    ("enqueued", "chute_destination_enqueued", "Messages placed (a topic: published to it)."),
    ("delivered", "chute_destination_delivered", "Deliveries to consumers (redeliveries too)."),
    ("acked", "chute_destination_acked", "Messages acknowledged."),
    ("redelivered", "chute_destination_redelivered", "Messages put back to be delivered again."),
    ("expired", "chute_destination_expired", "Messages that expired here."),
    ("dead_lettered", "chute_destination_dead_lettered", "Messages moved to a dead-letter queue."),
)
STREAM_GAUGES: Final = (  # in the order _streams gives their values
    ("chute_stream_first_offset", "The oldest offset the stream keeps."),
    ("chute_stream_head_offset", "The offset the stream's next message gets."),
    ("chute_stream_readers", "Readers (stream consumers) reading the stream."),
    (
        "chute_stream_lag_messages",
        "Offsets between the slowest reader's position and the head (0: none behind).",
    ),
)
SOCKET_COUNTERS: Final = (
    ("login_timeouts", "chute_sockets_login_timeouts", "Connections closed for not logging in."),
    (
        "held_before_login",
        "chute_sockets_held_before_login",
        "Connections that sent more than the budget before login (not read until login).",
    ),
    (
        "protocol_errors_before_login",
        "chute_sockets_protocol_errors_before_login",
        "Connections closed for a protocol error before login.",
    ),
    ("idle_timeouts", "chute_sockets_idle_timeouts", "Connections closed for idling."),
    ("accept_failures", "chute_sockets_accept_failures", "Accepts that failed (no descriptors)."),
)


CLIENT_PROTOCOLS: Final = (
    "native",
    "native/WebSocket",
    "native/HTTP",
    "STOMP",
    "STOMP/WebSocket",
    "AMQP",
)
"""The protocols ``chute_connections`` always has a series for, 0 without connections (an
absent series is not a zero to a query or an alert); others appear while in use."""


def add_metrics_routes(app: web.Application, server: ReadyHost) -> None:
    """``/metrics``, and the health endpoints ``/healthz`` and ``/readyz``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    ProcessCollector(registry=registry)  # process_*: CPU, memory, descriptors, start time
    gate = Gate(server)

    async def metrics(request: web.Request) -> web.Response:
        if server.config.users:
            refusal = await _refusal(server, gate, request)
            if refusal is not None:
                return refusal
        else:  # without users, as the admin API: no DNS-rebound page reads the figures
            try:
                gate.check_host(request)
            except ApiError as exc:
                return web.Response(status=exc.status, text=exc.message + "\n")
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app.router.add_get("/metrics", metrics)
    add_health_routes(app, server)


async def _refusal(server: ReadyHost, gate: Gate, request: web.Request) -> web.Response | None:
    """None if the request may read the metrics of a broker with users, else the answer."""
    if not server.ready:
        return web.Response(
            status=503,
            text="recovering, try again shortly (this broker's users are not loaded yet)\n",
            headers={"Retry-After": "5"},
        )
    try:
        principal = await gate.principal(request)
    except ApiError as exc:
        return web.Response(status=exc.status, text=exc.message + "\n", headers=exc.headers)
    if not principal.monitors_all:
        return web.Response(
            status=403,
            text=f"user {principal} may not read the metrics: give one of its roles "
            'monitor = ["*"] (or manage = ["*"])\n',
        )
    return None


class BrokerCollector(Collector):
    """Reads the broker's figures when scraped (see the module docstring)."""

    def __init__(self, server: ReadyHost) -> None:
        self.server = server

    def describe(self) -> list[Metric]:
        """Nothing described ahead: registering must not collect (the broker may not
        exist yet)."""
        return []

    def collect(self) -> Iterator[Metric]:
        server = self.server
        peers = server.peers
        node = peers.node if peers is not None else server.config.cluster.node
        if not node:
            yield from self._collect()
            return
        for metric in self._collect():  # a node of a cluster: each series says which
            metric.samples = [s._replace(labels={**s.labels, "node": node}) for s in metric.samples]
            yield metric

    def _collect(self) -> Iterator[Metric]:
        server = self.server
        yield InfoMetricFamily("chute_build", "The broker's version.", {"version": __version__})
        yield _gauge(
            "chute_ready",
            "1 once recovered with every listener open, else 0.",
            1.0 if server.ready else 0.0,
        )
        yield _gauge(
            "chute_uptime_seconds",
            "Seconds since the broker process started.",
            time.time() - server.started,
        )
        yield from _recovery(server)
        if server.watchdog is not None:
            yield _counter(
                "chute_event_loop_stalls",
                f"Times the broker's event loop went {STALL_S:g} s or more without turning "
                "(every connection waited; the log says where the loop was).",
                server.watchdog.stalls,
            )
            yield _gauge(
                "chute_event_loop_longest_stall_seconds",
                "The longest such stall since the broker started.",
                server.watchdog.longest,
            )
        if not server.ready:
            return
        broker = server.broker
        yield from _destinations(broker)
        yield from _broker_wide(broker)
        yield from _sockets(server.limits.stats())
        store = broker.store
        if isinstance(store, Journal):
            yield from _journal(store)
        if server.peers is not None:
            yield from _cluster(server.peers)
        if server.ha is not None:
            yield from _live(server.ha.view())


def _cluster(peers: PeerLinks) -> Iterator[Metric]:
    """Each other node this one knows (the members, and those that left since it
    started): 1 while linked to it, else 0."""
    up = GaugeMetricFamily(
        "chute_cluster_peer_up",
        "1 while this node is linked to the other node `peer` of its cluster, else 0.",
        labels=["peer"],
    )
    for name in sorted(set(peers.known) | set(peers.members)):
        up.add_metric([name], 1.0 if name in peers.links else 0.0)
    yield up


def _live(view: dict[str, Any]) -> Iterator[Metric]:
    """The live of a node with backups: its role, its epoch, and each backup's state
    (the series a backup gives are the same names: :mod:`chute.ha.backup_http`)."""
    role = GaugeMetricFamily(
        "chute_ha_role", "This process's role in its node (1 for its role).", labels=["role"]
    )
    role.add_metric([view["role"]], 1.0)
    yield role
    yield _gauge("chute_ha_epoch", "The node's epoch (its live's term in etcd).", view["epoch"])
    in_sync = GaugeMetricFamily(
        "chute_ha_backup_in_sync",
        "1 while the backup at `address` is in sync with this live (every confirmation "
        "waits for it), else 0 (catching up, or down).",
        labels=["address"],
    )
    for backup in view["backups"]:
        in_sync.add_metric([backup["address"]], 1.0 if backup["state"] == "in-sync" else 0.0)
    yield in_sync


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _recovery(server: ReadyHost) -> Iterator[Metric]:
    progress = server.recovery
    yield _gauge(
        "chute_recovery_seconds",
        "How long the recovery took (so far, while it runs).",
        progress.elapsed,
    )
    yield _gauge(
        "chute_recovery_read_bytes", "Journal bytes the recovery read.", progress.bytes_read
    )
    yield _gauge(
        "chute_recovery_total_bytes", "Journal bytes the recovery reads.", progress.bytes_total
    )
    yield _gauge("chute_recovery_records", "Journal records replayed.", progress.records)


def _destinations(broker: Broker) -> Iterator[Metric]:
    """Per queue, subscription, topic and stream: the gauges and counters of their stats."""
    gauges = {
        key: GaugeMetricFamily(name, doc, labels=DESTINATION_LABELS) for key, name, doc in GAUGES
    }
    counters = {
        key: CounterMetricFamily(name, doc, labels=DESTINATION_LABELS)
        for key, name, doc in COUNTERS
    }
    paged = GaugeMetricFamily(
        "chute_destination_paged_messages",
        "Messages held only in the journal (paged out of memory).",
        labels=DESTINATION_LABELS,
    )
    paged_bytes = GaugeMetricFamily(
        "chute_destination_paged_bytes",
        "Bytes of the messages paged out of memory.",
        labels=DESTINATION_LABELS,
    )

    def add(labels: list[str], stats: dict[str, Any], pages: tuple[int, int]) -> None:
        for key, family in gauges.items():
            family.add_metric(labels, stats.get(key, 0))
        for key, counter in counters.items():
            counter.add_metric(labels, stats.get(key, 0))
        paged.add_metric(labels, pages[0])
        paged_bytes.add_metric(labels, pages[1])

    for address, queue in broker.queues.items():
        add([address, "queue", ""], queue_stats(queue), (queue.paged, queue.paged_bytes))
    published = counters["enqueued"]
    for address, topic in broker.topics.items():
        published.add_metric([address, "topic", ""], topic.published)
        for sub in topic.subscriptions.values():
            add([address, "subscription", sub.name], queue_stats(sub), (sub.paged, sub.paged_bytes))
    for address, stream in broker.streams.items():  # no ready, acked, paged: not theirs
        labels = [address, "stream", ""]
        stats = stream_stats(stream)
        for key in ("depth", "inflight", "bytes", "consumers"):
            gauges[key].add_metric(labels, stats[key])
        for key in ("enqueued", "delivered", "redelivered"):
            counters[key].add_metric(labels, stats[key])
    yield from gauges.values()
    yield paged
    yield paged_bytes
    yield from counters.values()
    yield from _streams(broker)


def _streams(broker: Broker) -> Iterator[Metric]:
    """Per stream (label ``address``): its offsets, readers, lag, what retention removed."""
    families = {
        name: GaugeMetricFamily(name, doc, labels=["address"]) for name, doc in STREAM_GAUGES
    }
    removed = CounterMetricFamily(
        "chute_stream_removed",
        "Messages retention, compaction or a purge removed from the stream.",
        labels=["address"],
    )
    for address, stream in broker.streams.items():
        figures = (stream.first, stream.head, len(stream.readers), stream_lag(stream))
        for family, value in zip(families.values(), figures, strict=True):
            family.add_metric([address], value)
        removed.add_metric([address], stream.removed)
    yield from families.values()
    yield removed


def stream_lag(stream: Stream) -> int:
    """How far its slowest reader is behind: the offsets from the reader's position (or
    the oldest kept, if retention removed what it had not read) to the head; 0 without
    readers."""
    head, first = stream.head, stream.first
    return max((max(0, head - max(r.position, first)) for r in stream.readers), default=0)


def _broker_wide(broker: Broker) -> Iterator[Metric]:
    yield _gauge(
        "chute_destinations",
        "Queues, topics and streams (subscriptions not counted).",
        len(broker.queues) + len(broker.topics) + len(broker.streams),
    )
    by_protocol = dict.fromkeys(CLIENT_PROTOCOLS, 0)
    for client in broker.connections.values():
        protocol = str(getattr(client, "protocol", "other"))
        by_protocol[protocol] = by_protocol.get(protocol, 0) + 1
    connections = GaugeMetricFamily(
        "chute_connections", "Logged-in connections, by protocol.", labels=["protocol"]
    )
    for protocol, count in sorted(by_protocol.items()):
        connections.add_metric([protocol], count)
    yield connections
    memory = broker.memory
    yield _gauge("chute_memory_held_bytes", "What queued messages cost in memory.", memory.used)
    yield _gauge(
        "chute_memory_paging_limit_bytes",
        "Past this, durable queues page messages out (0: never).",
        memory.limit,
    )
    yield _gauge(
        "chute_memory_high_watermark_bytes",
        "Past this, producers wait (0: never).",
        memory.high,
    )
    yield _gauge(
        "chute_memory_low_watermark_bytes",
        "Producers held at the high watermark go on under this (0: no high watermark).",
        memory.low,
    )
    count = size = 0
    for queue in broker.queues.values():
        count += queue.paged
        size += queue.paged_bytes
    for topic in broker.topics.values():
        for sub in topic.subscriptions.values():
            count += sub.paged
            size += sub.paged_bytes
    yield _gauge("chute_paged_messages", "Messages paged out of memory, in all queues.", count)
    yield _gauge("chute_paged_bytes", "Bytes of the messages paged out of memory.", size)
    yield _gauge(
        "chute_producers_blocked",
        "Producers waiting for memory or disk (admission).",
        broker.admission.waiting,
    )
    yield _gauge(
        "chute_prepared_transactions",
        "Two-phase transactions prepared, awaiting commit or rollback.",
        len(broker.xa.xids()),
    )
    yield _counter(
        "chute_discarded",
        "Messages dropped: a dead letter or expired copy found nowhere to go.",
        broker.diversion.discarded,
    )


def _sockets(stats: dict[str, Any]) -> Iterator[Metric]:
    """The connection limits' figures (:meth:`chute.server.limits.ConnectionLimits.stats`)."""
    open_ = GaugeMetricFamily(
        "chute_sockets_open", "Connections open, by listener.", labels=["listener"]
    )
    for listener, count in stats.get("by_listener", {}).items():
        open_.add_metric([listener], count)
    yield open_
    yield _gauge(
        "chute_sockets_before_login",
        "Connections accepted that did not log in yet.",
        stats.get("before_login", 0),
    )
    refused = CounterMetricFamily(
        "chute_sockets_refused",
        "Connections refused over a limit, by the limit.",
        labels=["limit"],
    )
    refused.add_metric(["max_connections"], stats.get("refused_max_connections", 0))
    refused.add_metric(
        ["max_connections_per_host"], stats.get("refused_max_connections_per_host", 0)
    )
    yield refused
    for key, name, doc in SOCKET_COUNTERS:
        yield _counter(name, doc, stats.get(key, 0))


def _journal(journal: Journal) -> Iterator[Metric]:
    syncs = journal.sync_stats()
    yield _histogram(
        "chute_journal_fsync_seconds",
        "How long each group-commit fsync of the journal took.",
        syncs.seconds,
    )
    yield _histogram(
        "chute_journal_fsync_records",
        "Records each group-commit fsync made durable.",
        syncs.records,
    )
    yield _counter(
        "chute_journal_written_bytes",
        "Bytes written into journal segments since the broker started.",
        journal.bytes_written,
    )
    yield _counter(
        "chute_journal_compacted_records",
        "Live records compaction copied forward since the broker started.",
        journal.records_moved,
    )
    yield _gauge("chute_journal_segments", "Journal segment files.", len(journal.segments()))
    yield _gauge(
        "chute_journal_backlog_bytes",
        "Bytes appended that the journal's writer has not written yet.",
        journal.backlog(),
    )
    yield _gauge(
        "chute_journal_disk_low",
        "1 while the journal's disk has less than disk_free_limit free.",
        0.0 if journal.space_low() is None else 1.0,
    )


def _histogram(name: str, documentation: str, figures: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    family.add_metric(
        [],
        [(_bound(bound), count) for bound, count in figures.cumulative()],
        figures.total,
    )
    return family


def _bound(bound: float) -> str:
    """A bucket's ``le`` as Prometheus writes it."""
    return "+Inf" if bound == float("inf") else repr(float(bound))
