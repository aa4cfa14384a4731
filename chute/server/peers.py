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
record the store was told so far is durable. A link queues such a packet and what
follows it (the order on a link is the order of the calls) behind a sync request
(``ServerHost.request_sync``), and writes them once the store answers; packets that
follow no such packet go out at once. A failed sync closes the link (what was in
doubt is sent again, with the same keys, when it is up again).

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
import contextlib
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, cast

from chute.core.model.cluster import Demand, Handover, HandoverKey
from chute.errors import AccessDenied, ChuteError, RemoteProtocolError
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.peer_packets import Keys
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server.cluster_stats import ClusterStats

if TYPE_CHECKING:
    from chute.config import ServerConfig
    from chute.config.sections import ClusterSettings
    from chute.core.rules.cluster import Cluster
    from chute.core.rules.cluster_streams import ClusterStreams
    from chute.message import Message

log = logging.getLogger("chute.cluster")

BACKOFF_MIN: Final = 0.1
BACKOFF_MAX: Final = 5.0
OPEN_TIMEOUT: Final = 5.0
"""Seconds a dialed node has to answer Connect and PeerOpen."""
LINK_BACKLOG: Final = 1 << 20
"""Bytes a link may hold waiting for the store's sync before it stops reading (it reads
again once they are down to half)."""


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


class PeerRefused(ChuteError):
    """The other node refused the link (its answer says why)."""

    code = "peer-refused"


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


MAX_BATCHED_KEYS: Final = 4096
"""The most keys one PeerConfirm or PeerRelease gathers while it waits for a sync."""


KEY_BYTES: Final = 24
"""What one key of a gathered confirm or release counts for in a link's backlog (about
its encoded size)."""

MAX_BATCHED_HANDOVERS: Final = 1024
"""The most hand-overs one PeerHandovers gathers while it waits for a sync."""

MAX_BATCHED_BYTES: Final = 1 << 20
"""The most bytes of messages one PeerHandovers gathers (it may pass it by one message)."""

HANDOVER_BYTES: Final = 64
"""What one hand-over counts for in a link's backlog besides its message's size."""


class _Batch:
    """Confirms (or releases) waiting behind a sync, one after the other: they go as one
    packet of all their keys."""

    __slots__ = ("keys", "kind")

    def __init__(self, kind: type[p.PeerConfirm | p.PeerRelease], keys: Keys) -> None:
        self.kind = kind
        self.keys = list(keys)

    def encode(self) -> bytes:
        return encode_packet(self.kind(tuple(self.keys)), version=p.PEER_VERSION)


class _Handovers:
    """Hand-overs of one run waiting behind a sync, one after the other: they go as one
    ``PeerHandovers`` (a ``PeerHandover`` if alone), which the other node stores in one
    commit and confirms in one confirm."""

    __slots__ = ("items", "run", "size")

    def __init__(self, first: p.PeerHandover) -> None:
        self.run = first.run
        self.items = [first]
        self.size = first.message.size + HANDOVER_BYTES

    def encode(self) -> bytes:
        if len(self.items) == 1:
            return encode_packet(self.items[0], version=p.PEER_VERSION)
        packet = p.PeerHandovers(self.run, tuple(self.items))
        return encode_packet(packet, version=p.PEER_VERSION)


def _reads(reading: bool) -> None:
    """A link's transport that cannot stop reading (a test's)."""


class PeerLink:
    """One link that is up: writes packets in order, holding what follows a packet that
    must wait for the store's sync, and stops its transport's reading (``reading(False)``)
    while that holds more than ``bound`` bytes."""

    def __init__(
        self,
        name: str,
        write: Callable[[bytes], None],
        close: Callable[[], None],
        reading: Callable[[bool], None] = _reads,
        bound: int = LINK_BACKLOG,
    ) -> None:
        self.name = name
        self.write = write
        self.close = close
        self.reading = reading
        self.bound = bound
        self.pending: list[bytes | _Batch | _Handovers] = []  # b"": a demand replaced
        self.backlog = 0  # bytes in pending
        self.flushed = 0  # packets that left pending so far (pending[0]'s number)
        self.demands: dict[str, int] = {}  # address -> the number of its demand held
        self.paused = False  # reading stopped for the backlog
        self.durable = 0  # pending[:durable] may go once a sync covers them
        self.covered = 0  # pending[:covered] go once the sync asked for is done
        self.syncing = False
        self.closed = False

    def hold(self, data: bytes, demand: str | None = None) -> None:
        """Keep ``data`` until a sync lets it go; past the bound, stop reading. A demand
        (of the address ``demand``) replaces the one held for that address, if any: what
        the other node must know is the last (it goes where the last one was asked)."""
        if demand is not None:
            earlier = self.demands.get(demand, -1) - self.flushed
            if earlier >= 0:
                replaced = self.pending[earlier]
                if isinstance(replaced, bytes):
                    self.backlog -= len(replaced)
                    self.pending[earlier] = b""
            self.demands[demand] = self.flushed + len(self.pending)
        self.pending.append(data)
        self._grew(len(data))

    def hold_keys(self, kind: type[p.PeerConfirm | p.PeerRelease], keys: Keys) -> None:
        """Keep a confirm or release until a sync lets it go: joined to the same kind of
        packet right before it when that one is not yet covered by the sync asked for
        (what this one says may not be on disk when that sync is done)."""
        last = self.pending[-1] if len(self.pending) > self.covered else None
        if isinstance(last, _Batch) and last.kind is kind and len(last.keys) < MAX_BATCHED_KEYS:
            last.keys.extend(keys)
        else:
            self.pending.append(_Batch(kind, keys))
        self._grew(len(keys) * KEY_BYTES)

    def hold_handover(self, packet: p.PeerHandover) -> None:
        """Keep a hand-over until a sync lets it go: joined to the hand-overs right before it
        when those are not yet covered by the sync asked for (as :meth:`hold_keys`)."""
        last = self.pending[-1] if len(self.pending) > self.covered else None
        if (
            isinstance(last, _Handovers)
            and last.run == packet.run
            and len(last.items) < MAX_BATCHED_HANDOVERS
            and last.size < MAX_BATCHED_BYTES
        ):
            last.items.append(packet)
            size = packet.message.size + HANDOVER_BYTES
            last.size += size
        else:
            last = _Handovers(packet)
            self.pending.append(last)
            size = last.size
        self._grew(size)

    def _grew(self, size: int) -> None:
        self.backlog += size
        if not self.paused and self.backlog > self.bound:
            self.paused = True
            self.reading(False)

    def flush(self, count: int) -> None:
        """Write the first ``count`` packets held, in one write; below half the bound,
        read again."""
        items = self.pending[:count]
        del self.pending[:count]
        self.flushed += count
        data: list[bytes] = []
        for item in items:
            if isinstance(item, _Batch):
                self.backlog -= len(item.keys) * KEY_BYTES
                data.append(item.encode())
            elif isinstance(item, _Handovers):
                self.backlog -= item.size
                data.append(item.encode())
            elif item:
                self.backlog -= len(item)
                data.append(item)
        if data:
            self.write(b"".join(data))
        if not self.pending:
            self.demands.clear()
        if self.paused and self.backlog <= self.bound // 2:
            self.paused = False
            self.reading(True)


def _keys(keys: Sequence[HandoverKey]) -> Keys:
    return tuple((k.run, k.n) for k in keys)


def _handover_keys(keys: Keys) -> list[HandoverKey]:
    return [HandoverKey(run, n) for run, n in keys]


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
        key = handover.key
        packet = p.PeerHandover(
            key.run,
            key.n,
            handover.address,
            handover.delivery_count,
            handover.redelivered,
            handover.message,
        )
        link = self.links.get(peer)
        if link is None:
            return  # down: the cluster sends it again when the link is up
        link.hold_handover(packet)
        link.durable = len(link.pending)
        self._sync(link)

    def send_confirm(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._send_keys(peer, p.PeerConfirm, keys)

    def send_refuse(self, peer: str, keys: Sequence[HandoverKey]) -> None:
        self._send(peer, p.PeerRefuse(_keys(keys)), durable=False)

    def send_release(self, peer: str, keys: Sequence[HandoverKey]) -> None:
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
        keys: Sequence[HandoverKey],
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
        link.syncing = True
        covered = link.covered = link.durable
        server = self.server

        def synced(error: BaseException | None) -> None:  # maybe on the store's thread
            if threading.get_ident() == server.loop_thread:
                self._synced(link, covered, error)
            elif not server.loop.is_closed():
                server.loop.call_soon_threadsafe(self._synced, link, covered, error)

        server.request_sync(synced)

    def _synced(self, link: PeerLink, covered: int, error: BaseException | None) -> None:
        link.syncing = False
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
        reading: Callable[[bool], None] = _reads,
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
            cluster.on_handovers(name, [_handover(h) for h in packet.handovers])
        elif isinstance(packet, p.PeerConfirm):
            cluster.on_confirm(name, _handover_keys(packet.keys))
        elif isinstance(packet, p.PeerRefuse):
            cluster.on_refuse(name, _handover_keys(packet.keys))
        elif isinstance(packet, p.PeerRelease):
            cluster.on_release(name, _handover_keys(packet.keys))
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
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Dialed(self, name),
                host,
                int(port),
                ssl=self._tls_context(),
                server_hostname=host if self.settings.tls else None,
            ),
            OPEN_TIMEOUT,
        )
        try:
            await asyncio.wait_for(asyncio.shield(protocol.opened), OPEN_TIMEOUT)
        except BaseException:
            transport.close()
            raise
        return protocol.lost


class _Dialed(asyncio.Protocol):
    """The dialing side of a link: Connect, PeerOpen, then the link's packets."""

    def __init__(self, links: PeerLinks, name: str) -> None:
        self.links = links
        self.name = name
        self.codec = PacketCodec(max_packet_size=links.server.config.limits.max_packet_size)
        self.codec.version = p.PEER_VERSION
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.link: PeerLink | None = None
        self.transport: asyncio.Transport | None = None
        self.last_read = self.last_write = time.monotonic()
        self._every = 0.0  # heart-beats agreed: seconds (0: none)
        self._beat: asyncio.TimerHandle | None = None
        self._holds: set[str] = set()  # why it does not read now (none: it reads)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        settings = self.links.settings
        connect = p.Connect(
            min_version=p.PEER_VERSION,
            max_version=p.PEER_VERSION,
            client_id=f"chute-node:{self.links.node}",
            login=settings.user or None,
            passcode=settings.password or None,
            heartbeat_ms=self.links.server.config.sessions.heartbeat_ms,
        )
        self._write(encode_packet(connect, 1, version=p.PEER_VERSION))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.last_write = time.monotonic()

    def _heartbeat(self) -> None:
        """Ping after half the agreed time without writing; give the link up after three
        times that without reading (the other node stopped answering, or the network
        between the two is cut while etcd still sees both)."""
        if self.transport is None:
            return
        now = time.monotonic()
        if "backlog" in self._holds:  # its heart-beats wait unread behind this node's store
            self.last_read = now
        if now - self.last_read > 3 * self._every:
            log.warning(
                "cluster: node %s is silent for %.1f s: closing the link",
                self.name,
                now - self.last_read,
            )
            self._close()
            return
        if now - self.last_write >= self._every / 2:
            self._write(encode_packet(p.Ping(), version=p.PEER_VERSION))
        self._beat = asyncio.get_running_loop().call_later(self._every / 2, self._heartbeat)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _hold(self, reason: str, held: bool) -> None:
        """Stop or resume reading for ``reason``: it reads while no reason holds it."""
        before = bool(self._holds)
        if held:
            self._holds.add(reason)
        else:
            self._holds.discard(reason)
        transport = self.transport
        if bool(self._holds) is before or transport is None or transport.is_closing():
            return
        if self._holds:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _backlog(self, reading: bool) -> None:
        self._hold("backlog", not reading)

    def pause_writing(self) -> None:
        self._hold("write buffer", True)

    def resume_writing(self) -> None:
        self._hold("write buffer", False)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            self.codec.receive_data(data)
            while True:
                item = self.codec.next_packet()
                if isinstance(item, NeedData):
                    return
                self._packet(item[1])
        except (RemoteProtocolError, PeerRefused) as exc:
            if not self.opened.done():
                self.opened.set_exception(exc)
            else:
                log.warning("cluster: the link to node %s failed: %s", self.name, exc)
            self._close()

    def _packet(self, packet: object) -> None:
        links = self.links
        if isinstance(packet, p.Ping):
            self._write(encode_packet(p.Pong(), version=p.PEER_VERSION))
            return
        if isinstance(packet, p.Pong):
            return
        if self.link is not None:
            if isinstance(packet, p.Error):
                raise PeerRefused(
                    f"node {self.name} closed the link: {packet.code}: {packet.reason}"
                )
            links.received(self.link, packet)
            return
        if isinstance(packet, p.Error):
            raise PeerRefused(f"refused: {packet.reason} ({packet.code})")
        if isinstance(packet, p.Connected):
            self.codec.version = packet.version
            if packet.heartbeat_ms:
                self._every = packet.heartbeat_ms / 1000
                self._beat = asyncio.get_running_loop().call_later(self._every / 2, self._heartbeat)
            opening = p.PeerOpen(links.cluster_name, links.node)
            self._write(encode_packet(opening, 2, version=p.PEER_VERSION))
        elif isinstance(packet, p.Ok):
            if packet.value != self.name:
                raise PeerRefused(f"the node at its address is {packet.value!r}, not {self.name!r}")
            self.link = links.up(self.name, self._write, self._close, self._backlog)
            self.opened.set_result(None)
        else:
            raise RemoteProtocolError(f"unexpected {type(packet).__name__}", "unexpected-packet")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._beat is not None:
            self._beat.cancel()
        if self.link is not None:
            self.links.lost(self.link)
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"node {self.name} closed the connection"))
        if not self.lost.done():
            self.lost.set_result(None)
        with contextlib.suppress(Exception):
            self.opened.exception()  # retrieved: never "exception was never retrieved"
