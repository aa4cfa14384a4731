"""Transactions: what one holds, the order every commit applies, and where its records go.

A transaction gathers sends, acks and nacks (:class:`Transaction`, one per
transacted session, :mod:`chute.core.session`). Two ways end it well: a local
commit applies it at once; a two-phase prepare stages it under an xid and a
later commit applies it (:mod:`chute.core.twophase`). Both keep the rules
here, so they agree:

- **Room first** (:func:`check_room`): a commit (or prepare) whose sends cannot
  all fit under a ``reject`` or ``block`` bound, counting the room its own acks
  free, changes nothing and raises.
- **Order** (:func:`apply`): the acks settle, then the sends are placed, then
  the nacks are decided: back in their place (``requeue``) or to the dead-letter
  address, unless their queue was deleted meanwhile.
- **Rollback** (:func:`give_back`): the acked and nacked messages go back in
  their place, redelivered; the sends are dropped.

Records: a commit applies inside ``Broker.atomically``, so everything it causes
reaches the store as one atomic commit (:class:`chute.core.store.Gathering`).

Used from the broker's loop only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chute.core.consumer import ConsumedQueue, Entry
from chute.core.queue import QueueChannel
from chute.core.routing import Destination, WouldBlock
from chute.core.settings import Overflow
from chute.core.topic import Topic
from chute.errors import ChuteError, DestinationFull
from chute.message import Message

Send = tuple[str, Message, int]
"""A transaction's send: (address, message, ttl in ms)."""
Taken = tuple[ConsumedQueue, Entry]
"""A message a transaction took out of flight, with its queue."""
Nacked = tuple[ConsumedQueue, Entry, bool]
"""A message a transaction refused, with its queue and whether it goes back (requeue)."""

_REFUSING = (Overflow.REJECT, Overflow.BLOCK)  # the policies that can refuse a commit


@dataclass
class Transaction:
    """A local transaction: sends, acks and nacks that commit or roll back together."""

    sends: list[Send] = field(default_factory=list)
    acks: list[Taken] = field(default_factory=list)
    nacks: list[Nacked] = field(default_factory=list)
    held: int = 0
    """What the sends cost the broker's memory until they commit (``held_cost``)."""
    refused: ChuteError | None = None
    """Why a send of this transaction was refused: it can only roll back now (a client
    that sends without waiting must not see the rest commit without it)."""

    @property
    def empty(self) -> bool:
        return not (self.sends or self.acks or self.nacks or self.refused)


def apply(
    acks: Sequence[Taken],
    place: Callable[[], None],
    nacks: Sequence[Nacked],
    *,
    recorded: bool = False,
) -> None:
    """Apply a transaction in the one order every commit keeps: settle ``acks``, then
    ``place()`` the sends, then decide ``nacks``. ``recorded``: the store has the
    acks already (a two-phase commit's record carries them)."""
    for queue, entry in acks:
        queue.settle(entry, recorded=recorded)
    place()
    for queue, entry, requeue in nacks:
        if queue.deleted:
            continue
        if requeue:
            queue.requeue([entry])
        else:
            queue.reject(entry)


def give_back(acks: Sequence[Taken], nacks: Sequence[Nacked] = ()) -> None:
    """Roll back: requeue what a transaction acked or nacked, one call per queue
    (redelivered)."""
    by_queue: dict[int, tuple[ConsumedQueue, list[Entry]]] = {}
    for queue, entry in itertools.chain(acks, ((queue, entry) for queue, entry, _ in nacks)):
        by_queue.setdefault(id(queue), (queue, []))[1].append(entry)
    for queue, entries in by_queue.values():
        queue.requeue(entries)


def check_room(
    destination: Callable[[str], Destination], sends: Sequence[Send], acks: Sequence[Taken]
) -> None:
    """Refuse a commit whose ``sends`` cannot all fit under ``reject``/``block`` policies
    (counting the room ``acks`` free).

    Also resolves every address first (``destination``), so a send to a destination
    that has gone since (a closed temporary queue) fails before anything is applied.

    Raises:
        DestinationFull: no room under ``reject``. WouldBlock: no room under ``block``.
        InvalidAddress, NotFound: as ``destination``.
    """
    needed: dict[str, tuple[QueueChannel, int, int]] = {}
    resolved: dict[str, QueueChannel | Topic | None] = {}  # None: never refuses
    for address, message, _ttl in sends:
        try:
            dest = resolved[address]
        except KeyError:
            found = destination(address)
            dest = None  # a stream makes room by retention; an unbounded queue has it
            if isinstance(found, Topic) or (
                isinstance(found, QueueChannel) and found.settings.overflow in _REFUSING
            ):
                dest = found
            resolved[address] = dest
        if dest is None:
            continue
        targets = dest.router.route(message) if isinstance(dest, Topic) else [dest]
        for queue in targets:
            if queue.settings.overflow not in _REFUSING:
                continue
            _, count, size = needed.get(queue.name, (queue, 0, 0))
            needed[queue.name] = (queue, count + 1, size + message.size)
    if not needed:
        return
    freed: dict[str, tuple[int, int]] = {}
    for taken_from, entry in acks:
        count, size = freed.get(taken_from.name, (0, 0))
        freed[taken_from.name] = (count + 1, size + entry.message.size)
    for name, (queue, count, size) in needed.items():
        s = queue.settings
        freed_count, freed_size = freed.get(name, (0, 0))
        if (s.max_messages and queue.held - freed_count + count > s.max_messages) or (
            s.max_bytes and queue.held_bytes - freed_size + size > s.max_bytes
        ):
            reason = (
                f"{queue.address} has no room for this transaction's {count} messages; "
                "nothing was committed"
            )
            if s.overflow is Overflow.BLOCK:
                raise WouldBlock(reason, queue.address, s.block_timeout_ms)
            raise DestinationFull(reason)
