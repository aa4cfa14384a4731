"""What one node sees of its cluster: :class:`ClusterView`, and statistics pages with the
cluster in them.

A view is a snapshot: every node this one knows (the members, and those that left since
it started, shown ``down``), each with its address, state (``up``: this node, or linked
and answering; ``down``: with the reason), the nodes it is linked to, and, for the other
nodes that answered, each destination's depth and consumers there
(:mod:`chute.server.cluster_stats` gathers it over the links). :func:`add_homes` names
the home of each stream partition this node holds.

:meth:`ClusterView.merge` puts a view into one page of this node's statistics (see
:mod:`chute.core.operations.stats`): each destination gets ``nodes``, its depth and
consumers per node (this node's from the page itself, so they are current), and
``total``, their sums: the cluster's; a destination that only other nodes hold gets a
row of its own (address, kind, this node's counters at 0, ``nodes`` and ``total``).
Every counter of a row outside ``nodes`` and ``total`` stays this node's, as on a broker
on its own, so a script asking each node for its own figures reads them as before.
The page keeps address order and its ``limit``: rows from other nodes take their place
among this node's, and the page ends earlier when they fill it.

Pure: no sockets, no clock but the ``taken`` it is given.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

UP: Final = "up"
DOWN: Final = "down"

LOCAL_COUNTERS: Final = (
    "depth",
    "ready",
    "inflight",
    "consumers",
    "enqueued",
    "delivered",
    "acked",
    "expired",
    "dead_lettered",
)
"""This node's counters a row of a destination it does not hold has (at 0)."""

Figures = Mapping[str, tuple[int, int]]
"""A node's destinations: address -> (depth, consumers)."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as seen from this one."""

    name: str
    address: str
    state: str  # UP | DOWN
    links: tuple[str, ...] = ()
    reason: str = ""  # why down ("" when up)
    figures: Figures = field(default_factory=dict)  # other nodes that answered only

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "address": self.address,
            "state": self.state,
            "links": list(self.links),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(slots=True)
class ClusterView:
    """The cluster as node ``node`` saw it at ``taken`` (seconds, monotonic)."""

    name: str
    node: str
    nodes: Sequence[NodeView]  # by name, this node among them
    taken: float = 0.0
    _remote: list[str] = field(default_factory=list)  # addresses other nodes hold, sorted

    def __post_init__(self) -> None:
        self._remote = sorted({a for n in self.nodes for a in n.figures})

    def document(self) -> dict[str, Any]:
        """``{"name", "node", "nodes": [{"name", "address", "state", "links"[, "reason"]}]}``."""
        return {"name": self.name, "node": self.node, "nodes": [n.document() for n in self.nodes]}

    def answered(self) -> list[NodeView]:
        """The other nodes whose figures the view has (up, not this one)."""
        return [n for n in self.nodes if n.state == UP and n.name != self.node]

    def breakdown(self, address: str, depth: int, consumers: int) -> dict[str, dict[str, int]]:
        """Destination ``address``'s figures per node: this node's (as given), then each
        other node that answered and holds it."""
        nodes = {self.node: {"depth": depth, "consumers": consumers}}
        for n in self.answered():
            here = n.figures.get(address)
            if here is not None:
                nodes[n.name] = {"depth": here[0], "consumers": here[1]}
        return nodes

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row of this node's statistics with ``nodes`` and ``total`` added."""
        nodes = self.breakdown(row["address"], row.get("depth", 0), row.get("consumers", 0))
        row["nodes"] = nodes
        row["total"] = _total(nodes)
        return row

    def holds(self, address: str) -> bool:
        """Whether another node that answered holds ``address``."""
        i = bisect.bisect_left(self._remote, address)
        return i < len(self._remote) and self._remote[i] == address

    def remote_row(self, address: str) -> dict[str, Any]:
        """A row for a destination this node does not hold: this node's counters at 0,
        ``nodes`` and ``total``."""
        nodes = self.breakdown(address, 0, 0)
        del nodes[self.node]
        return {
            "address": address,
            "kind": address.partition(":")[0],
            **dict.fromkeys(LOCAL_COUNTERS, 0),
            "nodes": nodes,
            "total": _total(nodes),
        }

    def merge(
        self,
        rows: list[dict[str, Any]],
        after: str,
        next_after: str | None,
        limit: int,
        keep: Callable[[str], bool],
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of this node's statistics (``rows``, the destinations after
        ``after`` up to ``next_after``, None: to the end) with the cluster in it (see the
        module docstring); ``keep``: which of the other nodes' destinations the page may
        show (the page's pattern, filter and the asker's rights). Returns the rows and
        the next page's ``after``."""
        local = {row["address"] for row in rows}
        start = bisect.bisect_right(self._remote, after)
        stop = (
            len(self._remote)
            if next_after is None
            else bisect.bisect_right(self._remote, next_after)
        )
        extra = [self.remote_row(a) for a in self._remote[start:stop] if a not in local and keep(a)]
        merged = sorted([self.row(r) for r in rows] + extra, key=lambda r: str(r["address"]))
        if len(merged) > limit:
            del merged[limit:]
            return merged, merged[-1]["address"]
        return merged, next_after


def add_homes(rows: Iterable[dict[str, Any]], homes: Mapping[str, str]) -> None:
    """Give each stream partition's row (``stream:orders``, ``stream:orders#1``) its
    ``home``: the node that holds its log and gives its offsets, when this node knows it
    (the Spark source reads each partition there, docs/spark.md)."""
    for row in rows:
        if row.get("kind") == "stream":
            home = homes.get(str(row["address"]))
            if home is not None:
                row["home"] = home


def _total(nodes: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {
        "depth": sum(n["depth"] for n in nodes.values()),
        "consumers": sum(n["consumers"] for n in nodes.values()),
    }
