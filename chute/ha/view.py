"""What the rest of the server asks of high availability without loading it (no etcd
client, no aiohttp): whether a configuration runs a node with backups, and this
process's role for ``chute stat``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chute.config import ServerConfig

if TYPE_CHECKING:
    from chute.ha.role import Live


def wanted(config: ServerConfig) -> bool:
    """Does this configuration run the node with backups (a coordinator, a journal)?"""
    return (
        bool(config.cluster.coordinator)
        and config.nodes is None
        and config.storage.store == "journal"
    )


def add_view(stats: dict[str, Any], live: Live | None) -> None:
    """Put this process's ``role``, ``epoch`` and ``backups`` under ``stats["cluster"]``
    (``chute stat``), or in ``stats`` itself when it is the cluster document (``GET
    /api/cluster``: it has ``nodes``)."""
    if live is None:
        return
    target = stats if "nodes" in stats else stats.setdefault("cluster", {})
    target.update(live.view())
