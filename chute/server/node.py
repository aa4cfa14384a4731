"""A broker as a node of a cluster: :class:`ClusterNode`, what ``[cluster]`` turns on.

Once the broker recovered, :meth:`ClusterNode.make` builds its
:class:`~chute.core.rules.cluster.Cluster` with a fresh random run id and takes the
ledgers back (``Cluster.recover``); once the listeners are open, :meth:`ClusterNode.start`
registers the node in etcd (:class:`~chute.cluster.membership.Membership`) at its
advertised address. A join makes the lower-named node dial the other
(:mod:`chute.server.peers`); a leave (the node stopped, or its lease ran out) closes the
link and gives back what was in doubt with it (``Cluster.node_gone``).
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from chute.cluster.etcd import EtcdClient
from chute.cluster.membership import EventKind, Membership, MembershipEvent
from chute.cluster.url import parse_cluster_url
from chute.core.rules.cluster import Cluster
from chute.server.peers import PeerLinks

if TYPE_CHECKING:
    from chute.server.host import ServerHost

log = logging.getLogger("chute.cluster")


class ClusterNode:
    """This broker's place in its cluster: the core's Cluster, the links, the membership."""

    def __init__(self, server: ServerHost) -> None:
        settings = server.config.cluster
        self.url = parse_cluster_url(settings.coordinator)
        self.settings = settings
        self.run = secrets.token_hex(8)
        self.links = PeerLinks(server, settings, self.url.name)
        self.cluster = self.links.cluster = Cluster(
            server.broker, self.links, node=settings.node, run=self.run
        )
        self.membership: Membership | None = None
        self._client: EtcdClient | None = None

    @classmethod
    def make(cls, server: ServerHost) -> ClusterNode:
        """The cluster's core over the recovered broker, its ledgers taken back."""
        node = cls(server)
        node.cluster.recover()
        return node

    async def start(self, native: tuple[str, int] | None) -> None:
        """Register in etcd and follow the other nodes. ``native``: the native listener's
        (host, port), the address advertised unless ``[cluster] advertise`` says.

        Raises:
            NodeNameTaken: a live process holds this node's name.
            EtcdUnavailable, EtcdAuthError: etcd cannot be used.
        """
        address = self.settings.advertise
        if not address:
            if native is None:
                raise RuntimeError("no native listener to advertise")
            address = f"{native[0]}:{native[1]}"
        self._client = EtcdClient.from_url(self.url)
        self.membership = Membership(
            self._client, self.url.name, self.settings.node, address=address, ttl=self.settings.ttl
        )
        self.membership.add_listener(self._changed)
        try:
            await self.membership.start()
        except BaseException:
            await self._client.close()
            raise
        log.info("cluster %s: node %s, run %s", self.url.name, self.settings.node, self.run)

    def _changed(self, event: MembershipEvent) -> None:
        member = event.member
        if event.kind is EventKind.JOIN:
            self.links.joined(member.name, member.address)
        else:
            self.links.left(member.name)

    async def stop(self) -> None:
        """Leave the cluster (at once: the lease is revoked) and close the links."""
        if self.membership is not None:
            await self.membership.stop()
        await self.links.close()
        if self._client is not None:
            await self._client.close()
