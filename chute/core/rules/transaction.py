"""Transactions: what one holds, the order every commit applies, and where its records go.

A transaction gathers sends, acks and nacks (:class:`Transaction`, one per
transacted session, :mod:`chute.core.operations.session`). Two ways end it well: a local
commit applies it at once; a two-phase prepare stages it under an xid and a
later commit applies it (:mod:`chute.core.rules.twophase`). Both keep the rules
here, so they agree:

- **Room first** (:func:`check_room`): a commit (or prepare) whose sends cannot
  all fit under a ``reject`` or ``block`` bound, counting the room its own acks
  free, changes nothing and raises.
- **Order** (:func:`apply`): the acks settle, then the sends are placed, then
  the nacks are decided: back in their place (``requeue``) or to the dead-letter
  address, unless their queue was deleted meanwhile.
- **Rollback** (:func:`give_back`): the acked and nacked messages go back in
  their place, redelivered; the sends are dropped.

Records: a commit applies inside ``Broker.atomically``, which opens a
:class:`Gathering`, the transaction's record sink. While it is open the broker's
parts reach it through their host's ``store`` (``Broker.store`` is the record
sink of the moment: the store, or the open gathering); everything the commit
causes (its acks and adds, and the diversions, auto-acks and forwards placing
its sends causes) is gathered in order and reaches the store as one atomic
:meth:`Store.commit <chute.core.model.store.Store.commit>`, delivery hints after it.
Nothing swaps the store: the broker knows whether a gathering is open
(``Broker.gathering``), and asks that, never the store's type.

Used from the broker's loop only.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from chute.core.model.consumer import ConsumedQueue, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Destination
from chute.core.model.settings import Overflow
from chute.core.model.store import (
    AckOp,
    AddOp,
    QueueDefinition,
    Recovered,
    Store,
    StoredBlock,
    StoredMessage,
    SyncCallback,
    TxOp,
)
from chute.core.model.topic import Topic
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError, DestinationFull, TransactionError
from chute.message import Message

Send = tuple[str, Message, int]
"""A transaction's send: (address, message, ttl in ms)."""
Taken = tuple[ConsumedQueue, Entry]
"""A message a transaction took out of flight, with its queue."""
Nacked = tuple[ConsumedQueue, Entry, bool]
"""A message a transaction refused, with its queue and whether it goes back (requeue)."""


def runs(sends: Sequence[Send]) -> Iterator[tuple[str, int, list[Message]]]:
    """``sends`` as runs of consecutive sends to the same address with the same time to
    live, ``(address, ttl, messages)``, in order: what a commit routes together (a run to
    a stream is one batch)."""
    for (address, ttl), run in itertools.groupby(sends, key=_address_ttl):
        yield address, ttl, [send[1] for send in run]


_address_ttl: Final = operator.itemgetter(0, 2)

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


class Gathering:
    """The record sink of a commit being applied (``Broker.atomically``): the broker's
    parts reach it through their host's ``store`` while it is open.

    Adds and acks (the transaction's own, and any its sends cause: diversions,
    auto-acks on push, forwards) are gathered in order and reach the real store
    as one atomic :meth:`Store.commit` in :meth:`flush`; delivery hints follow
    the commit. Everything else goes straight through.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ops: list[TxOp] = []
        self._hints: list[tuple[str, int, int]] = []

    def define(self, definition: QueueDefinition) -> None:
        self.store.define(definition)

    def undefine(self, name: str) -> None:
        self.store.undefine(name)

    def add(self, op: AddOp) -> None:
        self.ops.append(op)

    def ack(self, op: AckOp) -> None:
        self.ops.append(op)

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        self.ops.extend(AckOp(queue, seq) for seq in seqs)

    def delivered(self, queue: str, seq: int, delivery_count: int) -> None:
        self._hints.append((queue, seq, delivery_count))

    def delivered_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        self._hints += [(queue, seq, count) for seq, count in zip(seqs, counts, strict=True)]

    def commit(self, ops: Sequence[TxOp]) -> None:
        self.ops.extend(ops)

    def prepare(self, xid: str, ops: Sequence[TxOp]) -> None:
        self.store.prepare(xid, ops)

    def sent(self, producer: str, message_id: str) -> None:
        self.store.sent(producer, message_id)

    def stream_first(self, stream: str, first: int) -> None:
        self.store.stream_first(stream, first)

    def commit_prepared(self, xid: str) -> None:
        self.store.commit_prepared(xid)

    def rollback_prepared(self, xid: str) -> None:
        self.store.rollback_prepared(xid)

    def sync(self, callback: SyncCallback) -> None:
        self.store.sync(callback)

    def sync_inline(self, callbacks: list[SyncCallback]) -> bool:
        return self.store.sync_inline(callbacks)

    def space_low(self) -> str | None:
        return self.store.space_low()

    def backlog(self) -> int:
        return self.store.backlog()

    def syncs_off_loop(self, seconds: float) -> None:
        self.store.syncs_off_loop(seconds)

    def reading_waits(self) -> bool:
        return self.store.reading_waits()

    def recover(self) -> Recovered:
        return self.store.recover()

    def page_in(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        return self.store.page_in(queue, after, limit)

    def page_blocks(self, queue: str, after: int, limit: int) -> list[StoredBlock]:
        return self.store.page_blocks(queue, after, limit)

    def sealed(self, destination: str) -> int:
        return self.store.sealed(destination)

    def close(self) -> None:
        self.store.close()

    def flush(self) -> None:
        """Write what was gathered: one commit, then the delivery hints."""
        ops, self.ops = self.ops, []
        hints, self._hints = self._hints, []
        if ops:
            self.store.commit(ops)
        if len(hints) == 1:
            self.store.delivered(*hints[0])
        elif hints:  # one call per queue (in order: a commit's deliveries are mostly one queue's)
            for queue, group in itertools.groupby(hints, key=lambda hint: hint[0]):
                marks = list(group)
                self.store.delivered_many(queue, [m[1] for m in marks], [m[2] for m in marks])


def check_waiting_helps(never_admits: Callable[[int], str | None], tx: Transaction | None) -> None:
    """A send of ``tx`` must wait for room: if its own messages keep the broker from ever
    admitting it (``never_admits(held)`` says why, else None), it is refused now instead
    (the transaction can only roll back), not after ``block_timeout_ms``.

    Raises:
        TransactionError: waiting cannot help.
    """
    if tx is None:
        return
    reason = never_admits(tx.held)
    if reason is not None:
        error = TransactionError(reason)
        tx.refused = tx.refused or error
        raise error
