"""The broker: destinations by address, routing and expiry (recovery: chute.core.rules.restore).

It owns every destination and the parts built around them: subscriptions
(:mod:`chute.core.rules.subscriptions`), dead letters and forwarding
(:mod:`chute.core.rules.diversion`), prepared transactions
(:mod:`chute.core.rules.twophase`), cursors and committed batches
(:mod:`chute.core.rules.cursor`, :mod:`chute.core.rules.batches`) and the gate of
:mod:`chute.core.rules.access`. Each part gets the broker through the narrow
interface it declares (``QueueHost``, ``XaHost``, ``CursorHost``, ``BatchHost``,
``ForwardHost``), never as a whole. Adapters (the protocol drivers, the
DropboxMQ bridge) never call it directly either: they drive a core
:class:`~chute.core.operations.connection.BrokerConnection`, which checks who may do what.

It is pure: no sockets, no files, no asyncio. Time comes from an injected
clock and durability from the injected :class:`~chute.core.model.store.Store`. Used
from one thread (the server's event loop); nothing here is thread-safe.

Sending is two steps so the store always sees records in a recoverable order:
:meth:`Broker.route` picks the queues, applies the overflow policies and
assigns sequence numbers; then the add record is written; then
:meth:`Broker.place` places the entries (maybe pushing to consumers, whose
delivery marks follow the add).
A transaction applies its acks and then its sends inside :meth:`Broker.atomically`,
which opens a :class:`~chute.core.rules.transaction.Gathering` (:attr:`Broker.gathering`):
the record sink :attr:`Broker.store` is while it is open, so every record they
cause (diversions and auto-acks included) reaches the store as one atomic
``store.commit``; the session checks the bounds first, so a commit that cannot
fit changes nothing (the rules: :mod:`chute.core.rules.transaction`).

Connections and sessions (per-client state, transactions, consumers) live in
:mod:`chute.core.operations.session`; looking at the broker (a destination browsed by its
address, the statistics) is :mod:`chute.core.operations.looking`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

from chute.core.model.address import (
    DEAD_LETTER,
    EXPIRED,
    PARTITION_MARK,
    Kind,
    canonical,
    parse,
)
from chute.core.model.cluster import PEER_PREFIX
from chute.core.model.consumer import Entry
from chute.core.model.paging import MemoryBudget, held_cost
from chute.core.model.queue import QueueChannel, Reason
from chute.core.model.queuetypes import LoginQueue
from chute.core.model.registry import Destination
from chute.core.model.settings import Overflow, SettingsResolver
from chute.core.model.store import (
    AddOp,
    QueueDefinition,
    QueueKind,
    Store,
    StoredMessage,
    TxOp,
)
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic
from chute.core.rules.access import Access, Client
from chute.core.rules.admission import Admission
from chute.core.rules.batches import CommittedBatches
from chute.core.rules.compaction import Compaction
from chute.core.rules.cursor import Cursors
from chute.core.rules.dedup import DEFAULT_PRODUCERS, DEFAULT_WINDOW, SentIds
from chute.core.rules.destinations import ANONYMOUS, Destinations, Limits
from chute.core.rules.diversion import Diversion
from chute.core.rules.exchanges import Exchanges
from chute.core.rules.partitions import Partitions
from chute.core.rules.restore import restore
from chute.core.rules.routing import Route, WouldBlock, stream_routes, takes_itself
from chute.core.rules.subscriptions import Subscriptions
from chute.core.rules.transaction import Gathering
from chute.core.rules.twophase import PreparedTransactions
from chute.core.rules.unstored import withdraw_unstored
from chute.errors import DestinationFull, NotFound
from chute.message import Message, now_ms

log = logging.getLogger("chute.broker")


class Broker:
    """Owns every destination. See the module docstring."""

    def __init__(
        self,
        store: Store,
        settings: SettingsResolver | None = None,
        *,
        clock: Callable[[], int] = now_ms,
        auto_create: bool = True,
        predefined: Iterable[str] = (),
        prepared_timeout_ms: int = 0,
        memory_limit: int = 0,
        memory_high_watermark: int = 0,
        memory_low_watermark: int = 0,
        block_timeout_ms: int = 30_000,
        flow_backlog: int = 0,
        max_subscription_bytes: int = 0,
        access: Access | None = None,
        max_cursor_lease_ms: int = 300_000,
        limits: Limits | None = None,
        dedup_window: int = DEFAULT_WINDOW,
        dedup_producers: int = DEFAULT_PRODUCERS,
    ) -> None:
        self._store = store
        self.sent_ids = SentIds(store, dedup_window, dedup_producers)
        """Duplicate detection: producers' recent stored requests (chute.core.rules.dedup)."""
        self.ledgers: dict[str, tuple[int, list[StoredMessage]]] = {}
        """A cluster's ledgers recovered from the store, until the cluster takes them."""
        self.demand_watch: Callable[[QueueChannel], None] | None = None
        """Told when a local consumer comes to or leaves a queue (a cluster's node, which
        tells the others: :mod:`chute.core.rules.cluster`)."""
        self.stream_watch: Callable[[Stream], None] | None = None
        """Told when a stream is made (a cluster's node, which finds the stream's home:
        :mod:`chute.core.rules.cluster_streams`)."""
        self.gathering: Gathering | None = None
        """The open transaction's record sink while :meth:`atomically` applies one."""
        self.max_lease_ms = max_cursor_lease_ms  # see chute.core.rules.cursor
        self.access = access or Access()
        # past memory_limit durable queues page (chute.core.model.paging); past the high
        # watermark producers wait until under the low (chute.core.rules.admission); 0: never
        self.memory = MemoryBudget(memory_limit, memory_high_watermark, memory_low_watermark)
        self.admission = Admission(self.memory, store, clock, block_timeout_ms)
        self._page_later: set[QueueChannel] = set()
        self._trim_later: set[Stream] = set()
        self.flow_backlog = flow_backlog  # 0: producers are never paused for a backlog
        self.max_subscription_bytes = max_subscription_bytes  # see Subscriptions.create
        self.pressure: list[QueueChannel] = []  # congested since the driver last looked
        self.settings = settings or SettingsResolver()
        self.clock = clock
        self.auto_create = auto_create
        self.queues: dict[str, QueueChannel] = {}
        self.topics: dict[str, Topic] = {}
        self.streams: dict[str, Stream] = {}  # chute.core.model.stream
        self.partitions = Partitions(self)  # streams with partitions: sends, readers
        self.subscriptions = Subscriptions(self)
        self._room_waiters: dict[str, list[Callable[[], None]]] = {}
        self.diversion = Diversion(self)  # dead letters, expiry, callback forwarding
        # AMQP's routing tables (chute.core.rules.exchanges); durable ones in the store
        self.exchanges = Exchanges(lambda: self.store)
        self.connections: dict[
            str, Client
        ] = {}  # by id; see chute.core.operations.connection.BrokerConnection
        self.client_ids: dict[str, str] = {}  # client id -> the one live connection's id
        self.xa = PreparedTransactions(self)
        self.cursors = Cursors(self)  # the Spark connector's readers (docs/spark.md)
        self.compaction = Compaction()  # compacted streams (chute.core.rules.compaction)
        self.batches = CommittedBatches(self)  # idempotent group commits of prepared work
        self.prepared_timeout_ms = prepared_timeout_ms  # 0 = prepared work waits forever
        declared = [canonical(a) for a in (DEAD_LETTER, EXPIRED, *predefined)]
        self.destinations = Destinations(  # made by use, deleted, idle (docs/semantics.md)
            self, limits or Limits(), declared=declared, idle_settings=self.settings.auto_deletes
        )
        for address in declared:
            self.destination(address, create=True)

    @property
    def store(self) -> Store:
        """The record sink: the store, or while :meth:`atomically` applies a transaction,
        its :attr:`gathering` (which gathers the records into one atomic commit and
        passes everything else through). Every part writes its records here."""
        gathering = self.gathering
        return self._store if gathering is None else gathering

    # -- destinations -------------------------------------------------------------

    def destination(
        self,
        address: str,
        *,
        create: bool | None = None,
        maker: str | None = None,
        quota: bool = True,
    ) -> Destination:
        """The queue, topic or stream at ``address``, made by this use if allowed (``create``
        None: counted as ``maker``'s, anonymous if None; see ``Destinations.admit``), or
        for the broker itself (``create`` True; a recovered queue keeps its ``maker``).

        Raises:
            InvalidAddress: a bad address, or a reserved name used directly.
            NotFound: it does not exist and may not be created.
            DestinationFull: making it would pass a limit on destinations made by use.
        """
        found: Destination | None = self.find(address)
        if found is not None:
            return found
        addr = parse(address)
        canonical = str(addr)
        found = self.find(canonical)
        if found is not None:
            return found
        if PARTITION_MARK in canonical:
            # a partition its stream has exists as soon as it is named (InvalidAddress if
            # the stream has no such partition): made here by the broker, as the stream's
            self.partitions.check(canonical)
            create, maker = True, None
        if create is False:
            raise NotFound(f"destination {canonical} does not exist")
        if not self.auto_create and create is None:
            raise NotFound(f"destination {canonical} does not exist (auto-create is off)")
        if addr.is_temporary:
            raise NotFound(f"temporary queue {canonical} does not exist (its connection closed?)")
        by_use = create is None
        if by_use:
            maker = maker or ANONYMOUS
            self.destinations.admit(canonical, maker, quota=quota)
        settings = self.settings(canonical)
        dest: Destination
        if addr.kind is Kind.TOPIC:
            dest = self.topics[canonical] = Topic(canonical, settings)
        elif addr.kind is Kind.STREAM:
            dest = self.streams[canonical] = Stream(canonical, settings, self)
            self.store.define(QueueDefinition(canonical, QueueKind.STREAM, owner=maker))
        else:
            if addr.login is not None:
                dest = LoginQueue(canonical, settings, self)
            else:
                dest = QueueChannel(canonical, canonical, settings, self)
            self.queues[canonical] = dest
            self.store.define(QueueDefinition(canonical, QueueKind.QUEUE, owner=maker))
        dest.next_seq = self.destinations.next_seq(dest)
        if maker is not None and by_use:
            self.destinations.note_made(canonical, maker)
        log.debug("created %s", canonical)
        if self.stream_watch is not None and isinstance(dest, Stream):
            self.stream_watch(dest)
        return dest

    def find(self, address: str) -> Destination | None:
        """The queue, topic or stream of a canonical address, if it exists (never creates)."""
        return self.queues.get(address) or self.topics.get(address) or self.streams.get(address)

    def delete_stream(self, stream: Stream) -> None:
        """Remove a stream and everything it keeps (the store forgets them with it)."""
        self.streams.pop(stream.address, None)
        self.store.undefine(stream.address)
        stream.drop()

    def delete_topic(self, topic: Topic) -> None:
        """Remove a topic (whoever deletes one drops its subscriptions first)."""
        self.topics.pop(topic.address, None)

    def add_queue(self, queue: QueueChannel) -> None:
        """Register a queue the broker did not create itself (temporary queues)."""
        self.queues[queue.name] = queue
        self.consumers_changed(queue)  # a cluster announces a temporary queue

    def delete_queue(self, queue: QueueChannel) -> list[Entry]:
        """Remove a queue; returns what it still held waiting (gone, with the memory it
        took; the store forgets them with the queue)."""
        queue.deleted = True
        self.queues.pop(queue.name, None)
        if queue.durable:
            self.store.undefine(queue.name)
        drained = queue.drain()
        self.memory.used -= sum(held_cost(e.message) for e in drained)
        self.consumers_changed(queue)  # a cluster tells the others a temporary queue went
        return drained

    # -- sending ------------------------------------------------------------------

    def send(self, address: str, message: Message, *, ttl: int = 0, carried: bool = False) -> None:
        """Accept a message for ``address``: stamp it, route it, record it, deliver it.

        The caller owns durability: for a persistent message, call
        :meth:`sync` and answer the producer only when it calls back.

        ``carried``: a bridge brings the message from another messaging system,
        which stamped it and counted its deliveries: its ``timestamp`` is kept,
        and its ``delivery_count`` counts here (see :meth:`carry`).

        Raises:
            InvalidAddress, NotFound: no such destination.
            WouldBlock: full under ``block``; retry after :meth:`wait_for_room`.
            DestinationFull: full under ``reject``.
        """
        if not carried:
            self.stamp(message, ttl)
        dest = self.queues.get(address)
        if dest is not None and not dest.settings.bounded:
            # The common case on the per-message path: an unbounded queue.
            seq = dest.next_seq
            dest.next_seq = seq + 1
            if dest.durable and message.persistent:
                # the record sink (``store``) without the property's call on this path
                (self.gathering or self._store).add(AddOp(dest.name, (dest.name,), seq, message))
            entry = Entry(seq, message)
            if carried:
                self.carry(dest, entry)
            dest.place(entry)
            return
        route = self.route(dest or self.destination(address), message)
        if route.record is not None:
            self.store.add(route.record)
        if carried:
            for queue, entry in route.placements:
                self.carry(queue, entry)
        self.place(route)

    def send_many(self, address: str, messages: Sequence[Message], *, ttl: int = 0) -> None:
        """:meth:`send` of each of ``messages`` (the caller gathers them in one
        :meth:`atomically`); a stream takes them as one batch: one append, its retention
        and its readers look once.

        Raises:
            As :meth:`send`.
        """
        dest = self.destination(address)
        if not isinstance(dest, Stream) or dest.forward is not None:
            for message in messages:  # a queue's bounds count each message placed
                self.send(address, message, ttl=ttl)
            return
        store = self.store
        if takes_itself(dest):
            routes = stream_routes(dest, messages, self.clock(), ttl)
            for route in routes:
                if route.record is not None:  # always: a stream records what it takes
                    store.add(route.record)
        else:
            routes = []
            for message in messages:
                self.stamp(message, ttl)
                route = self.route(dest, message)
                if route.record is not None:
                    store.add(route.record)
                routes.append(route)
        self.place_all(routes)

    def carry(self, queue: QueueChannel, entry: Entry) -> None:
        """Count the deliveries another system made of a carried message (a DropboxMQ
        file's ``JMSXDeliveryCount``) as this broker's own: its next delivery is
        marked redelivered, and the store's delivery mark keeps it so after a restart."""
        count = entry.message.delivery_count
        if not count:
            return
        entry.delivery_count = count
        entry.redelivered = True
        if queue.durable and entry.message.persistent:
            self.store.delivered(queue.name, entry.seq, count)

    def stamp(self, message: Message, ttl: int = 0) -> None:
        """Set the broker-owned fields of an accepted message: timestamp and expiration."""
        now = self.clock()
        message.timestamp = now
        if ttl > 0:
            message.expiration = now + ttl

    def route(self, dest: Destination, message: Message, *, arrived: bool = False) -> Route:
        """Where ``message`` goes: its sequence number, the queues that take it (after
        the overflow policies) and the store record. Nothing is placed yet.

        ``arrived``: another node of a cluster handed it over: a topic's peer
        subscriptions (other nodes') do not take it (that node sent them their copies).

        Raises:
            WouldBlock: full under ``block``. DestinationFull: full under ``reject``.
        """
        if isinstance(dest, Stream) and not arrived:
            dest = self.partitions.target(dest, message)  # its partition (if it has several)
        if isinstance(dest, Stream) and dest.forward is not None:
            # homed on another node of a cluster (or its home not known yet): the message
            # waits in the stream's forward queue, which hands it over to the home
            message.persistent = True
            dest = dest.forward
        if isinstance(dest, Stream):
            # a stream keeps everything it takes, in the store: retention, not overflow
            message.persistent = True
            seq = dest.next_seq
            dest.next_seq += 1
            entry = Entry(seq, message)
            return Route([], AddOp(dest.address, (dest.address,), seq, message), (dest, entry))
        if isinstance(dest, Topic):
            targets: list[QueueChannel] = list(dest.router.route(message))
            if arrived:
                targets = [s for s in targets if not s.name.startswith(PEER_PREFIX)]
            seq = dest.next_seq
            dest.next_seq += 1
            dest.published += 1
        else:
            targets = [dest]
            seq = dest.next_seq
            dest.next_seq += 1
        placements: list[tuple[QueueChannel, Entry]] = []
        if any(q.settings.bounded for q in targets):
            self._check_room(targets, message)
            targets = [q for q in targets if self._make_room(q, message)]
        stored: list[str] = []
        for queue in targets:
            placements.append((queue, Entry(seq, message)))
            if queue.durable and message.persistent:
                stored.append(queue.name)
        address = dest.address if isinstance(dest, Topic) else dest.name
        record = AddOp(address, tuple(stored), seq, message) if stored else None
        return Route(placements, record)

    def place(self, route: Route) -> None:
        """Place a route's entries in their queues (pushing to consumers with credit), or
        append it to its stream."""
        self.place_all((route,))

    def place_all(self, routes: Iterable[Route]) -> None:
        """:meth:`place` each of ``routes`` in order, a stream taking its share at once."""
        appended: dict[str, tuple[Stream, list[Entry]]] = {}
        for route in routes:
            for queue, entry in route.placements:
                queue.place(entry)
            if route.appended is not None:
                stream, entry = route.appended
                if not stream.deleted:
                    appended.setdefault(stream.address, (stream, []))[1].append(entry)
        for stream, entries in appended.values():
            stream.append(entries)

    def _check_room(self, targets: list[QueueChannel], message: Message) -> None:
        """Raise for the policies that refuse the producer, before anything is placed."""
        for queue in targets:
            if queue.has_room(message.size):
                continue
            policy = queue.settings.overflow
            full = (
                f"{queue.address} is full ({queue.held} messages, {queue.held_bytes} bytes; "
                f"max_messages={queue.settings.max_messages}, "
                f"max_bytes={queue.settings.max_bytes})"
            )
            if policy is Overflow.REJECT:
                raise DestinationFull(f"{full}; the message was not accepted")
            if policy is Overflow.BLOCK:
                raise WouldBlock(full, queue.address, queue.settings.block_timeout_ms)

    def _make_room(self, queue: QueueChannel, message: Message) -> bool:
        """Apply dead-letter / drop-oldest; False if the new message was diverted instead."""
        if queue.has_room(message.size):
            return True
        if queue.settings.overflow is Overflow.DROP_OLDEST:
            while not queue.has_room(message.size):
                oldest = queue.evict_oldest()
                if oldest is None:  # everything held is in flight: nothing to drop
                    break
                queue.dead_lettered += 1
                self.divert(queue, oldest, Reason.DROPPED_OLDEST)
                queue.settle(oldest, acked=False)
            else:
                return True
        queue.dead_lettered += 1
        self.diversion.divert(queue, message, Reason.OVERFLOW)
        return False

    # -- diversion (the QueueHost interface) ---------------------------------------

    def divert(self, queue: QueueChannel, entry: Entry, reason: Reason) -> None:
        """Send a message that left ``queue`` unconsumed to the dead-letter or expiry address."""
        self.diversion.divert(queue, entry.message, reason)

    def forward(self, address: str, message: Message) -> None:
        """Route a copy of ``message`` onwards (callback queues; see
        :meth:`Diversion.forward`)."""
        self.diversion.forward(address, message)

    def trim_when_stored(self, stream: Stream) -> None:
        """``stream`` trims its tail now, or once the transaction gathering now is written."""
        if self.gathering is None:
            stream.trim()
        else:
            self._trim_later.add(stream)

    def congested(self, queue: QueueChannel) -> None:
        if not self.pressure or self.pressure[-1] is not queue:
            self.pressure.append(queue)

    def can_page(self) -> bool:
        return self.memory.limit > 0

    def defer_page_in(self, queue: QueueChannel) -> bool:
        """Inside :meth:`atomically` the store lacks the records being gathered: a paging
        queue reads back once they are written."""
        if self.gathering is not None:
            self._page_later.add(queue)
            return True
        return False

    def room_freed(self, queue: QueueChannel) -> None:
        waiters = self._room_waiters.pop(queue.address, None)
        if waiters:
            for wake in waiters:
                wake()

    def consumers_changed(self, queue: QueueChannel) -> None:
        watch = self.demand_watch
        if watch is not None:
            watch(queue)

    def wait_for_room(self, address: str | None, wake: Callable[[], None]) -> None:
        """Call ``wake()`` once when something leaves ``address`` (for the ``block`` policy),
        or, for no address, once the broker admits producers again (its memory or disk).

        Raises:
            InvalidAddress: a bad address.
        """
        if address is None:
            self.admission.wait(wake)
            return
        self._room_waiters.setdefault(canonical(address), []).append(wake)

    def cancel_wait(self, address: str | None, wake: Callable[[], None]) -> None:
        if address is None:
            self.admission.cancel(wake)
            return
        waiters = self._room_waiters.get(canonical(address))
        if waiters and wake in waiters:
            waiters.remove(wake)

    # -- time -----------------------------------------------------------------------

    def expire_due(self) -> int:
        """Divert every waiting message whose expiration passed (returns how many), and
        roll back prepared transactions older than ``prepared_timeout_ms``."""
        now = self.clock()
        count = 0
        for queue in list(self.queues.values()):
            count += queue.expire_due(now)
        for topic in list(self.topics.values()):
            for sub in list(topic.subscriptions.values()):
                count += sub.expire_due(now)
        for stream in list(self.streams.values()):
            if stream.settings.max_age_ms:
                stream.retain(now)
            stream.trim()  # its share of the tails' memory shrinks as streams are made
            stream.nudge()
        self.compaction.sweep(list(self.streams.values()), self.store, now)
        self.xa.expire(now, self.prepared_timeout_ms)
        self.cursors.expire(now)
        self.destinations.remove_idle(now)
        if self.exchanges.sweeper is not None:
            self.exchanges.sweeper.sweep(now)  # AMQP queues unused for their x-expires
        return count

    @contextlib.contextmanager
    def atomically(self) -> Iterator[None]:
        """Gather every add and ack made inside into one atomic ``store.commit``.

        Memory changes at once (consumers may be pushed to inside); the records
        follow as one group when the block ends, even by an error, so the store
        stays in step with memory. Nested uses join the outer group.
        """
        if self.gathering is not None:
            yield
            return
        gathering = self.gathering = Gathering(self._store)
        try:
            yield
        finally:
            self.gathering = None
            gathering.flush()
            if self._page_later:
                waiting, self._page_later = self._page_later, set()
                for queue in waiting:
                    queue.deliver()
            if self._trim_later:
                streams, self._trim_later = self._trim_later, set()
                for stream in streams:
                    stream.trim()

    def sync(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call back once everything recorded so far is durable (see Store.sync)."""
        self.store.sync(callback)

    # -- recovery ----------------------------------------------------------------------

    def recover(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild durable queues and subscriptions from the store; returns messages
        restored (:func:`chute.core.rules.restore.restore`, which says how, and what
        ``progress`` hears)."""
        return restore(self, progress)

    def queue_by_name(self, name: str) -> QueueChannel | None:
        """A queue or subscription by its store name."""
        return self.queues.get(name) or self.subscriptions.get(name)

    def close(self) -> None:
        """Close every connection (their consumers' in-flight messages go back) and the store."""
        for connection in list(self.connections.values()):
            connection.close()
        self.store.close()

    def unstored(self, ops: Sequence[TxOp]) -> None:
        """The store refused ``ops`` (a failed sync): their messages leave their queues
        before anyone is sent them (:mod:`chute.core.rules.unstored`)."""
        withdraw_unstored(self, ops)
