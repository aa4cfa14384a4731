"""A broker as a node of a cluster: :class:`ClusterNode`, what ``[cluster]`` turns on.

Once the broker recovered, :meth:`ClusterNode.make` builds its
:class:`~chute.core.rules.cluster.Cluster` with a fresh random run id and takes the
ledgers back (``Cluster.recover``); once the listeners are open, :meth:`ClusterNode.start`
registers the node in etcd (:class:`~chute.cluster.membership.Membership`) at its
advertised address. A join makes the lower-named node dial the other
(:mod:`chute.server.peers`); a leave (the node stopped, or its lease ran out) closes the
link and gives back what was in doubt with it (``Cluster.node_gone``).

A node of ``chute serve --nodes`` (``config.nodes``) has no etcd: its
:class:`~chute.cluster.fixed.FixedMembership` joins every node its parent named, at
once, and none ever leaves (a node that is down is a link that reconnects).

Streams (:class:`~chute.core.rules.cluster_streams.ClusterStreams`) find their home
through :class:`~chute.cluster.homes.Homes`: agreed in etcd (:class:`EtcdHomes`, once
:meth:`ClusterNode.start` reached etcd; streams made before wait for it), or, for a
fixed membership, by a rule every node computes alike (:class:`FixedHomes`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chute.cluster.etcd import EtcdClient
from chute.cluster.fixed import FixedMembership
from chute.cluster.homes import EtcdHomes, FixedHomes, Homes
from chute.cluster.membership import EventKind, LeaseSource, Membership, MembershipEvent
from chute.cluster.url import ClusterUrl, parse_cluster_url
from chute.core.model.address import split_partition
from chute.core.rules.cluster import Cluster
from chute.core.rules.cluster_streams import ClusterStreams
from chute.server.peers import PeerLinks

if TYPE_CHECKING:
    from chute.message import Message
    from chute.server.host import ServerHost

log = logging.getLogger("chute.cluster")


class ClusterNode:
    """This broker's place in its cluster: the core's Cluster, the links, the membership."""

    def __init__(self, server: ServerHost) -> None:
        settings = server.config.cluster
        self.fixed = server.config.nodes
        self.url: ClusterUrl | None = None  # None: a fixed cluster, no coordinator
        if self.fixed is None:
            self.url = parse_cluster_url(settings.coordinator)
            self.name = self.url.name
        else:
            self.name = self.fixed.cluster
        self.settings = settings
        self.run = secrets.token_hex(8)
        self.links = PeerLinks(server, settings, self.name)
        self.cluster = self.links.cluster = Cluster(
            server.broker, self.links, node=settings.node, run=self.run
        )
        self.membership: Membership | FixedMembership | None = None
        self.lease: LeaseSource | None = None  # a live's lease (chute.ha): the key goes with it
        self._client: EtcdClient | None = None
        self.homes: Homes | None = (
            None if self.fixed is None else FixedHomes(list(self.fixed.members))
        )
        self._wanted: set[str] = set()  # streams whose home is asked for, or to be
        self._asking: set[asyncio.Task[None]] = set()
        self.streams = self.links.streams = ClusterStreams(
            server.broker, self.cluster, _StreamPort(self), node=settings.node
        )

    @classmethod
    def make(cls, server: ServerHost, homes: Homes | None = None) -> ClusterNode:
        """The cluster's core over the recovered broker, its ledgers taken back.
        ``homes``: where streams live, when not agreed in etcd (a fixed membership)."""
        node = cls(server)
        if homes is not None:
            node.homes = homes
        node.streams.recover()  # first: its forward queues hold what Cluster finds in doubt
        node.cluster.recover()
        return node

    def want_home(self, address: str) -> str | None:
        """:meth:`StreamPort.want_home <chute.core.rules.cluster_streams.StreamPort.want_home>`."""
        if self.homes is None:
            self._wanted.add(address)  # asked once etcd is reached
            return None
        home = self.homes.known(*split_partition(address))
        if home is not None or address in self._wanted:
            return home
        self._wanted.add(address)
        task = asyncio.get_running_loop().create_task(self._find_home(self.homes, address))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)
        return None

    async def _find_home(self, homes: Homes, address: str) -> None:
        home = await homes.home_of(*split_partition(address))  # a partition's own home
        self._wanted.discard(address)
        self.streams.home_known(address, home)

    async def start(self, native: tuple[str, int] | None) -> None:
        """Register in etcd and follow the other nodes. ``native``: the native listener's
        (host, port), the address advertised unless ``[cluster] advertise`` says.

        Raises:
            NodeNameTaken: a live process holds this node's name.
            EtcdUnavailable, EtcdAuthError: etcd cannot be used.
        """
        if self.fixed is not None:
            self.membership = FixedMembership(self.fixed)
            self.membership.add_listener(self._changed)
            await self.membership.start()
            log.info(
                "cluster %s: node %s of %d, run %s",
                self.name,
                self.fixed.node,
                len(self.fixed.members),
                self.run,
            )
            return
        if self.url is None:
            raise RuntimeError("a cluster node with neither a coordinator nor fixed members")
        address = self.settings.advertise
        if not address:
            if native is None:
                raise RuntimeError("no native listener to advertise")
            address = f"{native[0]}:{native[1]}"
        self._client = EtcdClient.from_url(self.url)
        self.membership = Membership(
            self._client,
            self.name,
            self.settings.node,
            address=address,
            ttl=self.settings.ttl,
            lease=self.lease,
        )
        self.membership.add_listener(self._changed)
        try:
            await self.membership.start()
        except BaseException:
            await self._client.close()
            raise
        if self.homes is None:
            membership = self.membership
            self.homes = EtcdHomes(  # partitions spread over the live members
                self._client, self.name, self.settings.node, members=lambda: membership.members
            )
            for address in sorted(self._wanted):
                self._wanted.discard(address)
                self.want_home(address)
        log.info("cluster %s: node %s, run %s", self.name, self.settings.node, self.run)

    def _changed(self, event: MembershipEvent) -> None:
        member = event.member
        if event.kind is EventKind.JOIN:
            self.links.joined(member.name, member.address)
        else:
            self.links.left(member.name)

    async def stop(self) -> None:
        """Leave the cluster (at once: the lease is revoked) and close the links."""
        for task in list(self._asking):
            task.cancel()
        await asyncio.gather(*self._asking, return_exceptions=True)
        if self.membership is not None:
            await self.membership.stop()
        await self.links.close()
        if self._client is not None:
            await self._client.close()


class _StreamPort:
    """:class:`~chute.core.rules.cluster_streams.StreamPort`: homes from the node, the
    rest over its links."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    def want_home(self, address: str) -> str | None:
        return self.node.want_home(address)

    def send_stream_read(self, peer: str, address: str, start: int, limit: int) -> None:
        self.node.links.send_stream_read(peer, address, start, limit)

    def send_stream_records(
        self, peer: str, address: str, following: int, records: Sequence[tuple[int, Message]]
    ) -> None:
        self.node.links.send_stream_records(peer, address, following, records)
