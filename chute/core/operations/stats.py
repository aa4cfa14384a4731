"""Statistics in pages: destinations with their counters, a bounded number at a time.

A broker may hold any number of destinations (a client can make 100,000
queues), so what ``stat`` answers is a page: the destinations in address
order after a position (``after``: the last address the previous page
covered, "" at the start), at most ``limit`` of them, and the position to go
on from (None once every one was covered). Every page also carries the
broker-wide figures (connections, prepared transactions, discarded
messages); a client joins the pages into one document.

Address order puts every queue (``queue:...``) before every stream
(``stream:...``) and every topic (``topic:...``). A ``pattern`` (an address,
or one with ``*`` for any characters, spelled as the configuration's keys are) keeps only the
destinations it matches, and ``contains`` only those whose address holds that text
(case-insensitively: the console's filter box); a ``sees`` filter (who may see what, from
:class:`~chute.core.operations.connection.BrokerConnection`) drops others from a page without
shortening the walk, so a page may list fewer than ``limit``. Like a browse, a
walk keeps no state in the broker: a destination made or deleted during it
appears or not depending on whether the walk had passed its address.

Pure: used from the broker's loop only.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from chute.core.model.address import canonical, pattern_matcher
from chute.core.model.queue import QueueChannel
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic

STAT_PAGE: Final = 1000
"""The most destinations one page covers (a request asking more gets this many)."""


@dataclass(frozen=True, slots=True)
class StatsPage:
    """One page of destinations (JSON-ready dicts) and where the walk goes on."""

    destinations: list[dict[str, Any]]
    after: str | None
    """The last address this page covered (the next page's ``after``); None: done."""


def stats_page(
    queues: Mapping[str, QueueChannel],
    topics: Mapping[str, Topic],
    *,
    pattern: str | None = None,
    after: str = "",
    limit: int = STAT_PAGE,
    sees: Callable[[str], bool] | None = None,
    streams: Mapping[str, Stream] | None = None,
    contains: str = "",
) -> StatsPage:
    """The destinations after ``after`` in address order (see the module docstring).

    ``limit`` is used as given (at least 1); callers clamp it.

    Raises:
        InvalidAddress: a bad ``pattern``.
    """
    limit = max(1, limit)
    streams = streams or {}
    keep = pattern_matcher(pattern) if pattern else None
    if pattern and "*" not in pattern:  # one address: no need to look at the others
        exact = canonical(pattern)
        known = exact in queues or exact in topics or exact in streams
        names: Iterable[str] = [exact] if known else []
    else:
        names = itertools.chain(queues, topics, streams)
    needle = contains.casefold()
    covered = heapq.nsmallest(
        limit + 1,
        (
            a
            for a in names
            if a > after and (keep is None or keep(a)) and (not needle or needle in a.casefold())
        ),
    )
    more = len(covered) > limit
    del covered[limit:]
    destinations: list[dict[str, Any]] = []
    for address in covered:
        if sees is not None and not sees(address):
            continue
        queue = queues.get(address)
        if queue is not None:
            destinations.append({"address": queue.address, "kind": "queue", **queue_stats(queue)})
            continue
        topic = topics.get(address)
        if topic is not None:
            destinations.append(topic_stats(topic))
            continue
        stream = streams.get(address)
        if stream is not None:
            destinations.append(stream_stats(stream))
    return StatsPage(destinations, covered[-1] if more else None)


def queue_stats(queue: QueueChannel) -> dict[str, Any]:
    """One queue's (or subscription's) counters."""
    return {
        "depth": queue.held,
        "ready": queue.ready,
        "inflight": queue.inflight,
        "bytes": queue.held_bytes,
        "consumers": len(queue.router.local),  # not the peers (other nodes of a cluster)
        "enqueued": queue.enqueued,
        "acked": queue.acked,
        "delivered": queue.delivered,
        "redelivered": queue.redelivered,
        "expired": queue.expired,
        "dead_lettered": queue.dead_lettered,
    }


def topic_stats(topic: Topic) -> dict[str, Any]:
    """A topic's counters: its subscriptions' summed, and each subscription's."""
    subs = [
        {
            "name": s.name,
            "kind": s.kind.value,
            "selector": s.selector_text,
            **queue_stats(s),
        }
        for s in topic.subscriptions.values()
    ]
    return {
        "address": topic.address,
        "kind": "topic",
        "depth": sum(s["depth"] for s in subs),
        "inflight": sum(s["inflight"] for s in subs),
        "consumers": sum(s["consumers"] for s in subs),
        "enqueued": topic.published,
        "acked": sum(s["acked"] for s in subs),
        "delivered": sum(s["delivered"] for s in subs),
        "redelivered": sum(s["redelivered"] for s in subs),
        "expired": sum(s["expired"] for s in subs),
        "dead_lettered": sum(s["dead_lettered"] for s in subs),
        "subscriptions": subs,
    }


def stream_stats(stream: Stream) -> dict[str, Any]:
    """A stream's figures: what it keeps (``depth``, ``bytes``), its offsets (``first``,
    ``head``), what it took and what retention removed, and its readers."""
    readers = stream.readers
    return {
        "address": stream.address,
        "kind": "stream",
        "depth": stream.count,
        "ready": stream.count,
        "inflight": sum(r.inflight for r in readers),
        "bytes": stream.bytes,
        "consumers": sum(len(r.router.consumers) for r in readers),
        "enqueued": stream.appended,
        "acked": 0,
        "delivered": stream.delivered,
        "redelivered": stream.redelivered,
        "expired": 0,
        "dead_lettered": 0,
        "first": stream.first,
        "head": stream.head,
        "removed": stream.removed,
        "readers": [
            {"position": r.position, "consumers": len(r.router.consumers)} for r in readers
        ],
    }
