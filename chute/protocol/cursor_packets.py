"""The native protocol's cursor packets: reading a destination by sequence number (Spark).

``CursorOpen`` → ``CursorInfo`` opens (or refreshes) a named cursor, or describes a
queue; ``CursorFetch`` → ``CursorPage`` reads a range of the held messages in pages
without consuming them; ``CursorAck`` consumes below an end (Spark's commit);
``CursorClose`` releases the cursor's lease, or forgets it (docs/spark.md has the
whole exchange). Plain frozen data like every packet; their wire tags are
:class:`chute.protocol.packets.PacketType`'s and their bytes
:mod:`chute.protocol.spec`'s (a CursorPage read column by column:
:mod:`chute.protocol.columns`). :mod:`chute.protocol.packets` re-exports each one,
so ``packets.CursorOpen`` and ``packets.CursorPage`` name them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from chute.message import Message


@dataclass(frozen=True, slots=True)
class CursorOpen:
    """Open (or refresh) the named cursor ``cursor`` on ``address``; answered by CursorInfo.

    A cursor reads a destination by sequence number without consuming: on a
    queue it holds the queue like an exclusive consumer, on a topic it is a
    durable subscription of its own. It stays leased while a connection that
    opened it is alive and ``lease_ms`` after that (0: the broker's default).
    Without ``cursor``, nothing is opened: the answer describes the queue
    (a snapshot, as browsing).
    """

    address: str
    cursor: str | None = None
    selector: str | None = None
    lease_ms: int = 0


@dataclass(frozen=True, slots=True)
class CursorInfo:
    """Answer to CursorOpen: ``earliest`` is the lowest sequence the cursor still holds
    (``head`` if none), ``head`` the first sequence not yet readable (every message
    below it that the cursor will ever see is there now)."""

    earliest: int
    head: int


@dataclass(frozen=True, slots=True)
class CursorFetch:
    """Read the held messages with ``start <= seq < end`` in sequence order, without
    consuming them: one page of at most ``max_messages`` and about ``max_bytes``
    of bodies (0: no limit). Answered by CursorPage; continue from its ``next``."""

    address: str
    cursor: str | None
    start: int
    end: int
    max_messages: int = 0
    max_bytes: int = 0


@dataclass(frozen=True, slots=True)
class CursorPage:
    """Answer to CursorFetch: ``(seq, message)`` pairs in sequence order, and where the
    next page starts (``next`` equals the request's ``end`` when the range is done)."""

    next: int
    messages: tuple[tuple[int, Message], ...] = ()


@dataclass(frozen=True, slots=True)
class CursorAck:
    """Consume every message the cursor holds below ``end`` (Spark's commit); Ok once
    durable."""

    address: str
    cursor: str
    end: int


@dataclass(frozen=True, slots=True)
class CursorClose:
    """Release the cursor's lease; with ``delete`` also forget it (a topic cursor's
    subscription and what it holds go)."""

    address: str
    cursor: str
    delete: bool = False


__all__ = ["CursorAck", "CursorClose", "CursorFetch", "CursorInfo", "CursorOpen", "CursorPage"]
