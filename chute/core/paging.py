"""Paging: how a durable queue keeps its memory bounded however deep its backlog.

Seed 002's memory bound, after Artemis' paging. The broker keeps one
:class:`MemoryBudget` for the message data every queue holds in memory.
While it is over its limit, a durable queue stops taking new messages into
memory: it *pages* them. A paged message lives only in the store (a
persistent one was recorded there anyway; a non-persistent one is recorded
for the purpose) and the queue keeps nothing for it but its count and size.
As consumers drain the queue, it reads the paged messages back from the
store in sequence order, a window at a time (:meth:`Store.page_in`).

Invariants (per queue, in :class:`~chute.core.queue.QueueChannel`):

* ``top_seq`` is the highest sequence number the queue ever held in memory;
  the paged messages are exactly the live ones in the store above it. So a
  message may be paged only if its sequence number is above ``top_seq``
  (a late transaction commit below it stays in memory), and reading back
  "everything above ``top_seq``, in order" never returns a message twice.
* Once a queue pages, every new message pages until the backlog is read
  back, so the arrival order is kept.

Costs and limits, written for users in ``docs/durability.md``: priorities
order what is in memory, so a high-priority message paged behind a backlog
waits for its turn to be read back; selectors see the in-memory window only;
temporary queues and non-durable subscriptions never page (their bound is
their overflow policy); while a transaction's records are being gathered
(:meth:`Broker.atomically`) a queue reads nothing back, since the store
does not hold them yet: it reads once they are written.
"""

from __future__ import annotations

from typing import Final

PAGE_BYTES: Final = 1 << 20  # how much one read-back brings in
PAGE_MIN: Final = 16  # ... but at least this many messages
PAGE_MAX: Final = 4096  # ... and at most this many


class MemoryBudget:
    """Message bytes held in memory by every queue, against ``limit`` (0: no limit)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = 0) -> None:
        if limit < 0:
            raise ValueError(f"memory limit {limit} must be 0 (no paging) or positive")
        self.limit = limit
        self.used = 0

    @property
    def over(self) -> bool:
        return 0 < self.limit <= self.used

    def __repr__(self) -> str:
        return f"MemoryBudget(used={self.used}, limit={self.limit})"


def window(paged: int, paged_bytes: int) -> int:
    """How many paged messages to read back at once: about PAGE_BYTES worth."""
    if paged <= 0:
        return 0
    average = max(1, paged_bytes // paged)
    return min(paged, max(PAGE_MIN, min(PAGE_MAX, PAGE_BYTES // average)))
