"""Cursors: how the Spark connector reads a destination by sequence number.

Theory of operation
-------------------
Offsets are a destination's sequence numbers (DESIGN.md), so a Spark
micro-batch is a range ``[start, end)``. A :class:`Cursor` reads such ranges
without consuming them, and consumes (acks) everything below a position when
Spark commits:

* On a **queue**, the cursor holds the queue like an exclusive consumer with
  no credit (:attr:`Cursor.holder`): nothing is delivered to anybody else
  while it holds the queue, so the messages of an uncommitted range wait for
  a replay. Opening fails while another exclusive consumer holds the queue or
  while messages are in flight to other consumers (a range could not be read
  whole). A selector filters what the cursor reads and acks; what it skips
  stays in the queue.
* On a **topic**, the cursor is a durable subscription of its own (store key
  ``cursor:<topic>.<name>``), so it survives restarts and keeps what is
  published while the query is down. Its entries carry the topic's sequence.

The **lease**: a cursor holds its queue while a connection that opened it is
alive, and ``lease_ms`` after the last one went (a killed Spark driver; at
most the broker's ``max_lease_ms``, so no client can hold a queue for long after
it is gone), then lets go (:meth:`Cursors.expire`, run by the broker's sweep). Any cursor request
takes the lease again. Leases are memory only: after a broker restart a queue
is held again at the first cursor request.

The **head** (what Spark's ``latestOffset`` sees) is the destination's next
sequence number, lowered to the first sequence a prepared transaction holds
there: a prepared send has its number but is placed only at commit, and a
range read past it would miss it for good.

Committed batches (the sink's side) are in :mod:`chute.core.rules.batches`. What
cursors need from the broker is :class:`CursorHost`. Pure: no sockets, no
files. Used from the broker's loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Final, Protocol

from chute.core.model.address import canonical, check_name
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Registry
from chute.core.model.selector import Selector, compile_selector
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.rules.access import Client
from chute.core.rules.subscriptions import Subscriptions, cursor_key
from chute.core.rules.twophase import PreparedTransactions
from chute.errors import ChuteError, ConsumerError, InvalidAddress, NotFound

log = logging.getLogger("chute.cursor")

DEFAULT_LEASE_MS: Final = 60_000
"""How long a cursor outlives the last connection that opened it (lease_ms 0)."""


class _Idle:
    """The receiver of a holder: it has no credit, so nothing is ever pushed to it."""

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        raise AssertionError("a holder has no credit")  # pragma: no cover

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        """Its queue was deleted: :meth:`Cursors.forget` drops the cursor."""


_IDLE: Final = _Idle()


def holder(queue: QueueChannel) -> BrokerConsumer:
    """An exclusive consumer with no credit: attached, it keeps every other consumer of
    ``queue`` from receiving anything, and receives nothing itself."""
    consumer = BrokerConsumer(
        0, queue, _IDLE, ack_mode=AckMode.INDIVIDUAL, credit=0, exclusive=True
    )
    queue.attach(consumer)
    return consumer


class CursorHost(Registry, Protocol):
    """What cursors need from the broker."""

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def xa(self) -> PreparedTransactions: ...

    @property
    def connections(self) -> Mapping[str, Client]: ...

    @property
    def max_lease_ms(self) -> int:
        """The longest a cursor may outlive the connections that opened it."""

    def atomically(self) -> AbstractContextManager[None]:
        """Gather the records made inside into one atomic store commit."""


@dataclass(eq=False)
class Cursor:
    """A named reader of one destination by sequence number. See the module docstring."""

    name: str
    address: str
    queue: QueueChannel
    selector: Selector | None = None  # queues only; a topic cursor's subscription filters
    lease_ms: int = DEFAULT_LEASE_MS
    holder: BrokerConsumer | None = None
    openers: set[str] = field(default_factory=set)  # connection ids
    last_seen: int = 0

    @property
    def held(self) -> bool:
        return self.holder is not None and not self.holder.closed

    def wants(self, entry: Entry) -> bool:
        return self.selector is None or self.selector.matches(entry.message)


class Cursors:
    """Every cursor of the broker, by (address, name)."""

    def __init__(self, host: CursorHost) -> None:
        self.host = host
        self._by_key: dict[tuple[str, str], Cursor] = {}

    # -- requests -------------------------------------------------------------------

    def open(
        self,
        address: str,
        name: str,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
        owner: str | None = None,
    ) -> tuple[int, int]:
        """Open (create, or refresh and hold again) a cursor; returns ``(earliest, head)``.

        Raises:
            InvalidAddress, InvalidSelector, NotFound: a bad address, name or selector.
            ConsumerError: the queue is held by another exclusive consumer or has
                messages in flight; a topic cursor exists with another selector.
        """
        address = canonical(address)
        check_name(name)
        compiled = compile_selector(selector) if selector else None
        dest = self.host.destination(address)
        if isinstance(dest, Stream):
            raise InvalidAddress(
                f"{address} is a stream: read it from an offset, without a cursor (a reader "
                "keeps its own position)"
            )
        if isinstance(dest, Topic):
            cursor = self._topic_cursor(dest, name, selector)
        else:
            cursor = self._by_key.get((address, name)) or Cursor(name, address, dest)
            cursor.selector = compiled  # a queue cursor's selector is the reader's choice
            self._by_key[address, name] = cursor
        cursor.lease_ms = min(
            lease_ms if lease_ms > 0 else DEFAULT_LEASE_MS, self.host.max_lease_ms
        )
        if owner is not None:
            cursor.openers.add(owner)
        self._hold(cursor)
        return self.earliest(cursor.queue), self.head(dest)

    def all(self) -> list[Cursor]:
        """Every cursor, open or released (for management)."""
        return list(self._by_key.values())

    def info(self, address: str) -> tuple[int, int]:
        """``(earliest, head)`` of a queue without a cursor (a snapshot read), or of a
        stream (its first offset and its head).

        Raises:
            InvalidAddress: a topic (read a topic through a cursor).
            NotFound: no such queue or stream (a look creates nothing).
        """
        found = self.host.destination(address, create=False)
        if isinstance(found, Stream):
            return found.first, found.head
        dest = self._queue(address, create=False)
        return self.earliest(dest), self.head(dest)

    def fetch(
        self,
        address: str,
        name: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> tuple[int, list[Entry]]:
        """One page of the held messages with ``start <= seq < end``, in sequence order,
        not consumed; returns ``(next start, entries)`` (next start == end: done).

        Without ``name``, reads a queue as a snapshot (no cursor, no lease), or a
        stream's offsets (:meth:`Stream.read <chute.core.model.stream.Stream.read>`).

        Raises:
            NotFound: the cursor is not open. InvalidAddress: a topic without a cursor.
        """
        if name is None:
            found = self.host.destination(address, create=False)
            if isinstance(found, Stream):
                return found.read(start, end, max_messages=max_messages, max_bytes=max_bytes)
            queue: QueueChannel = self._queue(address, create=False)
            wants: Callable[[Entry], bool] | None = None
        else:
            cursor = self._cursor(address, name)
            self._hold(cursor)
            queue, wants = cursor.queue, cursor.wants if cursor.selector else None
        if end <= start:
            return end, []
        page = queue.waiting_between(start, end, max_messages)
        entries: list[Entry] = []
        size = 0
        next_start = end
        for entry in page:
            if max_bytes and entries and size + entry.message.size > max_bytes:
                next_start = entry.seq
                break
            if wants is None or wants(entry):
                entries.append(entry)
                size += entry.message.size
        else:
            if max_messages and len(page) >= max_messages:
                next_start = page[-1].seq + 1
        return next_start, entries

    def ack(self, address: str, name: str, end: int) -> int:
        """Consume every message the cursor holds below ``end``; returns how many.

        The acks reach the store as one atomic commit; the caller syncs before
        answering.

        Raises:
            NotFound: the cursor is not open.
        """
        cursor = self._cursor(address, name)
        self._hold(cursor)
        taken = cursor.queue.take_waiting_below(end, cursor.wants if cursor.selector else None)
        with self.host.atomically():
            for entry in taken:
                cursor.queue.settle(entry)
        return len(taken)

    def close(self, address: str, name: str, *, delete: bool = False) -> None:
        """Let go of the cursor's queue; with ``delete``, forget the cursor (a topic
        cursor's subscription and everything it holds go too).

        Raises:
            NotFound: no such cursor.
        """
        cursor = self._cursor(address, name)
        self._release(cursor)
        if delete:
            self._by_key.pop((cursor.address, name), None)
            queue = cursor.queue
            if isinstance(queue, Subscription):
                self.host.subscriptions.drop(queue)

    def forget(self, address: str) -> None:
        """``address`` was deleted: its cursors go (a later request finds none open)."""
        for key in [k for k in self._by_key if k[0] == address]:
            cursor = self._by_key.pop(key)
            cursor.holder = None

    # -- sweep ------------------------------------------------------------------------

    def expire(self, now: int) -> list[str]:
        """Release the cursors whose lease ran out; returns their names."""
        released: list[str] = []
        live = self.host.connections
        for cursor in self._by_key.values():
            if not cursor.held:
                continue
            cursor.openers.intersection_update(live)
            if cursor.openers:
                cursor.last_seen = now
            elif now - cursor.last_seen >= cursor.lease_ms:
                log.info(
                    "cursor %s on %s: nobody renewed its lease for %d ms; releasing the queue",
                    cursor.name,
                    cursor.address,
                    cursor.lease_ms,
                )
                self._release(cursor)
                released.append(cursor.name)
        return released

    # -- positions --------------------------------------------------------------------

    def head(self, dest: QueueChannel | Topic) -> int:
        """The first sequence number a reader may not read yet (see the module docstring)."""
        address = dest.address
        head = dest.next_seq
        for queue, entry in self.host.xa.placements():
            if queue.address == address and entry.seq < head:
                head = entry.seq
        return head

    def earliest(self, queue: QueueChannel) -> int:
        """The lowest sequence number ``queue`` holds waiting, or its head if none."""
        first = queue.waiting_between(0, 1 << 63, 1)
        if first:
            return first[0].seq
        topic = queue.topic if isinstance(queue, Subscription) else queue
        return self.head(topic)

    # -- helpers ----------------------------------------------------------------------

    def _cursor(self, address: str, name: str) -> Cursor:
        address = canonical(address)
        cursor = self._by_key.get((address, name))
        if cursor is None:
            dest = self.host.destination(address)
            if (
                isinstance(dest, Topic)
                and cursor_key(dest.address, name) in self.host.subscriptions
            ):
                cursor = self._topic_cursor(
                    dest, name, None
                )  # after a restart: its subscription survived
        if cursor is None:
            raise NotFound(f"cursor {name!r} on {address} is not open (open it first)")
        cursor.last_seen = self.host.clock()
        return cursor

    def _topic_cursor(self, topic: Topic, name: str, selector: str | None) -> Cursor:
        """The topic cursor's subscription: the one that exists (with this selector), or new."""
        key = cursor_key(topic.address, name)
        subscriptions = self.host.subscriptions
        sub = subscriptions.get(key)
        existing = self._by_key.get((topic.address, name))
        if sub is not None and existing is None and selector is None:
            pass  # found after a restart: whatever selector it was made with stays
        elif sub is not None and sub.selector_text != (selector or None):
            raise ConsumerError(
                f"cursor {name!r} on {topic.address} exists with selector "
                f"{sub.selector_text!r}; delete it (close with delete) to change it"
            )
        if sub is None:
            sub = subscriptions.create(
                key, topic, SubscriptionKind.DURABLE, selector=selector, name=name
            )
        cursor = existing
        if cursor is None or cursor.queue is not sub:
            cursor = Cursor(name, topic.address, sub)
            self._by_key[topic.address, name] = cursor
        return cursor

    def _queue(self, address: str, *, create: bool | None = None) -> QueueChannel:
        dest = self.host.destination(address, create=create)
        if isinstance(dest, Topic):
            raise InvalidAddress(
                f"{dest.address} is a topic: a topic holds nothing; read it through a cursor"
            )
        if isinstance(dest, Stream):
            raise InvalidAddress(f"{dest.address} is a stream: read it without a cursor")
        return dest

    def _hold(self, cursor: Cursor) -> None:
        """Take the lease: attach the holder unless it is attached."""
        cursor.last_seen = self.host.clock()
        if cursor.held:
            return
        queue = cursor.queue
        if queue.deleted:
            raise NotFound(f"{cursor.address} was deleted")
        if any(c.exclusive for c in queue.router.consumers):
            raise ConsumerError(
                f"{cursor.address} is held by another exclusive consumer; "
                f"cursor {cursor.name!r} cannot hold it"
            )
        inflight = sum(len(c.inflight) for c in queue.router.consumers)
        if inflight:
            raise ConsumerError(
                f"{cursor.address} has {inflight} messages in flight to consumers; "
                f"cursor {cursor.name!r} needs the queue to itself (close them first)"
            )
        cursor.holder = holder(queue)

    def _release(self, cursor: Cursor) -> None:
        if cursor.holder is not None:
            cursor.queue.detach(cursor.holder)
            cursor.holder = None
        cursor.openers.clear()
