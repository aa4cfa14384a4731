"""Seeing the cluster from any node: :class:`ClusterStats` asks the other nodes for their
figures over the links and answers them.

To see the cluster (``chute stat``, the admin API, the console), a node sends each node
it is linked to a ``PeerStatsFetch`` (:mod:`chute.protocol.peer_stats`) and the other
answers a ``PeerStatsPage``: the nodes it is linked to and a page of its destinations
(depth and consumers); the asking node asks for the next page once one arrived, so one
page per node is in flight, and a page is bounded (1,000 destinations, about 256 KiB):
a node with many thousands of destinations answers in pages and never floods its links.
What every node that answered said makes a
:class:`~chute.server.cluster_view.ClusterView`. Each page must come within
:data:`ANSWER_TIMEOUT` seconds of its request, and all of a node's pages within
:data:`GATHER_TIMEOUT`; a node that did not answer in time, or whose link went down
meanwhile, is shown ``down`` with the reason, so a stalled node never holds a request
(a node that keeps answering, page after page, has the longer time: one with a hundred
thousand destinations still shows). Requests arriving while the nodes are being asked wait for that
same round; pages of one walk (``after`` set) reuse a view younger than
:data:`REUSE_S` seconds, so the pages of a walk agree.

Used from the loop only.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

from chute.core.model.address import canonical, pattern_matcher
from chute.core.operations.stats import queue_stats, stream_stats, topic_stats
from chute.core.rules.access import Action
from chute.errors import AccessDenied
from chute.protocol.peer_stats import (
    PAGE_BYTES,
    PAGE_DESTINATIONS,
    PeerStatsFetch,
    PeerStatsPage,
    row_size,
)
from chute.server.cluster_view import DOWN, UP, ClusterView, NodeView

if TYPE_CHECKING:
    from chute.core.model.registry import Registry
    from chute.core.operations.connection import BrokerConnection
    from chute.core.rules.cluster import Cluster

log = logging.getLogger("chute.cluster")

ANSWER_TIMEOUT: Final = 2.0
"""Seconds another node has to answer each request for a page before it is shown down."""
GATHER_TIMEOUT: Final = 10.0
"""Seconds the other nodes have to give all their pages before they are shown down."""
REUSE_S: Final = 10.0
"""How long the next pages of a walk reuse the view its first page took."""


class StatsLinks(Protocol):
    """What the exchange needs of the links (:class:`~chute.server.peers.PeerLinks`)."""

    @property
    def node(self) -> str:
        """This node's name."""

    @property
    def cluster_name(self) -> str: ...

    @property
    def cluster(self) -> Cluster:
        """The cluster's core (its host: the broker's destinations)."""

    @property
    def links(self) -> Mapping[str, object]:
        """The nodes linked now, by name."""

    @property
    def members(self) -> Mapping[str, str]:
        """The other members now: name -> address."""

    @property
    def known(self) -> Mapping[str, str]:
        """Every other node seen a member since this node started: name -> address."""

    def send_stats(self, peer: str, packet: PeerStatsFetch | PeerStatsPage) -> bool:
        """Send on the link to ``peer``; False: there is none."""


class ClusterStats:
    """This node's side of the statistics exchange (see the module docstring)."""

    def __init__(
        self,
        links: StatsLinks,
        *,
        timeout: float = ANSWER_TIMEOUT,
        gather_timeout: float = GATHER_TIMEOUT,
    ) -> None:
        self.links = links
        self.timeout = timeout
        self.gather_timeout = gather_timeout
        self.address = ""  # this node's address, once its membership said it
        self.latest: ClusterView | None = None
        self._gathering: asyncio.Task[ClusterView] | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[str, asyncio.Future[PeerStatsPage]]] = {}
        self._walks: dict[str, list[str]] = {}  # node -> this node's addresses it walks

    # -- asking ----------------------------------------------------------------------

    async def view(self, *, fresh: bool = True) -> ClusterView:
        """The cluster as the nodes answer now (``fresh``), or the latest view when it is
        younger than :data:`REUSE_S` seconds. Never waits longer than about
        ``gather_timeout`` seconds (:data:`GATHER_TIMEOUT` unless given), nor longer than
        ``timeout`` for one page."""
        latest = self.latest
        if not fresh and latest is not None and time.monotonic() - latest.taken < REUSE_S:
            return latest
        if self._gathering is None:
            self._gathering = asyncio.create_task(self._gather(), name="cluster-stats")
            self._gathering.add_done_callback(self._gathered)
        return await asyncio.shield(self._gathering)

    def when_seen(self, fresh: bool, then: Callable[[ClusterView], None]) -> None:
        """Call ``then(view)`` once :meth:`view` has one (for a handler that is not a
        coroutine; not called if the node stops meanwhile)."""

        def seen(done: asyncio.Future[ClusterView]) -> None:
            if not done.cancelled():
                then(done.result())

        asyncio.ensure_future(self.view(fresh=fresh)).add_done_callback(seen)

    def _gathered(self, task: asyncio.Task[ClusterView]) -> None:
        self._gathering = None
        if not task.cancelled() and task.exception() is None:
            self.latest = task.result()

    async def _gather(self) -> ClusterView:
        links = self.links
        asked = {name: asyncio.create_task(self._fetch_all(name)) for name in sorted(links.links)}
        if asked:
            await asyncio.wait(asked.values(), timeout=self.gather_timeout)
        nodes = [NodeView(links.node, self.address, UP, tuple(sorted(links.links)))]
        for name in sorted(set(links.known) | set(links.members) | set(asked)):
            if name == links.node:
                continue
            address = links.members.get(name) or links.known.get(name, "")
            task = asked.get(name)
            if task is None:
                reason = "not linked" if name in links.members else "left the cluster"
                nodes.append(NodeView(name, address, DOWN, reason=reason))
            elif not task.done():
                task.cancel()
                reason = f"not all its figures within {self.gather_timeout:g} s"
                nodes.append(NodeView(name, address, DOWN, reason=reason))
            elif task.exception() is not None:
                nodes.append(NodeView(name, address, DOWN, reason=str(task.exception())))
            else:
                linked, figures = task.result()
                nodes.append(NodeView(name, address, UP, linked, figures=figures))
        nodes.sort(key=lambda n: n.name)
        return ClusterView(links.cluster_name, links.node, nodes, time.monotonic())

    async def _fetch_all(self, name: str) -> tuple[tuple[str, ...], dict[str, tuple[int, int]]]:
        """Every page of node ``name``'s figures, one request at a time."""
        loop = asyncio.get_running_loop()
        figures: dict[str, tuple[int, int]] = {}
        after = ""
        while True:
            request = next(self._ids)
            future: asyncio.Future[PeerStatsPage] = loop.create_future()
            self._waiting[request] = (name, future)
            try:
                if not self.links.send_stats(name, PeerStatsFetch(request, after)):
                    raise ConnectionError(f"the link to node {name} went down")
                try:
                    async with asyncio.timeout(self.timeout):
                        page = await future
                except TimeoutError:
                    raise TimeoutError(f"no answer within {self.timeout:g} s") from None
            finally:
                self._waiting.pop(request, None)
            for address, depth, consumers in page.destinations:
                figures[address] = (depth, consumers)
            if page.done or not page.destinations:
                return page.links, figures
            after = page.destinations[-1][0]

    # -- what arrives ------------------------------------------------------------------

    def on_page(self, name: str, page: PeerStatsPage) -> None:
        """A page arrived from node ``name`` (one not asked for, or too late, is dropped)."""
        waiting = self._waiting.get(page.request)
        if waiting is None or waiting[0] != name or waiting[1].done():
            return
        waiting[1].set_result(page)

    def on_fetch(self, name: str, fetch: PeerStatsFetch) -> None:
        """Node ``name`` asks for a page of this node's figures: answer at once.

        The first page of a walk (``after`` "") sorts this node's addresses once; the
        next pages of that node's walk go on in that list (a destination made since is
        in the next walk, one deleted since is left out), so a walk over N destinations
        costs about N, not N for each page."""
        host = self.links.cluster.host
        walk = self._walks.get(name)
        if not fetch.after or walk is None:
            walk = self._walks[name] = sorted(
                itertools.chain(host.queues, host.topics, host.streams)
            )
        end = bisect.bisect_right(walk, fetch.after)
        rows: list[tuple[str, int, int]] = []
        size = 0
        while end < len(walk) and len(rows) < PAGE_DESTINATIONS:
            address = walk[end]
            if rows and size + row_size(address) > PAGE_BYTES:
                break
            end += 1
            figures = _figures(host, address)
            if figures is not None:  # else deleted since the walk began
                size += row_size(address)
                rows.append((address, *figures))
        done = end >= len(walk)
        if done:
            del self._walks[name]
        links = tuple(sorted(self.links.links))
        self.links.send_stats(name, PeerStatsPage(fetch.request, done, links, tuple(rows)))

    def link_lost(self, name: str) -> None:
        """The link to ``name`` went down: what was asked of it will not come."""
        self._walks.pop(name, None)
        for node, future in list(self._waiting.values()):
            if node == name and not future.done():
                future.set_exception(ConnectionError(f"the link to node {name} went down"))


def _figures(host: Registry, address: str) -> tuple[int, int] | None:
    """Destination ``address``'s depth and consumers here (None: it is gone)."""
    queue = host.queues.get(address)
    if queue is not None:
        figures = queue_stats(queue)
    elif (topic := host.topics.get(address)) is not None:
        figures = topic_stats(topic)
    elif (stream := host.streams.get(address)) is not None:
        figures = stream_stats(stream)
    else:
        return None
    return int(figures["depth"]), int(figures["consumers"])


def seen_by(conn: BrokerConnection) -> Callable[[str], bool]:
    """Which addresses ``conn``'s user may see in statistics: any for a user who manages
    everything; else those they may browse, consume or manage."""
    if conn.principal.manages_all:
        return lambda address: True

    def sees(address: str) -> bool:
        for action in (Action.BROWSE, Action.CONSUME, Action.MANAGE):
            try:
                conn.authorize(action, address)
            except AccessDenied:
                continue
            return True
        return False

    return sees


def page_filter(
    conn: BrokerConnection, pattern: str | None, contains: str
) -> Callable[[str], bool]:
    """The filter a statistics page applies, for the other nodes' destinations:
    ``pattern``, ``contains`` and what ``conn``'s user may see.

    Raises:
        InvalidAddress: a bad ``pattern``.
    """
    sees = seen_by(conn)
    needle = contains.casefold()
    if pattern and "*" not in pattern:
        exact = canonical(pattern)
        matches: Callable[[str], bool] = lambda address: address == exact  # noqa: E731
    elif pattern:
        matches = pattern_matcher(pattern)
    else:
        matches = lambda address: True  # noqa: E731

    def keep(address: str) -> bool:
        return matches(address) and (not needle or needle in address.casefold()) and sees(address)

    return keep
