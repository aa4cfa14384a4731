"""Streams in a cluster: each lives on one node, its **home**, which alone gives offsets.

Theory of operation
-------------------
A stream's home is agreed outside the core (in etcd, or by a fixed rule over a fixed
membership: :mod:`chute.cluster.homes`); the core asks for it
(:meth:`StreamPort.want_home`) when a stream is made here and is told
(:meth:`ClusterStreams.home_known`). A home never moves.

Sends. Until this node knows the home, and for good when the home is another node,
the stream has a **forward queue** (:attr:`~chute.core.model.stream.Stream.forward`):
the broker routes a send to the stream into it, so the sender is confirmed once the
message is on this node's disk, as for a queue. The forward queue's one consumer is
the cluster's peer consumer for the home (:meth:`Cluster.feed
<chute.core.rules.cluster.Cluster.feed>`): the message is handed over as a queue's
would be (store-and-forward, the hand-over ledgers keyed by ``HandoverKey(run, n)``:
a hand-over repeated after a crash is not stored twice), and the home appends it to
the stream, which numbers it. When this node turns out to be the home, what waited
in the forward queue is appended to the stream (in one atomic commit with its
removal from the queue) and the forward queue goes. A forward queue is a ledger in
the store (:data:`FORWARD_PREFIX` and the stream's address), never a destination
clients see.

Reads. A node that is not a stream's home keeps a **copy** of it, with the home's
offsets: it reads from the home what follows its copy's head (:class:`Following`:
``PeerStreamRead``, one outstanding per stream, answered by ``PeerStreamRecords``
once the home has messages from there), and appends what comes to its own stream
(and store) under the same offsets. Every reader here (a consumer's stream reader,
a STOMP subscription, the Spark source's offset reads) reads that copy, so it sees
every message at the offset it has everywhere, behind the home by the time it takes
a read to come back. A lost link, or this node's restart, loses nothing: the copy
reads on from its head once the link is up again (what it appended but had not yet
written is read again, same offsets).

Pure: the transport (:class:`StreamPort`) and the homes' agreement live outside.
Used from the broker's loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Final, Protocol

from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel, QueueHost
from chute.core.model.settings import DestinationSettings
from chute.core.model.store import AddOp, QueueDefinition, QueueKind, StoredMessage
from chute.core.model.stream import Stream
from chute.core.rules.cluster import Cluster
from chute.core.rules.routing import Route
from chute.message import Message

log = logging.getLogger("chute.cluster")

FORWARD_PREFIX: Final = "cluster.stream:"
"""The store name of a stream's forward queue: this, then the stream's address."""

READ_MESSAGES: Final = 256
"""Messages one read asks the home for, at most."""

READ_BYTES: Final = 1 << 20
"""About how many bytes of messages one answer carries (at least one message)."""


class StreamsHost(QueueHost, Protocol):
    """What streams in a cluster need of the broker."""

    ledgers: dict[str, tuple[int, list[StoredMessage]]]
    stream_watch: Callable[[Stream], None] | None

    @property
    def streams(self) -> Mapping[str, Stream]: ...

    def atomically(self) -> AbstractContextManager[None]: ...

    def route(self, dest: Stream, message: Message, *, arrived: bool = False) -> Route: ...

    def place_all(self, routes: Sequence[Route]) -> None: ...


class StreamPort(Protocol):
    """What the core needs outside it: the homes' agreement and the links."""

    def want_home(self, address: str) -> str | None:
        """The home of stream ``address`` if it is known at once; else None, and find it
        (claiming it for this node if it has none) and tell
        :meth:`ClusterStreams.home_known` later."""

    def send_stream_read(self, peer: str, address: str, start: int, limit: int) -> None:
        """Ask ``peer`` (the home) for ``address``'s messages from ``start`` on. Dropped
        if the link is down."""

    def send_stream_records(
        self, peer: str, address: str, following: int, records: Sequence[tuple[int, Message]]
    ) -> None:
        """Answer ``peer``'s read. Sent only once every record the store was told by the
        end of the current call is durable (a copy never holds what the home could lose
        in a crash). Dropped if the link is down."""


class ForwardQueue(QueueChannel):
    """A stream's forward queue. A stream keeps what it takes whatever its expiration
    (retention alone removes), so nothing expires on its way to the home either."""

    def _expire_if_due(self, entry: Entry) -> bool:
        return False


class Following:
    """Where this node's copy of a stream homed elsewhere reads from."""

    __slots__ = ("home", "reading")

    def __init__(self, home: str) -> None:
        self.home = home
        self.reading = False  # a read is outstanding with the home


class ClusterStreams:
    """One node's streams in its cluster. See the module docstring."""

    def __init__(self, host: StreamsHost, cluster: Cluster, port: StreamPort, *, node: str) -> None:
        self.host = host
        self.cluster = cluster
        self.port = port
        self.node = node
        self.homes: dict[str, str] = {}  # address -> its home, once known
        self.forwards: dict[str, QueueChannel] = {}  # address -> its forward queue
        self.following: dict[str, Following] = {}  # address -> its copy's reading
        self.waiting: dict[str, dict[str, int]] = {}  # home: address -> {peer: its start}
        self.up: set[str] = set()  # the nodes whose link is up

    def recover(self) -> None:
        """Take the forward queues the store kept (before ``Cluster.recover``, which finds
        in them what was in doubt), then look for the home of every stream."""
        host = self.host
        for name in [n for n in host.ledgers if n.startswith(FORWARD_PREFIX)]:
            next_seq, records = host.ledgers.pop(name)
            queue = self._forward_queue(name[len(FORWARD_PREFIX) :], define=False)
            for item in records:
                queue.place(Entry(item.seq, item.message, item.delivery_count))
            queue.next_seq = max(queue.next_seq, next_seq, *(r.seq + 1 for r in records))
        host.stream_watch = self.made
        for stream in list(host.streams.values()):
            self.made(stream)

    # -- homes ------------------------------------------------------------------------

    def made(self, stream: Stream) -> None:
        """A stream was made here (or recovered): its home decides where sends go."""
        home = self.homes.get(stream.address)
        if home is None:
            home = self.port.want_home(stream.address)
            if home is not None:
                self.homes[stream.address] = home
        if home is not None:
            self._settle(stream, home)
            return
        stream.forward = self._forward_queue(stream.address)

    def home_known(self, address: str, home: str) -> None:
        """Stream ``address`` lives on node ``home`` (agreed; it never changes)."""
        known = self.homes.setdefault(address, home)
        if known != home:
            log.error("stream %s: told its home is %s, but it is %s", address, home, known)
            return
        stream = self.host.streams.get(address)
        if stream is not None:
            self._settle(stream, home)

    def _settle(self, stream: Stream, home: str) -> None:
        if home == self.node:
            self._take_forwarded(stream)
            self._woken(stream)  # reads that came before the stream was settled here
            return
        stream.forward = self._forward_queue(stream.address)
        self.cluster.feed(home, stream.forward)
        following = self.following.get(stream.address)
        if following is None:
            following = self.following[stream.address] = Following(home)
            log.info("stream %s: its home is node %s; reading a copy of it", stream.address, home)
        self._read(stream, following)

    def _forward_queue(self, address: str, *, define: bool = True) -> QueueChannel:
        queue = self.forwards.get(address)
        if queue is None:
            name = FORWARD_PREFIX + address
            queue = ForwardQueue(name, address, DestinationSettings(), self.host)
            if define:
                self.host.store.define(QueueDefinition(name, QueueKind.LEDGER))
            self.forwards[address] = self.cluster.queues[name] = queue
        return queue

    def _take_forwarded(self, stream: Stream) -> None:
        """This node is the home: what waited in the forward queue joins the stream, in
        the order it was sent, and the forward queue goes."""
        stream.forward = None
        queue = self.forwards.pop(stream.address, None)
        if queue is None:
            return
        host = self.host
        entries = queue.take_waiting_below(queue.next_seq)
        routes: list[Route] = []
        with host.atomically():
            for entry in entries:
                route = host.route(stream, entry.message, arrived=True)  # its partition's
                if route.record is not None:
                    host.store.add(route.record)
                queue.settle(entry)
                routes.append(route)
            host.place_all(routes)
        self.cluster.queues.pop(queue.name, None)
        if not queue.held:
            host.store.undefine(queue.name)
        if entries:
            log.info(
                "stream %s: appended the messages sent here before its home was known: %d",
                stream.address,
                len(entries),
            )

    # -- reading a copy -----------------------------------------------------------------

    def _read(self, stream: Stream, following: Following) -> None:
        if following.reading or following.home not in self.up:
            return
        following.reading = True
        self.port.send_stream_read(following.home, stream.address, stream.next_seq, READ_MESSAGES)

    def on_records(
        self, peer: str, address: str, following_start: int, records: Sequence[tuple[int, Message]]
    ) -> None:
        """The home answered a read: append to the copy (same offsets), read on."""
        following = self.following.get(address)
        if following is None or following.home != peer:
            return
        following.reading = False
        stream = self.host.streams.get(address)
        if stream is None or stream.deleted:
            return  # deleted here: a copy made again reads on from its numbering
        host = self.host
        entries: list[Entry] = []
        with host.atomically():
            for offset, message in records:
                if offset < stream.next_seq:
                    continue  # read twice (a read sent again): the copy has it
                message.persistent = True
                host.store.add(AddOp(address, (address,), offset, message))
                entries.append(Entry(offset, message))
                stream.next_seq = offset + 1
            stream.next_seq = max(stream.next_seq, following_start)
            if entries:
                stream.append(entries)
        self._read(stream, following)

    # -- serving reads (the home) -------------------------------------------------------

    def on_read(self, peer: str, address: str, start: int, limit: int) -> None:
        """``peer`` reads stream ``address`` from ``start``: answer now if there is
        something from there, else once there is."""
        home = self.homes.get(address, self.node)
        if home != self.node:
            log.warning("node %s read stream %s, which lives on node %s", peer, address, home)
            return
        stream = self.host.streams.get(address)
        if stream is None or stream.forward is not None:
            # not made here yet, or its home not known here yet: answer once it is
            self.waiting.setdefault(address, {})[peer] = start
            return
        self._answer(stream, peer, start, max(1, min(limit, READ_MESSAGES)))

    def _answer(self, stream: Stream, peer: str, start: int, limit: int) -> None:
        following, entries = stream.read(
            start, stream.head, max_messages=limit, max_bytes=READ_BYTES
        )
        if not entries and following <= start:
            self.waiting.setdefault(stream.address, {})[peer] = start
            stream.on_wake = self._woken
            return
        records = [(e.seq, e.message) for e in entries]
        self.port.send_stream_records(peer, stream.address, following, records)

    def _woken(self, stream: Stream) -> None:
        """Messages were appended: answer the reads waiting for them."""
        waiting = self.waiting.get(stream.address)
        if not waiting:
            stream.on_wake = None
            return
        head = stream.head
        ready = [(peer, start) for peer, start in waiting.items() if start < head]
        for peer, _ in ready:
            del waiting[peer]
        if waiting:
            stream.on_wake = self._woken
        else:
            del self.waiting[stream.address]
            stream.on_wake = None
        for peer, start in ready:
            if peer in self.up:
                self._answer(stream, peer, start, READ_MESSAGES)

    # -- links --------------------------------------------------------------------------

    def link_up(self, name: str) -> None:
        """The link to ``name`` is up (after ``Cluster.link_up``): forward queues of the
        streams homed there hand over again, and their copies read on."""
        self.up.add(name)
        for address, following in self.following.items():
            if following.home != name:
                continue
            following.reading = False
            stream = self.host.streams.get(address)
            queue = self.forwards.get(address)
            if queue is not None:
                self.cluster.feed(name, queue)
            if stream is not None:
                self._read(stream, following)

    def link_down(self, name: str) -> None:
        """The link to ``name`` is lost: reads outstanding either way are gone with it."""
        self.up.discard(name)
        for following in self.following.values():
            if following.home == name:
                following.reading = False
        for waiting in self.waiting.values():
            waiting.pop(name, None)
