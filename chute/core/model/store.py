"""The ``Store`` interface: every durable enqueue, ack and transaction goes through it.

The core never touches a file. It tells the store what happened, in order, as
records shaped like a journal's (after Artemis: add, ack, prepare, commit,
rollback, plus definitions of durable queues and subscriptions), and asks for
a *sync barrier* when a producer is waiting: ``sync(callback)`` calls back once
every record appended so far is durable. That split is what lets a journal
group many producers' records into one fsync.

Only persistent messages held by durable queues reach the store; transient
messages and temporary queues never do (but for a paging queue's transient
messages, which it records to page them out).

Sequence numbers are per destination, assigned by the core in the order the
broker accepted the messages; they also order recovery.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Protocol

from chute.content import encode_content
from chute.message import Message

SyncCallback = Callable[[BaseException | None], None]


class QueueKind(enum.Enum):
    QUEUE = "queue"  # a named queue (also login-name queues)
    SUBSCRIPTION = "subscription"  # a durable topic subscription
    CALLBACK = "callback"  # a durable subscription that forwards to a destination
    STREAM = "stream"  # a stream's log (chute.core.model.stream): acked only by retention
    LEDGER = "ledger"
    """A cluster's bookkeeping with one other node (chute.core.rules.cluster): each
    "message" is a record of a hand-over (sent, unconfirmed; or received, unreleased),
    never a destination clients see."""
    EXCHANGE = "exchange"
    """An AMQP exchange declared durable (chute.core.rules.exchanges): its type and flags
    travel as JSON in ``selector``; never a destination, it holds no messages."""
    BINDING = "binding"
    """A durable AMQP binding (chute.core.rules.exchanges): exchange, queue, key and
    arguments as JSON in ``selector``; it holds no messages."""
    DECLARATION = "declaration"
    """What an AMQP declare said of a durable queue (chute.core.rules.exchanges): its
    flags and x-arguments as JSON in ``selector``; the queue itself is a QUEUE or a
    STREAM, this holds no messages."""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueDefinition:
    """A durable queue the store must remember across a restart."""

    name: str  # the store name: the address for queues, a unique key for subscriptions
    kind: QueueKind
    topic: str | None = None  # subscriptions: the topic address
    selector: str | None = None
    forward_to: str | None = None  # callback queues
    owner: str | None = None
    """Who made it: a subscription's user; a queue made by use, its maker ("" anonymous;
    None for one the broker or its configuration made). See chute.core.rules.destinations."""


@dataclasses.dataclass(slots=True)
class AddOp:
    """A message added to one or more queues (a topic's durable subscriptions share one add).

    ``destination`` is the address whose sequence ``seq`` belongs to (the
    topic for subscriptions), so recovery can resume numbering after it.

    A value nobody changes, but not ``frozen``: a frozen dataclass's ``__init__``
    costs about 2.5 times as much, and one of these (or an :class:`AckOp`) is
    made for every persistent message.
    """

    destination: str
    queues: tuple[str, ...]
    seq: int
    message: Message


@dataclasses.dataclass(slots=True)
class AckOp:
    """A message of ``queue`` acked (not frozen, like :class:`AddOp`)."""

    queue: str
    seq: int


TxOp = AddOp | AckOp


@dataclasses.dataclass(slots=True)
class StoredMessage:
    """A message as recovered: its queue position and what is known of its deliveries."""

    seq: int
    message: Message
    delivery_count: int = 0


StoredBlock = tuple[int, int, int, int, int, bytes | memoryview, int]
"""A stored message as its content block, for answers that send it on unchanged
(:meth:`Store.page_blocks`): ``(seq, delivery_count, redelivered (0 or 1), timestamp,
expiration, content block, Message.size)``. The block is the bytes
:func:`chute.content.encode_content` makes (``Message.encoded``); the first five fields
are in the order the native protocol's browse entries carry them. A plain tuple: one is
made per message read, where a class's ``__init__`` would cost more than the read."""


def message_block(
    seq: int, message: Message, delivery_count: int = 0, redelivered: bool = False
) -> StoredBlock:
    """The :data:`StoredBlock` of a message held in memory (encoded now if no codec did)."""
    content = message.encoded
    if content is None:
        content = encode_content(message)
    return (
        seq,
        delivery_count,
        1 if redelivered else 0,
        message.timestamp,
        message.expiration,
        content,
        message.size,
    )


@dataclasses.dataclass(slots=True)
class Recovered:
    """What the store hands back to the core on start."""

    definitions: list[QueueDefinition] = dataclasses.field(default_factory=list)
    messages: dict[str, list[StoredMessage]] = dataclasses.field(default_factory=dict)
    prepared: dict[str, list[TxOp]] = dataclasses.field(default_factory=dict)
    next_seq: dict[str, int] = dataclasses.field(default_factory=dict)
    # queue -> (count, bytes) of live messages numbered above those in ``messages``, left
    # in the store: the queue starts paging them (``page_in``)
    paged: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    report: str = ""
    """What the store found and did while recovering, for the operator ("" if nothing)."""
    clean: bool = True
    """False if the store skipped or cut anything (a torn tail, a corrupt record)."""
    sent: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """``(producer, message id)`` of the requests producers stored, in the order written
    (:meth:`Store.sent`; the newest last): duplicate detection's memory
    (chute.core.rules.dedup)."""
    firsts: dict[str, int] = dataclasses.field(default_factory=dict)
    """stream -> its first offset as :meth:`Store.stream_first` last recorded it (a stream
    not in it: none was; a store written before there was any)."""


class Store(Protocol):
    """Where durable state goes. Called from one thread (the broker's loop)."""

    def define(self, definition: QueueDefinition) -> None:
        """Remember a durable queue or subscription."""

    def undefine(self, name: str) -> None:
        """Forget a durable queue or subscription and every message it holds."""

    def add(self, op: AddOp) -> None:
        """A persistent message entered durable queues (``op.queues``)."""

    def ack(self, op: AckOp) -> None:
        """A message left a durable queue for good (consumed, expired or moved)."""

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        """:meth:`ack` of each of ``seqs`` of ``queue``, in one call (a cumulative ack)."""

    def delivered(self, queue: str, seq: int, delivery_count: int) -> None:
        """A hint that a message was handed to a consumer (drives ``redelivered`` after a crash).

        Never needs a sync; a store may drop or coalesce these.
        """

    def delivered_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        """:meth:`delivered` of each of ``seqs`` (with ``counts[i]``), in one call."""

    def commit(self, ops: Sequence[TxOp]) -> None:
        """Apply a local transaction's records atomically (all or none after a crash)."""

    def prepare(self, xid: str, ops: Sequence[TxOp]) -> None:
        """Stage a two-phase transaction; it survives a restart until commit or rollback."""

    def commit_prepared(self, xid: str) -> None:
        """Apply a prepared transaction."""

    def rollback_prepared(self, xid: str) -> None:
        """Discard a prepared transaction."""

    def sent(self, producer: str, message_id: str) -> None:
        """``producer`` stored a request whose first message id is ``message_id``
        (duplicate detection, chute.core.rules.dedup): kept across a restart, covered
        by the next sync like the records before it."""

    def stream_first(self, stream: str, first: int) -> None:
        """Stream ``stream``'s first offset is ``first`` now (retention or a purge moved it,
        or it took its first message): kept across a restart (``Recovered.firsts``), whatever
        acks follow (compaction's too), until the next call for it or its :meth:`undefine`.
        Covered by the next sync like the records before it; written before the acks
        recorded after it."""

    def sync(self, callback: SyncCallback) -> None:
        """Call ``callback(None)`` once everything appended so far is durable.

        Or ``callback(error)`` if it cannot be made durable (a full disk, a
        failed fsync). The callback may run on another thread; the caller
        marshals it back to its own loop.
        """

    def sync_inline(self, callbacks: list[SyncCallback]) -> bool:
        """Make everything appended so far durable and call each of ``callbacks`` now, on
        the caller's thread, if the store can do it without handing off (a journal whose
        writer is idle); False if not, and the caller uses :meth:`sync` instead."""

    def space_low(self) -> str | None:
        """None while the store can take new messages; else a sentence saying why not, for
        the producers the core then holds off (the journal's disk is under its
        ``disk_free_limit``). Acks, delivery marks and commits that only ack still work:
        the space left is their reserve. Cheap enough to ask on every send.
        """

    def backlog(self) -> int:
        """Bytes recorded but not yet written by the store's writer (0 for a store that
        writes as it records): the core holds producers off while it is large
        (:mod:`chute.core.rules.admission`). Cheap enough to ask on every send."""

    def syncs_off_loop(self, seconds: float) -> None:
        """For the next ``seconds``, run no sync on the caller's thread (the broker's
        loop): each goes to the store's own thread. Bulk work (a move job) asks it while
        it runs: it keeps the disk busy, and a producer's sync run on the loop would
        hold every client while the disk catches up. Cheap; a store that never syncs
        on the caller's thread ignores it."""

    def reading_waits(self) -> bool:
        """Whether reading paged messages (:meth:`page_in`) would wait now for the store's
        own work (the journal's reclaim pass holds its index): work that can wait
        (a move job) asks before it reads. A hint, cheap, never blocking."""

    def recover(self) -> Recovered:
        """Everything durable, for the core to rebuild its queues from."""

    def page_in(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` live messages of ``queue`` numbered above ``after``, in order.

        How a paging queue reads its messages back (:mod:`chute.core.model.paging`).
        Includes everything added so far, written yet or not.

        Raises:
            StoreError: the store cannot read them now (a disk fault).
        """

    def page_blocks(self, queue: str, after: int, limit: int) -> list[StoredBlock]:
        """:meth:`page_in`'s messages as their stored content blocks, without decoding them:
        what a stream read sends on as it is (:meth:`chute.core.model.stream.Stream.read_blocks`).
        Each block has delivery count 0 and is not redelivered, as a stream's reader
        sees every message.

        Raises:
            StoreError: the store cannot read them now (a disk fault).
        """

    def sealed(self, destination: str) -> int:
        """The number below which every message of ``destination`` the store holds lies in
        a part of it that takes no more writes (the journal's segments before the one being
        written): compaction rewrites only those (:mod:`chute.core.rules.compaction`).
        Cheap, never blocking."""

    def close(self) -> None:
        """Flush and release resources."""
