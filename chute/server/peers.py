"""The links between the nodes of a cluster, over the native protocol: :class:`PeerLinks`.

The cluster's core (:class:`~chute.core.rules.cluster.Cluster`) decides what goes to
which node; this module carries it. One link per pair of nodes, and **the node with
the lower name dials** (names compare as strings): no two links race, so nothing
needs a tie-break. The dialer connects to the address the other node registered
(``advertise``), says ``Connect`` at protocol version :data:`PEER_VERSION` only (with
``[cluster] user`` and ``password`` once users are configured), then ``PeerOpen``;
the other side checks the cluster's name, the direction and the user's ``cluster``
grant, and answers ``Ok``. Each side then calls ``Cluster.link_up`` (which sends
``PeerResume`` first). A refusal (another protocol version, credentials, the name)
is logged once per reason, and the dialer tries again with backoff (0.1 s doubling
up to 5 s, with jitter), as it does after a lost link; it stops when the other node
leaves the cluster.

The PeerPort's contract: a hand-over, a confirm or a release goes out only once every
record the store was told so far is durable. A link (:class:`~chute.server.peers_link.PeerLink`)
holds such a packet and what follows it (the order on a link is the order of the
calls); this module asks the store for a sync (``ServerHost.request_sync``) and lets
the link write them once the store answers; packets that follow no such packet go out
at once. A failed sync closes the link (what was in doubt is sent again, with the same
keys, when it is up again). The dialing side of a link: :mod:`chute.server.peers_dial`.

Flow control: the core's windows (hand-overs unconfirmed per peer consumer, and per
link over all of them: :mod:`chute.core.rules.cluster_window`) bound what one node has
in flight to another, and so what the other has to store and confirm. A link also stops
reading while what it must write waits on the store past :data:`LINK_BACKLOG` bytes (the
store is slower than the other node sends: no more is read until a sync caught up, at
half of it), and, as any connection does, while its transport's write buffer is full
(the other node does not read what this one answers). Demands held behind a sync keep
only the last per address (consumers that come and go meanwhile cost one packet).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from chute.core.model.cluster import Demand, Handover, HandoverKey, KeyPairs, handover_keys
from chute.errors import AccessDenied, ChuteError, RemoteProtocolError
from chute.protocol import packets as p
from chute.protocol.peer_packets import Keys
from chute.protocol.wire import encode_packet
from chute.server.cluster_stats import ClusterStats
from chute.server.peers_dial import _Dialed
from chute.server.peers_link import LINK_BACKLOG, PeerLink, PeerRefused, always_reads

if TYPE_CHECKING:
    from chute.config import ServerConfig
    from chute.config.sections import ClusterSettings
    from chute.core.rules.cluster import Cluster
    from chute.core.rules.cluster_streams import ClusterStreams
    from chute.message import Message

__all__ = ["PEER_PACKETS", "LinkHost", "PeerLink", "PeerLinks", "PeerRefused"]

log = logging.getLogger("chute.cluster")

BACKOFF_MIN: Final = 0.1
BACKOFF_MAX: Final = 5.0
OPEN_TIMEOUT: Final = 5.0
"""Seconds a dialed node has to answer Connect and PeerOpen."""

PEER_PACKETS: Final = (
    p.PeerResume,
    p.PeerHandover,
    p.PeerHandovers,
    p.PeerConfirm,
    p.PeerRefuse,
    p.PeerRelease,
    p.PeerDemand,
    p.PeerStreamRead,
    p.PeerStreamRecords,
    p.PeerStatsFetch,
    p.PeerStatsPage,
)
"""What a link carries once open."""


class LinkHost(Protocol):
    """What the links need of the server (:class:`~chute.server.host.ServerHost` has it)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def loop_thread(self) -> int: ...

    def request_sync(
        self,
        callback: Callable[[BaseException | None], None],
        seal: Callable[[], None] | None = None,
    ) -> None: ...


def _keys(keys: KeyPairs) -> Keys:
    return tuple(keys)  # a HandoverKey is a (run, n) tuple


def _handover_keys(keys: Keys) -> list[HandoverKey]:
    return handover_keys(keys)


def _handover(packet: p.PeerHandover) -> Handover:
    return Handover(
        HandoverKey(packet.run, packet.n),
        packet.address,
        packet.message,
        packet.delivery_count,
        packet.redelivered,
    )


class PeerLinks:
    """This node's links to the others: the :class:`~chute.core.model.cluster.PeerPort`
    its Cluster sends through, the dialers, and what arrives. Used from the loop only."""

    def __init__(
        self,
        server: LinkHost,
        settings: ClusterSettings,
        cluster_name: str,
        *,
        backlog: int = LINK_BACKLOG,
    ) -> None:
        self.server = server
        self.backlog = backlog
        self.settings = settings
        self.node = settings.node
        self.cluster_name = cluster_name
        self._cluster: Cluster | None = None
        self.streams: ClusterStreams | None = None  # streams in the cluster, once made
        self.links: dict[str, PeerLink] = {}
        self.members: dict[str, str] = {}  # the other nodes known: name -> address
        self.known: dict[str, str] = {}  # every other node seen since start (left ones too)
        self.stats = ClusterStats(self)  # asks the others for their figures, and answers them
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._tls: ssl.SSLContext | None = None

    @property
    def cluster(self) -> Cluster:
        """The cluster's core these links carry for (set once, right after it is made)."""
        if self._cluster is None:
            raise RuntimeError("the links have no Cluster yet")
        return self._cluster

    @cluster.setter
    def cluster(self, cluster: Cluster) -> None:
        self._cluster = cluster

    # -- PeerPort --------------------------------------------------------------------

    def send_handover(self, peer: str, handover: Handover) -> None:
        link = self.links.get(peer)
        if link is None:
            return  # down: the cluster sends it again when the link is up
        link.durable = link.hold_handover(handover)
        if not link.syncing:
            self._sync(link)

    def send_confirm(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._send_keys(peer, p.PeerConfirm, keys)

    def send_refuse(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._send(peer, p.PeerRefuse(_keys(keys)), durable=False)

    def send_release(self, peer: str, keys: KeyPairs) -> None:
        self._send_keys(peer, p.PeerRelease, keys)

    def send_resume(
        self, peer: str, keys: Sequence[HandoverKey], demands: Sequence[Demand]
    ) -> None:
        packet = p.PeerResume(_keys(keys), tuple((d.address, d.selectors) for d in demands))
        self._send(peer, packet, durable=False)

    def send_demand(self, peer: str, demand: Demand) -> None:
        packet = p.PeerDemand(demand.address, demand.selectors)
        self._send(peer, packet, durable=False, demand=demand.address)

    # -- streams (chute.core.rules.cluster_streams.StreamPort's links) ----------------

    def send_stream_read(self, peer: str, address: str, start: int, limit: int) -> None:
        self._send(peer, p.PeerStreamRead(address, start, limit), durable=False)

    def send_stream_records(
        self, peer: str, address: str, following: int, records: Sequence[tuple[int, Message]]
    ) -> None:
        # after this turn (the commit appending them written to the store), then behind
        # a sync: a copy never holds what the home could lose in a crash
        packet = p.PeerStreamRecords(address, following, tuple(records))
        self.server.loop.call_soon(lambda: self._send(peer, packet, durable=True))

    def send_stats(self, peer: str, packet: p.PeerStatsFetch | p.PeerStatsPage) -> bool:
        """Send a packet of the statistics exchange; False: no link to ``peer``."""
        if peer not in self.links:
            return False
        self._send(peer, packet, durable=False)
        return True

    def _send(
        self, peer: str, packet: p.Packet, *, durable: bool, demand: str | None = None
    ) -> None:
        link = self.links.get(peer)
        if link is None:
            return  # down: the cluster sends again what matters when it is up
        data = encode_packet(packet, version=p.PEER_VERSION)
        if not durable and not link.pending:
            link.write(data)
            return
        link.hold(data, demand)
        if durable:
            link.durable = len(link.pending)
            self._sync(link)

    def _send_keys(
        self,
        peer: str,
        kind: type[p.PeerConfirm | p.PeerRelease],
        keys: KeyPairs,
    ) -> None:
        """A confirm or release: durable, gathered (:meth:`PeerLink.hold_keys`)."""
        link = self.links.get(peer)
        if link is None:
            return
        link.hold_keys(kind, _keys(keys))
        link.durable = len(link.pending)
        self._sync(link)

    def _sync(self, link: PeerLink) -> None:
        if link.syncing:
            return
        link.syncing = link.open = True
        link.covered = link.durable
        server = self.server

        def seal() -> None:
            # the sync starts: it covers every record told the store so far, so every
            # packet held so far; what is held from now on waits for the next
            link.open = False
            link.covered = link.durable

        def synced(error: BaseException | None) -> None:  # maybe on the store's thread
            if threading.get_ident() == server.loop_thread:
                self._synced(link, error)
            elif not server.loop.is_closed():
                server.loop.call_soon_threadsafe(self._synced, link, error)

        server.request_sync(synced, seal)

    def _synced(self, link: PeerLink, error: BaseException | None) -> None:
        covered = link.covered
        link.syncing = link.open = False
        link.covered = 0
        if link.closed:
            return
        if error is not None:
            log.error(
                "cluster: the store failed a sync (%s): closing the link to %s", error, link.name
            )
            link.close()
            self.lost(link)
            return
        link.flush(covered)
        link.durable -= covered
        if link.durable > 0:
            self._sync(link)
        else:
            link.flush(len(link.pending))

    # -- links up and down ----------------------------------------------------------

    def up(
        self,
        name: str,
        write: Callable[[bytes], None],
        close: Callable[[], None],
        reading: Callable[[bool], None] = always_reads,
    ) -> PeerLink:
        """A link to ``name`` was opened (dialed or accepted): it replaces any older one.
        ``reading(False)`` stops its transport's reading, ``reading(True)`` resumes it."""
        old = self.links.get(name)
        if old is not None:
            old.close()
            self.lost(old)
        link = self.links[name] = PeerLink(name, write, close, reading, self.backlog)
        log.info("cluster: linked to node %s", name)
        self.cluster.link_up(name)
        if self.streams is not None:
            self.streams.link_up(name)
        return link

    def lost(self, link: PeerLink) -> None:
        """``link`` is gone (its connection lost or closed)."""
        if link.closed:
            return
        link.closed = True
        link.pending.clear()
        link.demands.clear()
        link.backlog = 0
        if self.links.get(link.name) is link:
            del self.links[link.name]
            log.info("cluster: the link to node %s is down", link.name)
            self.cluster.link_down(link.name)
            if self.streams is not None:
                self.streams.link_down(link.name)
            self.stats.link_lost(link.name)

    def accept(self, cluster: str, node: str, principal_may: bool) -> None:
        """Check a PeerOpen received (the caller then calls :meth:`up`).

        Raises:
            AccessDenied: the connection's user has no ``cluster`` grant.
            PeerRefused: another cluster, this node's own name, or the wrong direction.
        """
        if not principal_may:
            raise AccessDenied("this user may not link as a node of the cluster (no cluster grant)")
        if cluster != self.cluster_name:
            raise PeerRefused(f"this node is in cluster {self.cluster_name!r}, not {cluster!r}")
        if not node < self.node:
            raise PeerRefused(
                f"node {node!r} may not dial node {self.node!r}: the node with the lower name dials"
            )

    def received(self, link: PeerLink, packet: object) -> None:
        """A packet arrived on ``link``."""
        cluster, name = self.cluster, link.name
        if isinstance(packet, p.PeerHandover):
            cluster.on_handover(name, _handover(packet))
        elif isinstance(packet, p.PeerHandovers):
            cluster.on_handovers(name, packet.handovers)
        elif isinstance(packet, p.PeerConfirm):
            cluster.on_confirm(name, packet.keys)  # pairs find their keys as they are
        elif isinstance(packet, p.PeerRefuse):
            cluster.on_refuse(name, _handover_keys(packet.keys))
        elif isinstance(packet, p.PeerRelease):
            cluster.on_release(name, packet.keys)
        elif isinstance(packet, p.PeerDemand):
            cluster.on_demand(name, Demand(packet.address, packet.selectors))
        elif isinstance(packet, p.PeerResume):
            demands = [Demand(a, s) for a, s in packet.demands]
            cluster.on_resume(name, _handover_keys(packet.keys), demands)
        elif isinstance(packet, p.PeerStreamRead) and self.streams is not None:
            self.streams.on_read(name, packet.address, packet.start, packet.limit)
        elif isinstance(packet, p.PeerStreamRecords) and self.streams is not None:
            self.streams.on_records(name, packet.address, packet.next, packet.records)
        elif isinstance(packet, p.PeerStatsFetch):
            self.stats.on_fetch(name, packet)
        elif isinstance(packet, p.PeerStatsPage):
            self.stats.on_page(name, packet)
        else:
            raise RemoteProtocolError(
                f"a node may not send {type(packet).__name__} on a link", "unexpected-packet"
            )

    # -- membership ------------------------------------------------------------------

    def joined(self, name: str, address: str) -> None:
        """``name`` is a member, at ``address``: the lower name dials."""
        if name == self.node:
            self.stats.address = address
            return
        self.members[name] = self.known[name] = address
        if self.node < name and name not in self._dialers:
            self._dialers[name] = asyncio.create_task(self._dial(name), name=f"cluster-dial-{name}")

    def left(self, name: str) -> None:
        """``name`` left the cluster for good (stopped, or its lease expired)."""
        if name == self.node:
            return
        self.members.pop(name, None)
        dialer = self._dialers.pop(name, None)
        if dialer is not None:
            dialer.cancel()
        link = self.links.get(name)
        if link is not None:
            link.close()
            self.lost(link)
        self.cluster.node_gone(name)

    async def close(self) -> None:
        """Stop dialing and close every link."""
        dialers = list(self._dialers.values())
        self._dialers.clear()
        for task in dialers:
            task.cancel()
        await asyncio.gather(*dialers, return_exceptions=True)
        for link in list(self.links.values()):
            link.close()
            self.lost(link)

    async def _dial(self, name: str) -> None:
        delay = BACKOFF_MIN
        said: str | None = None
        while name in self.members:
            address = self.members[name]
            try:
                lost = await self._open(name, address)
            except (OSError, TimeoutError, ChuteError) as exc:
                reason = str(exc) or type(exc).__name__
                if reason != said:
                    log.warning(
                        "cluster: cannot link to node %s at %s: %s (trying again)",
                        name,
                        address,
                        reason,
                    )
                    said = reason
                else:
                    log.debug("cluster: cannot link to node %s yet: %s", name, reason)
            else:
                said = None
                delay = BACKOFF_MIN
                await lost
            await asyncio.sleep(delay * (1 - random.random() / 4))  # noqa: S311 - jitter
            delay = min(delay * 2, BACKOFF_MAX)

    def _tls_context(self) -> ssl.SSLContext | None:
        """With ``[cluster] tls``: trust ``tls.ca`` (else the system's store) for the other
        nodes' certificates, and show them this node's own (made once)."""
        if not self.settings.tls:
            return None
        if self._tls is None:
            tls = self.server.config.tls
            try:
                context = ssl.create_default_context(cafile=tls.ca or None)
                context.load_cert_chain(tls.cert, tls.key or None)
            except (OSError, ssl.SSLError) as exc:
                raise PeerRefused(f"cannot load this node's TLS files: {exc}") from None
            self._tls = context
        return self._tls

    async def _open(self, name: str, address: str) -> asyncio.Future[None]:
        """Dial ``name``; once the link is up, a future done when it is lost."""
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        host = host.strip("[]")
        async with asyncio.timeout(OPEN_TIMEOUT):
            transport, protocol = await loop.create_connection(
                lambda: _Dialed(self, name),
                host,
                int(port),
                ssl=self._tls_context(),
                server_hostname=host if self.settings.tls else None,
            )
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                await asyncio.shield(protocol.opened)
        except BaseException:
            transport.close()
            raise
        return protocol.lost
