"""The dialing side of a link between nodes: :class:`_Dialed` (the links: :mod:`.peers`).

It says ``Connect`` at the peers' protocol version (with ``[cluster] user``), then
``PeerOpen``, and once answered ``Ok`` with the expected node's name, hands the link's
packets to :class:`~chute.server.peers.PeerLinks`. It keeps the heart-beats agreed
(a link silent three times that long is closed) and stops reading while its write
buffer is full or its link's backlog waits on the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol, cast

from chute.config import ServerConfig
from chute.config.sections import ClusterSettings
from chute.errors import RemoteProtocolError
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData
from chute.server.peers_link import PeerLink, PeerRefused


class _Server(Protocol):
    @property
    def config(self) -> ServerConfig: ...


class DialingLinks(Protocol):
    """What a dialed link needs of :class:`~chute.server.peers.PeerLinks` (named here, so
    the two modules do not import each other)."""

    @property
    def server(self) -> _Server: ...

    settings: ClusterSettings
    node: str
    cluster_name: str

    def up(
        self,
        name: str,
        write: Callable[[bytes], None],
        close: Callable[[], None],
        reading: Callable[[bool], None] = ...,
    ) -> PeerLink: ...

    def lost(self, link: PeerLink) -> None: ...

    def received(self, link: PeerLink, packet: object) -> None: ...


log = logging.getLogger("chute.cluster")


class _Dialed(asyncio.Protocol):
    """The dialing side of a link: Connect, PeerOpen, then the link's packets."""

    def __init__(self, links: DialingLinks, name: str) -> None:
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
