"""Where a task reads a stream partition: straight from the partition's home node.

In a cluster each stream partition has a home, the node that holds its log and gives
its offsets; the other nodes keep copies, a moment behind. The driver asks the node
its URL names (``stat`` over ``stream:*``): each partition's row names its ``home``,
and the cluster's nodes their native addresses (:func:`look_up`). Planning gives each
task its partition's home (:attr:`~chute.spark.streams.StreamRange.home`), and the
task reads there (:func:`at_home`), so the nodes serve a query's partitions in
parallel instead of one node serving them all.

A correct result always, speed second: a task falls back to the URL's node, which
gave the batch's offsets and so holds its whole range, when the home cannot be
reached, refuses the connection, or does not hold the whole range (the home moved,
or it restarted and lost what it had not written); and a task whose home goes away
in the middle of a read reads on from the next offset through the URL
(:mod:`chute.spark.streams`). Homes are only for ``chute://`` and ``chutes://`` URLs:
a node's address is its native port, which a WebSocket or HTTP client cannot use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from chute.client.blocking import BlockingConnection
from chute.errors import ChuteError
from chute.spark.options import ChuteOptions

log = logging.getLogger("chute.spark")

REFRESH_S: Final = 60.0
"""How old the homes a driver knows may grow before it asks for them again."""
REASK_S: Final = 10.0
"""How soon a driver asks again for homes it was not told (a partition made since, a
home not agreed yet, a home node down): at most this often."""


def look_up(conn: BlockingConnection) -> dict[str, str] | None:
    """The native address (``host:port``) of the home of each stream partition the node
    of ``conn`` knows, by partition's address; None from a broker that is not a node of
    a cluster. A partition whose home is down, or not known yet, is left out.

    Raises:
        ChuteError: the broker refused or did not answer.
    """
    stats = conn.stat("stream:*")
    cluster = stats.get("cluster")
    if not cluster:
        return None
    nodes = {
        str(n["name"]): str(n["address"])
        for n in cluster.get("nodes", ())
        if n.get("state") == "up" and n.get("address")
    }
    return {
        str(row["address"]): nodes[str(row["home"])]
        for row in stats.get("destinations", ())
        if str(row.get("home")) in nodes
    }


class HomeBook:
    """What a driver knows of the homes, asked again when it grows old or misses one
    (:data:`REFRESH_S`, :data:`REASK_S`)."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options
        self.homes: dict[str, str] = {}
        self.clustered = True  # until a broker says it is not a node of a cluster
        self._asked = -REFRESH_S  # monotonic time of the last answer (never: long ago)
        self._said = False

    def homes_of(self, conn: BlockingConnection, addresses: Iterable[str]) -> dict[str, str]:
        """The homes of ``addresses`` (those known), asking ``conn``'s node when due."""
        if not self.options.direct:
            return {}
        wanted = list(addresses)
        age = time.monotonic() - self._asked
        missing = self.clustered and any(a not in self.homes for a in wanted)
        if age >= REFRESH_S or (missing and age >= REASK_S):
            try:
                found = look_up(conn)
                self.clustered = found is not None
                self.homes = found or {}
            except (ChuteError, OSError) as exc:
                if not self._said:
                    log.warning(
                        "cannot learn the homes of the streams' partitions (%s); reading "
                        "them through %s",
                        exc,
                        conn.node,
                    )
                    self._said = True
            self._asked = time.monotonic()
        return {a: self.homes[a] for a in wanted if a in self.homes}


def at_home(options: ChuteOptions, address: str, home: str, end: int) -> BlockingConnection | None:
    """A connection to ``home`` (``host:port``) if it holds ``address`` up to ``end``
    (exclusive); else None, and the caller reads through the URL (:func:`fall_back`
    says so)."""
    try:
        conn = options.connect_node(home)
    except (ChuteError, OSError) as exc:
        fall_back(options, address, home, f"cannot be reached ({exc})")
        return None
    try:
        _, head = conn.cursor_open(address)
    except (ChuteError, OSError) as exc:
        conn.close()
        fall_back(options, address, home, f"did not answer ({exc})")
        return None
    if head < end:
        conn.close()
        fall_back(
            options, address, home, f"holds offsets below {head} only, not up to {end} (moved?)"
        )
        return None
    return conn


_TOLD: set[tuple[str, str]] = set()
"""The (partition, home) pairs this process warned of (a Python worker reads many tasks)."""


def fall_back(options: ChuteOptions, address: str, home: str, why: str) -> None:
    """Log that a task of ``address`` reads through the URL, not on ``home``: a warning
    the first time for that partition and home in this process, then at DEBUG (a home
    that is down would otherwise be told of at every batch)."""
    level = logging.DEBUG if (address, home) in _TOLD else logging.WARNING
    _TOLD.add((address, home))
    log.log(
        level,
        "%s: its home %s %s; reading it through %s",
        address,
        home,
        why,
        options.url_shown,
    )
