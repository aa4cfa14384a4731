"""The native protocol's management packets: looking at destinations and changing them.

Browsing (``BrowseFetch`` → ``BrowsePage``), statistics (``StatFetch`` →
``StatPage``), temporary and callback queues, unsubscribing, deleting and
purging destinations, and moving messages: ``Move`` (waiting messages of one
queue to another) and ``DeadLetterRetry`` (dead letters back to where they
came from, answered by ``DeadLetterRetryResult``). Plain frozen data like every
packet; their wire tags are :class:`chute.protocol.packets.PacketType`'s and
their bytes :mod:`chute.protocol.spec`'s. :mod:`chute.protocol.packets`
re-exports each one, so ``packets.Browse`` and ``packets.Move`` name them too.

A packet newer than a broker is refused by it as an unknown packet type, with a
connection-level ``Error("unknown-packet-type")`` (the connection closes): the
client says which feature the broker lacks (see ``chute.client.protocol``).
"""

from __future__ import annotations

from dataclasses import dataclass

from chute.message import Message

DEAD_LETTER_QUEUE = "queue:__sys__deadLetter"
"""Where dead letters go unless a destination's settings say otherwise."""


@dataclass(frozen=True, slots=True)
class Browse:
    """Every message of a queue in one answer, in sequence order; ``limit`` 0 = no limit.
    Kept for older clients: a queue larger than one packet can carry is refused
    (``too-large``); BrowseFetch reads any queue in pages."""

    address: str
    selector: str | None = None
    limit: int = 0


@dataclass(frozen=True, slots=True)
class BrowseResult:
    """Response to Browse: ``(seq, message)`` pairs, the messages with their
    broker fields (timestamp, expiration, delivery count, redelivered) set."""

    messages: tuple[tuple[int, Message], ...] = ()


@dataclass(frozen=True, slots=True)
class BrowseFetch:
    """One page of a walk over a queue in sequence order, nothing consumed: the held
    messages numbered ``after < seq < before`` (``before`` 0: the queue's head now,
    which starts a walk), lowest first, at most ``max_messages`` and about
    ``max_bytes`` (0: the broker's bound; it clamps both). Answered by BrowsePage;
    a selector filters the page, so a page may hold fewer messages than asked."""

    address: str
    selector: str | None = None
    after: int = 0
    before: int = 0
    max_messages: int = 0
    max_bytes: int = 0


@dataclass(frozen=True, slots=True)
class BrowsePage:
    """Answer to BrowseFetch: ``(seq, message)`` pairs in sequence order (the messages
    with their broker fields set); the next BrowseFetch sends ``after`` and ``before``
    back, until ``done``."""

    after: int
    before: int
    done: bool
    messages: tuple[tuple[int, Message], ...] = ()


@dataclass(frozen=True, slots=True)
class Stat:
    """Ask for the broker's statistics in one answer (kept for older clients; StatFetch
    pages them)."""


@dataclass(frozen=True, slots=True)
class StatResult:
    """Response to Stat: a JSON document, opaque to the protocol."""

    json_text: str


@dataclass(frozen=True, slots=True)
class StatFetch:
    """Ask for one page of the broker's statistics: the destinations after the address
    ``after`` ("" from the first) in address order, those ``pattern`` matches (an
    address, ``*`` for any characters; None: all), at most ``limit`` (0: the broker's
    bound; it clamps it). Answered by StatPage."""

    pattern: str | None = None
    after: str = ""
    limit: int = 0


@dataclass(frozen=True, slots=True)
class StatPage:
    """Answer to StatFetch: a JSON document like StatResult's with this page's
    destinations, and ``next`` (the next StatFetch's ``after``; None: the last page)."""

    json_text: str
    next: str | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """Delete a durable subscription (of ``client_id``, default: the connection's)."""

    subscription: str
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class TempQueue:
    """Create a temporary queue that lives as long as the connection."""


@dataclass(frozen=True, slots=True)
class TempQueueCreated:
    """Response to TempQueue: the new queue's address."""

    address: str


@dataclass(frozen=True, slots=True)
class CallbackCreate:
    """Create a callback queue: a durable subscription ``subscription`` on ``topic``
    that forwards every message to ``forward_to`` (XmlBlaster's callback queue)."""

    topic: str
    subscription: str
    forward_to: str
    selector: str | None = None


@dataclass(frozen=True, slots=True)
class DestinationDelete:
    """Delete a queue or topic: its messages go and its consumers are closed (each gets
    an unsolicited ``Error`` ``destination-deleted``); a topic's durable subscriptions,
    and their messages, only with ``force``. Answered once durable by ``Ok`` whose
    value is how many messages went (decimal)."""

    address: str
    force: bool = False


@dataclass(frozen=True, slots=True)
class DestinationCreate:
    """Make a queue, topic or stream (needs ``manage`` on the address; counted against
    the limits on made destinations unless the user manages everything). Answered once
    durable by ``Ok``: ``"1"`` made, ``"0"`` it existed already."""

    address: str


@dataclass(frozen=True, slots=True)
class DestinationPurge:
    """Remove every waiting message of a queue (messages in flight stay with their
    consumers). Answered once durable by ``Ok`` whose value is how many went."""

    address: str


@dataclass(frozen=True, slots=True)
class Move:
    """Move the waiting messages of queue ``source`` to ``target``, one at a time and
    atomically each, in sequence order: those ``selector`` matches (None: all), of
    those numbered ``seqs`` (empty: any), at most ``limit`` (0: every one waiting).
    Messages in flight to consumers stay. Answered once durable by ``Ok`` whose value
    is how many moved (decimal)."""

    source: str
    target: str
    selector: str | None = None
    seqs: tuple[int, ...] = ()
    limit: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetterRetry:
    """Send the waiting messages of the dead-letter queue ``source`` back to the
    destination each came from (its ``chute_original_destination``), as Move picks
    them (``selector``, ``seqs``, ``limit``). Answered once durable by
    DeadLetterRetryResult."""

    source: str = DEAD_LETTER_QUEUE
    selector: str | None = None
    seqs: tuple[int, ...] = ()
    limit: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetterRetryResult:
    """Answer to DeadLetterRetry: ``(destination, count)`` pairs, in address order."""

    counts: tuple[tuple[str, int], ...] = ()
