"""The native protocol's management requests: browse, statistics, create, delete, purge,
move.

:class:`ManagementRequests` holds their handlers, which
:class:`~chute.server.native.NativeConnection` inherits and registers with the
others; what a handler needs of its connection is :class:`Driver`. A browse
and a move are acted on in steps (the connection's ``_work``: a generator, a
few messages per ``next()``, each a unit of the connection's turn), so a page
read from the journal or a move of a deep queue never holds the loop for long;
a move is answered once what it moved is durable. The one-answer Browse and Stat
of older clients join their pages as long as the answer fits in a packet (so a
request costs at most a packet's worth of work).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

from chute.core.model.consumer import Entry
from chute.core.operations import manage, transfer
from chute.core.operations.browse import BrowsePage, clamp
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.stats import STAT_PAGE
from chute.errors import ChuteError, TooLarge
from chute.ha.view import add_view
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.server.cluster_stats import page_filter
from chute.server.cluster_view import ClusterView, add_homes
from chute.server.host import ServerHost

_R = TypeVar("_R")  # what a move answers


class Driver(Protocol):
    """What a management handler needs of its native connection."""

    codec: PacketCodec
    core: BrokerConnection | None
    _work: Generator[None, None, None] | None

    @property
    def server(self) -> ServerHost: ...

    def _core(self) -> BrokerConnection: ...

    def _respond(self, header: p.Header, packet: p.Packet) -> None: ...

    def _fail(self, header: p.Header, exc: ChuteError) -> None: ...

    def _confirmed(
        self, header: p.Header, error: BaseException | None, value: str | None = None
    ) -> None: ...

    def _after_sync(self, callback: Callable[[BaseException | None], None]) -> None: ...

    def _schedule_flush(self) -> None: ...


class ManagementRequests:
    """The handlers of the management packets, for :class:`~chute.server.native.NativeConnection`
    (which registers them with the others)."""

    _work: Generator[None, None, None] | None  # the connection's request acted on in steps

    def _on_browse_fetch(self: Driver, header: p.Header, packet: p.BrowseFetch) -> None:
        steps = self._core().browse_steps(
            packet.address,
            after=packet.after,
            before=packet.before,
            selector=packet.selector,
            max_messages=packet.max_messages,
            max_bytes=clamp(packet.max_bytes, self.codec.max_packet_size // 2),
        )
        self._work = _browse_page(self, header, steps)

    def _on_stat_fetch(self: Driver, header: p.Header, packet: p.StatFetch) -> None:
        peers = self.server.peers
        if peers is None:
            _stat_page(self, header, packet, None)
            return
        core = self._core()  # a page of a cluster: once the other nodes answered
        peers.stats.when_seen(
            packet.after == "",
            lambda view: _stat_page(self, header, packet, view) if self.core is core else None,
        )

    def _on_browse(self: Driver, header: p.Header, packet: p.Browse) -> None:
        self._work = _browse_whole(self, header, packet)

    def _on_stat(self: Driver, header: p.Header, packet: p.Stat) -> None:
        core, budget = self._core(), self.codec.max_packet_size // 2
        stats = core.stats_page()
        destinations: list[dict[str, Any]] = stats["destinations"]
        size = 0
        while stats["next"] is not None:
            size += len(json.dumps(stats["destinations"]))
            if size > budget:
                raise TooLarge(
                    f"the broker holds more destinations than one answer can carry "
                    f"(max_packet_size {self.codec.max_packet_size}); use a client "
                    "that asks for statistics in pages (StatFetch)"
                )
            stats = core.stats_page(after=stats["next"])
            destinations += stats["destinations"]
        del stats["next"]
        stats["destinations"] = destinations
        stats["sockets"] = self.server.limits.stats()
        stats["uptime_s"] = round(time.time() - self.server.started, 1)
        add_view(stats, self.server.ha)
        self._respond(header, p.StatResult(json.dumps(stats)))

    def _on_destination_create(self: Driver, header: p.Header, packet: p.DestinationCreate) -> None:
        made = "1" if manage.create(self._core(), packet.address) else "0"
        self._after_sync(lambda error: self._confirmed(header, error, made))

    def _on_destination_delete(self: Driver, header: p.Header, packet: p.DestinationDelete) -> None:
        count = str(self._core().delete(packet.address, force=packet.force))
        self._after_sync(lambda error: self._confirmed(header, error, count))

    def _on_destination_purge(self: Driver, header: p.Header, packet: p.DestinationPurge) -> None:
        count = str(self._core().purge(packet.address))
        self._after_sync(lambda error: self._confirmed(header, error, count))

    def _on_move(self: Driver, header: p.Header, packet: p.Move) -> None:
        steps = transfer.move_steps(
            self._core(),
            packet.source,
            packet.target,
            selector=packet.selector,
            seqs=packet.seqs or None,
            limit=packet.limit,
        )
        self._work = _moving(self, header, steps, lambda count: p.Ok(str(count)))

    def _on_dead_letter_retry(self: Driver, header: p.Header, packet: p.DeadLetterRetry) -> None:
        steps = transfer.retry_steps(
            self._core(),
            packet.source,
            selector=packet.selector,
            seqs=packet.seqs or None,
            limit=packet.limit,
        )
        self._work = _moving(
            self,
            header,
            steps,
            lambda counts: p.DeadLetterRetryResult(tuple(sorted(counts.items()))),
        )


def _stat_page(
    driver: Driver, header: p.Header, packet: p.StatFetch, view: ClusterView | None
) -> None:
    """Answer a StatFetch: a page of this node's statistics, with ``view`` (the cluster
    as the other nodes answered) merged in when this broker is a node of one."""
    try:
        conn = driver._core()
        limit = clamp(packet.limit, STAT_PAGE)
        stats = conn.stats_page(pattern=packet.pattern, after=packet.after, limit=limit)
        after = stats.pop("next")
        if view is not None:
            keep = page_filter(conn, packet.pattern, "")
            stats["destinations"], after = view.merge(
                stats["destinations"], packet.after, after, limit, keep
            )
            stats["cluster"] = view.document()
            streams = driver.server.peers.streams if driver.server.peers is not None else None
            add_homes(stats["destinations"], streams.homes if streams is not None else {})
    except ChuteError as exc:
        driver._fail(header, exc)
        return
    stats["uptime_s"] = round(time.time() - driver.server.started, 1)
    stats["sockets"] = driver.server.limits.stats()
    add_view(stats, driver.server.ha)
    driver._respond(header, p.StatPage(json.dumps(stats), after))
    if view is not None:  # answered later than the turn that read the request
        driver._schedule_flush()


def _browse_page(
    driver: Driver, header: p.Header, steps: Generator[None, None, BrowsePage]
) -> Generator[None, None, None]:
    try:
        page = yield from steps
    except ChuteError as exc:
        driver._fail(header, exc)
        return
    messages = tuple((e.seq, delivered_view(e)) for e in page.entries)
    driver._respond(header, p.BrowsePage(page.after, page.before, page.done, messages))


def _browse_whole(
    driver: Driver, header: p.Header, packet: p.Browse
) -> Generator[None, None, None]:
    core, budget = driver._core(), driver.codec.max_packet_size // 2
    messages: list[tuple[int, Any]] = []
    size, after, before = 0, 0, 0
    try:
        while True:
            page = yield from core.browse_steps(
                packet.address, after=after, before=before, selector=packet.selector
            )
            messages += ((e.seq, delivered_view(e)) for e in page.entries)
            size += sum(e.message.size for e in page.entries)
            if page.done or 0 < packet.limit <= len(messages):
                break
            if size > budget:
                raise TooLarge(
                    f"{packet.address} holds more than one answer can carry "
                    f"(max_packet_size {driver.codec.max_packet_size}); browse it with a "
                    "limit, or with a client that browses in pages (BrowseFetch)"
                )
            after, before = page.after, page.before
    except ChuteError as exc:
        driver._fail(header, exc)
        return
    if packet.limit > 0:
        del messages[packet.limit :]
    driver._respond(header, p.BrowseResult(tuple(messages)))


def _moving(
    driver: Driver,
    header: p.Header,
    steps: Generator[None, None, _R],
    answer: Callable[[_R], p.Packet],
) -> Generator[None, None, None]:
    """A move taken a step at a time between other clients' work, answered once what
    it moved is durable."""
    try:
        result = yield from steps
    except ChuteError as exc:
        driver._fail(header, exc)
        return
    reply = answer(result)

    def moved(error: BaseException | None) -> None:
        if error is None:
            driver._respond(header, reply)
        else:
            driver._confirmed(header, error)

    driver._after_sync(moved)


def delivered_view(entry: Entry) -> Any:
    """The message as a browser sees it: with this queue's delivery fields."""
    message = entry.message
    if entry.delivery_count == message.delivery_count and not entry.redelivered:
        return message
    return message.replace(delivery_count=entry.delivery_count, redelivered=entry.redelivered)
