"""The admin API's view of the cluster: ``GET /api/cluster``, and the per-node figures on
``/api/destinations`` and ``/api/destinations/{address}``.

From a node of a cluster, the nodes are asked for their figures
(:mod:`chute.server.cluster_stats`: at most 2 s for each answer and 10 s for all of a
node's; a node that does not answer in time is shown ``down``) and the view is merged
into what this node reports (:mod:`chute.server.cluster_view`): a destination gets
``nodes``, its depth and consumers on each node, and ``total``, the cluster's (and a
stream partition its ``home``, the node that holds its log); its
other fields stay this node's; a destination only other nodes hold is listed and shown
too. A broker that is not a node of a cluster answers ``/api/cluster`` 404 and its
destinations as before.

Lives on the server's event loop only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chute.core.operations.browse import clamp
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.stats import STAT_PAGE
from chute.errors import NotFound
from chute.ha.view import add_view
from chute.server.cluster_stats import ClusterStats, page_filter
from chute.server.cluster_view import add_homes
from chute.server.host import ServerHost


def _homes(server: ServerHost) -> Mapping[str, str]:
    """The homes of the stream partitions this node knows (none: not a node of a cluster)."""
    peers = server.peers
    streams = None if peers is None else peers.streams
    return {} if streams is None else streams.homes


def exchange(server: ServerHost) -> ClusterStats | None:
    """This node's statistics exchange; None: not a node of a cluster."""
    peers = server.peers
    return None if peers is None else peers.stats


async def cluster_document(server: ServerHost) -> dict[str, Any]:
    """``{"name", "node", "nodes": [{"name", "address", "state", "links"[, "reason"]}]}``,
    with this process's ``role``, ``epoch`` and ``backups`` when the node has backups
    (:func:`chute.ha.view.add_view`).

    Raises:
        NotFound: this broker is not a node of a cluster.
    """
    stats = exchange(server)
    if stats is None:
        raise NotFound("this broker is not a node of a cluster")
    view = await stats.view()
    document = view.document()
    add_view(document, server.ha)
    return document


async def cluster_page(
    server: ServerHost,
    conn: BrokerConnection,
    *,
    pattern: str | None,
    after: str,
    limit: int,
    contains: str,
) -> dict[str, Any]:
    """One page of destinations as :meth:`BrokerConnection.stats_page` gives it, with the
    cluster in it from a node of one (the first page asks the nodes; the next ones of
    the walk reuse that view for a while).

    Raises:
        InvalidAddress: a bad ``pattern``.
    """
    stats = exchange(server)
    view = None if stats is None else await stats.view(fresh=not after)
    limit = clamp(limit, STAT_PAGE)
    page = conn.stats_page(pattern=pattern, after=after, limit=limit, contains=contains)
    if view is not None:
        keep = page_filter(conn, pattern, contains)
        page["destinations"], page["next"] = view.merge(
            page["destinations"], after, page["next"], limit, keep
        )
        add_homes(page["destinations"], _homes(server))
    return page


async def with_nodes(
    server: ServerHost, address: str, found: dict[str, Any] | None
) -> dict[str, Any]:
    """One destination (``found``: this node's figures; None: it holds none) with its
    figures per node from a node of a cluster.

    Raises:
        NotFound: no node that answered holds it.
    """
    stats = exchange(server)
    if stats is None:
        if found is None:
            raise NotFound(f"no destination {address}")
        return found
    view = await stats.view()
    if found is not None:
        add_homes([found], _homes(server))
        return view.row(found)
    if not view.holds(address):
        raise NotFound(f"no destination {address} on any node of the cluster")
    return {**view.remote_row(address), "consumers_detail": []}
