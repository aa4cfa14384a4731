"""Destinations beyond routing: who made each, deleting and purging, idle ones going.

Theory of operation
-------------------
A destination is *declared* (the reserved queues, and ``[destinations]`` in
the configuration: they exist from the start) or *made* by a client's first
use (a send, a consumer, a cursor, a callback; looking never makes one). What
the broker makes for itself (a dead-letter target, the Simple-message-queue
listeners' queue, a topic brought back for its durable subscriptions) is
neither: never counted, never removed for being idle.

* **Counting.** Every made destination is remembered with its maker: the user
  whose connection made it, or :data:`ANONYMOUS` without users. A make past
  ``max_total`` (all makers together) or, for a user who may not manage
  everything, past ``max_per_user`` is refused with
  :class:`~chute.errors.DestinationFull` before anything is made. A queue's
  maker is its DEFINE record's owner, so the counts survive a restart; a topic
  has no record and counts while it exists (after a restart it comes back only
  for its durable subscriptions, uncounted).
* **Reclaiming.** Before a make is refused at a limit, the made destinations
  (of that maker, for ``max_per_user``) that are unused now (no messages, no
  consumers, no subscriptions, no cursor, no prepared transaction sending to
  them) are removed, oldest made first, up to a sixteenth of the limit at
  once: such a destination is made again by its next use, so removing it
  loses nothing, and a flood of names (from one client, or restored after a
  restart) cannot lock every other client out of making destinations.
  Destinations that hold messages are never reclaimed: then the limit binds
  until they are consumed, purged or deleted. A reclaim that found nothing is
  not tried again at that limit for :data:`RECLAIM_RETRY_MS`, so a client
  that keeps trying costs one walk a second.
* **Deleting** a queue discards every message it holds (waiting, in flight or
  paged: the store forgets them with the queue) and closes its consumers, each
  told why (:class:`~chute.core.model.consumer.Cancellable`). Deleting a topic ends
  its subscriptions; durable ones (and their messages) only when forced. The
  reserved and declared destinations, temporary and login-name queues are
  never deleted; nor is a destination a prepared transaction holds messages
  of, or one consumed by a part of the broker that cannot be told.
* **Purging** a queue removes every waiting message (acked in the store);
  messages in flight stay with their consumers.
* **Idle**: a made destination with no consumers, no subscriptions and no
  messages, whose use counters (messages in, consumers or subscriptions
  made) did not move for its ``auto_delete_after_ms``, is removed by the
  broker's sweep (:meth:`Destinations.remove_idle`), one log line per sweep.
  Watching counters, not stamping times, keeps the per-message path free.

A queue or topic made after a deletion numbers its messages on from the
highest number a deleted one reached, so an ack a transaction still holds for
a deleted queue can never name a message of its successor. A stream's numbers
are its offsets, which users see: a new stream starts at 1 whatever was
deleted before it, and one made again under the name of a deleted stream goes
on from where that one stopped, so an offset is never reused.

Pure; used from the broker's loop only. What it needs from the broker is
:class:`DestinationHost`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from chute.core.model.address import parse
from chute.core.model.consumer import Cancellable, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.queuetypes import LoginQueue
from chute.core.model.registry import Registry
from chute.core.model.store import QueueDefinition, QueueKind
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, Topic
from chute.core.rules.cursor import Cursors
from chute.core.rules.subscriptions import Subscriptions
from chute.core.rules.twophase import PreparedTransactions
from chute.errors import (
    ConsumerError,
    DestinationDeleted,
    DestinationFull,
    InvalidAddress,
    NotFound,
    TransactionError,
)

log = logging.getLogger("chute.broker")

ANONYMOUS: Final = ""
"""The maker of what is made without users (a DEFINE record's owner ``""``)."""
RECLAIM_SHARE: Final = 16
"""At a limit, a reclaim removes up to ``limit // RECLAIM_SHARE`` unused destinations
(at least one), so that a stream of makes at the limit scans and logs once per batch."""
RECLAIM_RETRY_MS: Final = 1000
"""After a reclaim found nothing unused, makes at that limit are refused without looking
again for this long: a client that keeps making destinations at a full broker costs it
one walk over the made destinations a second, not one per attempt."""


class DestinationHost(Registry, Protocol):
    """What :class:`Destinations` needs from the broker."""

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def cursors(self) -> Cursors: ...

    @property
    def xa(self) -> PreparedTransactions: ...

    def delete_queue(self, queue: QueueChannel) -> list[Entry]:
        """Remove a queue and forget it in the store; what it still held in memory."""

    def room_freed(self, queue: QueueChannel) -> None:
        """Wake producers waiting for room in ``queue`` (they retry)."""

    def delete_stream(self, stream: Stream) -> None:
        """Remove a stream and forget it in the store."""

    def delete_topic(self, topic: Topic) -> None:
        """Remove a topic (its subscriptions are dropped first)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's settings about destinations made by use (0: none)."""

    max_total: int = 0  # server.max_destinations
    max_per_user: int = 0  # server.max_destinations_per_user
    idle_after_ms: int = 0  # server.auto_delete_after_ms


class Destinations:
    """See the module docstring. Used from the broker's loop only."""

    def __init__(
        self,
        host: DestinationHost,
        limits: Limits | None = None,
        *,
        declared: Iterable[str] = (),
        idle_settings: bool = False,
    ) -> None:
        self.host = host
        self.limits = limits = limits or Limits()
        self.declared = set(declared)
        self.made: dict[str, str] = {}  # address -> maker
        self.by_maker: Counter[str] = Counter()
        self.removed = 0
        """Destinations removed so far: a connection that remembers what it may send to
        forgets it when this moves (a removed address is made anew by its next use)."""
        self.reborn_seq = 1
        """Where a queue or topic made from now on starts numbering (see the module docstring)."""
        self.stream_seq: dict[str, int] = {}
        """Where a stream made again under a deleted one's address starts numbering."""
        self._sweeps = limits.idle_after_ms > 0 or idle_settings
        self._idle: dict[str, tuple[int, int]] = {}  # address -> (use counters, since)
        self._futile: dict[str | None, int] = {}  # maker (None: anyone) -> a reclaim found none

    # -- made by use -----------------------------------------------------------------

    def admit(self, address: str, maker: str, *, quota: bool = True) -> None:
        """Raise DestinationFull if ``maker`` may not make ``address`` now (``quota`` False:
        a user who manages everything, not held to ``max_per_user``). At a limit, unused
        made destinations are reclaimed first (see the module docstring)."""
        limits = self.limits
        if limits.max_total and len(self.made) >= limits.max_total:
            self._reclaim(None, limits.max_total)
        if limits.max_total and len(self.made) >= limits.max_total:
            raise DestinationFull(
                f"cannot make {address}: clients have made {len(self.made)} destinations, "
                f"the most server.max_destinations allows, and each holds messages or has "
                "consumers; delete unused ones (chute delete ADDRESS) or raise the limit"
            )
        if not (quota and maker and limits.max_per_user):
            return
        if self.by_maker[maker] >= limits.max_per_user:
            self._reclaim(maker, limits.max_per_user)
        made = self.by_maker[maker]
        if made >= limits.max_per_user:
            raise DestinationFull(
                f"cannot make {address}: user {maker} has made {made} destinations, the "
                "most server.max_destinations_per_user allows, and each holds messages or "
                "has consumers; delete unused ones (chute delete ADDRESS) or ask for the "
                "limit to be raised"
            )

    def _reclaim(self, maker: str | None, limit: int) -> int:
        """Remove up to a sixteenth of ``limit`` (at least one) of the destinations made
        by use (by ``maker``; None: by anyone) that are unused now, oldest made first;
        how many. One log line per reclaim."""
        host = self.host
        now = host.clock()
        if now - self._futile.get(maker, now - RECLAIM_RETRY_MS) < RECLAIM_RETRY_MS:
            return 0
        wanted = max(1, limit // RECLAIM_SHARE)
        pending = {id(q) for q, _ in host.xa.placements()}
        read = {cursor.address for cursor in host.cursors.all()}  # a position to keep
        gone: list[str] = []
        for address, made_by in list(self.made.items()):
            if maker is not None and made_by != maker:
                continue
            dest = host.queues.get(address) or host.topics.get(address)
            if dest is None or id(dest) in pending or address in read or _use(dest) is None:
                continue
            self._remove(address, dest)
            gone.append(address)
            if len(gone) >= wanted:
                break
        if not gone:
            self._futile[maker] = now
            return 0
        self._futile.pop(maker, None)
        log.info(
            "reclaimed %d unused destinations made by %s to make room under server.%s (%d): %s%s",
            len(gone),
            "anyone" if maker is None else (maker or "anonymous"),
            "max_destinations" if maker is None else "max_destinations_per_user",
            limit,
            ", ".join(gone[:5]),
            ", ..." if len(gone) > 5 else "",
        )
        return len(gone)

    def _remove(self, address: str, dest: QueueChannel | Topic) -> None:
        """Remove an unused made destination (idle, or reclaimed at a limit)."""
        if isinstance(dest, Topic):
            self.host.delete_topic(dest)
        else:
            self.host.delete_queue(dest)
        self._gone(address, dest)

    def note_made(self, address: str, maker: str) -> None:
        """``maker`` made ``address`` by using it (counted from now on)."""
        self.made[address] = maker
        self.by_maker[maker] += 1

    def restored(self, definition: QueueDefinition) -> None:
        """Recovery found a queue's definition: count it if a client made it."""
        if (
            definition.kind is QueueKind.QUEUE
            and definition.owner is not None
            and definition.name not in self.declared
        ):
            self.note_made(definition.name, definition.owner)

    def next_seq(self, dest: QueueChannel | Topic | Stream) -> int:
        """Where ``dest``, made now, starts numbering (see the module docstring)."""
        if isinstance(dest, Stream):
            return self.stream_seq.get(dest.address, 1)
        return self.reborn_seq

    def _gone(self, address: str, dest: QueueChannel | Topic | Stream) -> None:
        maker = self.made.pop(address, None)
        if maker is not None:
            self.by_maker[maker] -= 1
            if not self.by_maker[maker]:
                del self.by_maker[maker]
        self._idle.pop(address, None)
        self.removed += 1
        if isinstance(dest, Stream):
            self.stream_seq[address] = dest.next_seq
        else:
            self.reborn_seq = max(self.reborn_seq, dest.next_seq)
        self.host.cursors.forget(address)

    # -- deleting and purging ------------------------------------------------------------

    def delete(
        self,
        address: str,
        *,
        force: bool = False,
        check_owner: Callable[[Subscription], None] | None = None,
        by: str = "",
    ) -> int:
        """Delete the queue or topic at canonical ``address``; how many messages went with
        it. ``check_owner`` raises AccessDenied for a durable subscription the deleter
        may not delete (forced topic deletes); ``by`` names the deleter in the log and
        in what its consumers are told.

        Raises:
            NotFound: no such destination.
            InvalidAddress: a reserved, declared, temporary or login-name queue.
            ConsumerError: a topic with durable subscriptions and no ``force``; a
                consumer run by the broker itself (a dropbox mount, the smq sink).
            TransactionError: prepared transactions hold messages of it.
            AccessDenied: from ``check_owner``.
        """
        stream = self.host.streams.get(address)
        if stream is not None:
            return self._delete_stream(stream, by)
        dest = self.host.queues.get(address) or self.host.topics.get(address)
        if dest is None:
            raise NotFound(f"{address} does not exist: nothing to delete")
        self._check_deletable(address, dest)
        queues: list[QueueChannel] = [dest] if isinstance(dest, QueueChannel) else []
        durable: list[Subscription] = []
        if isinstance(dest, Topic):
            queues.extend(dest.subscriptions.values())
            durable = [s for s in dest.subscriptions.values() if s.durable]
            if durable and not force:
                raise ConsumerError(
                    f"{address} has {len(durable)} durable subscriptions "
                    f"({', '.join(sorted(s.name for s in durable)[:5])}): unsubscribe them "
                    "first, or delete with force, which deletes them and their messages too"
                )
            for sub in durable:
                if check_owner is not None:
                    check_owner(sub)
        self._check_unheld(address, queues)
        count = sum(q.held for q in queues)
        consumers = [c for q in queues for c in q.evict_consumers()]
        if isinstance(dest, Topic):
            for sub in list(dest.subscriptions.values()):
                self.host.subscriptions.drop(sub)
            self.host.delete_topic(dest)
        else:
            self.host.delete_queue(dest)
            self.host.room_freed(dest)  # blocked producers retry (and make it anew)
        self._gone(address, dest)
        error = DestinationDeleted(
            f"{address} was deleted{f' by {by}' if by else ''}: this consumer is closed"
        )
        for consumer in consumers:
            if isinstance(consumer.receiver, Cancellable):
                consumer.receiver.cancelled(consumer, error)
        log.info(
            "deleted %s%s: %d messages discarded, %d consumers closed, "
            "%d durable subscriptions deleted",
            address,
            f" (by {by})" if by else "",
            count,
            len(consumers),
            len(durable),
        )
        return count

    def _delete_stream(self, stream: Stream, by: str) -> int:
        address = stream.address
        self._check_deletable(address, stream)
        if any(stream.address == q.address for q, _ in self.host.xa.placements()) or (
            stream.reserved
        ):
            raise TransactionError(
                f"prepared transactions send to {address}: commit or roll them back first "
                "(chute tx list)"
            )
        readers = list(stream.readers)
        self._check_unheld(address, list(readers))
        count = stream.count
        consumers = [c for reader in readers for c in reader.evict_consumers()]
        for reader in readers:
            reader.close()  # what it held waiting goes, with the memory it took
        self.host.delete_stream(stream)
        self._gone(address, stream)
        error = DestinationDeleted(
            f"{address} was deleted{f' by {by}' if by else ''}: this consumer is closed"
        )
        for consumer in consumers:
            if isinstance(consumer.receiver, Cancellable):
                consumer.receiver.cancelled(consumer, error)
        log.info(
            "deleted %s%s: %d messages discarded, %d readers closed",
            address,
            f" (by {by})" if by else "",
            count,
            len(consumers),
        )
        return count

    def _check_deletable(self, address: str, dest: QueueChannel | Topic | Stream) -> None:
        addr = parse(address)
        if addr.name.startswith("__sys__"):
            raise InvalidAddress(f"{address} is the broker's own: it can be purged, not deleted")
        if address in self.declared:
            raise InvalidAddress(
                f"{address} is declared in the configuration ([destinations]): take it out "
                "there and restart to delete it, or purge it to empty it"
            )
        if addr.is_temporary:
            raise InvalidAddress(f"{address} is a temporary queue: it goes with its connection")
        if isinstance(dest, LoginQueue):
            raise InvalidAddress(
                f"{address} is a login-name queue: it lasts as long as its user; purge it "
                "to empty it"
            )

    def _check_unheld(self, address: str, queues: list[QueueChannel]) -> None:
        """Raise unless nothing but clients' consumers holds ``queues``' messages."""
        held = {id(q) for q in queues}
        prepared = sum(1 for q, _ in self.host.xa.placements() if id(q) in held)
        prepared += sum(1 for q, _ in self.host.xa.taken() if id(q) in held)
        if prepared:
            raise TransactionError(
                f"prepared transactions hold {prepared} messages of {address}: commit or "
                "roll them back first (chute tx list)"
            )
        for queue in queues:
            if any(not isinstance(c.receiver, Cancellable) for c in queue.router.consumers):
                raise ConsumerError(
                    f"{address} is consumed by a part of the broker itself (a [[dropbox]] "
                    "mount or the [smq] sink): stop that first"
                )

    def purge(self, address: str, *, by: str = "") -> int:
        """Remove every waiting message of the queue at canonical ``address``; how many.

        Raises:
            NotFound: no such queue. InvalidAddress: a topic.
        """
        dest = (
            self.host.queues.get(address)
            or self.host.topics.get(address)
            or self.host.streams.get(address)
        )
        if dest is None:
            raise NotFound(f"{address} does not exist: nothing to purge")
        if isinstance(dest, Topic):
            raise InvalidAddress(
                f"{address} is a topic: it holds nothing itself (a durable subscription's "
                "messages go when it is unsubscribed)"
            )
        count = dest.purge()
        log.info("purged %s%s: %d messages removed", address, f" (by {by})" if by else "", count)
        return count

    # -- idle ------------------------------------------------------------------------------

    def remove_idle(self, now: int) -> int:
        """Remove the made destinations idle for their ``auto_delete_after_ms``; how many."""
        if not self._sweeps or not self.made:
            return 0
        host = self.host
        pending = {id(q) for q, _ in host.xa.placements()}
        gone: list[str] = []
        for address in list(self.made):
            dest = host.queues.get(address) or host.topics.get(address)
            if dest is None:
                continue
            setting = dest.settings.auto_delete_after_ms
            after = self.limits.idle_after_ms if setting is None else setting
            use = _use(dest) if after else None
            if use is None or id(dest) in pending:
                self._idle.pop(address, None)
                continue
            seen = self._idle.get(address)
            if seen is None or seen[0] != use:
                self._idle[address] = (use, now)
            elif now - seen[1] >= after:
                self._remove(address, dest)
                gone.append(address)
        if gone:
            log.info(
                "removed %d idle destinations (made by use, then unused for their "
                "auto_delete_after_ms): %s%s",
                len(gone),
                ", ".join(gone[:5]),
                ", ..." if len(gone) > 5 else "",
            )
        return len(gone)

    # -- looking -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """How many destinations clients made, in all and by maker (JSON-ready)."""
        return {
            "total": len(self.made),
            "max_destinations": self.limits.max_total,
            "max_destinations_per_user": self.limits.max_per_user,
            "by_user": {maker or "anonymous": n for maker, n in sorted(self.by_maker.items())},
        }


def _use(dest: QueueChannel | Topic) -> int | None:
    """A number that moves whenever ``dest`` is used; None while it is busy (it holds
    messages, or has consumers or subscriptions)."""
    if isinstance(dest, Topic):
        return None if dest.subscriptions else dest.published + dest.subscribed
    if dest.held or dest.router.consumers or (isinstance(dest, LoginQueue) and dest.pipes):
        return None
    return dest.enqueued + dest.attached


__all__ = ["ANONYMOUS", "DestinationHost", "Destinations", "Limits"]
