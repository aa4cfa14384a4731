"""The in-memory store: the Store interface with nothing on disk.

It keeps exactly what a journal would keep (definitions, live adds,
delivery counts, prepared transactions) so that a broker rebuilt from the
same MemoryStore recovers as it would from disk. That makes it the reference
the journal is tested against, and it is what ``chute serve`` uses until the
journal exists.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Final

from chute.core.model.store import (
    AckOp,
    AddOp,
    QueueDefinition,
    Recovered,
    StoredBlock,
    StoredMessage,
    SyncCallback,
    TxOp,
    message_block,
)

SENT_KEPT: Final = 1 << 20
"""The most recent :meth:`MemoryStore.sent` records kept (duplicate detection remembers
fewer: its window times its producers, 262,144 by default)."""


class MemoryStore:
    """Not thread-safe: used from the broker's loop only."""

    def __init__(self) -> None:
        self.definitions: dict[str, QueueDefinition] = {}
        self.messages: dict[str, dict[int, StoredMessage]] = {}
        self.prepared: dict[str, list[TxOp]] = {}
        self.next_seq: dict[str, int] = {}
        self.firsts: dict[str, int] = {}
        self.sent_ids: collections.deque[tuple[str, str]] = collections.deque(maxlen=SENT_KEPT)
        self.syncs = 0

    def define(self, definition: QueueDefinition) -> None:
        self.definitions[definition.name] = definition
        self.messages.setdefault(definition.name, {})

    def undefine(self, name: str) -> None:
        self.definitions.pop(name, None)
        self.messages.pop(name, None)
        self.firsts.pop(name, None)

    def add(self, op: AddOp) -> None:
        for queue in op.queues:
            self.messages.setdefault(queue, {})[op.seq] = StoredMessage(op.seq, op.message)
        dest = op.destination
        self.next_seq[dest] = max(self.next_seq.get(dest, 0), op.seq + 1)

    def ack(self, op: AckOp) -> None:
        self.messages.get(op.queue, {}).pop(op.seq, None)

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        held = self.messages.get(queue, {})
        for seq in seqs:
            held.pop(seq, None)

    def delivered(self, queue: str, seq: int, delivery_count: int) -> None:
        stored = self.messages.get(queue, {}).get(seq)
        if stored is not None:
            stored.delivery_count = max(stored.delivery_count, delivery_count)

    def delivered_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        for seq, count in zip(seqs, counts, strict=True):
            self.delivered(queue, seq, count)

    def sent(self, producer: str, message_id: str) -> None:
        self.sent_ids.append((producer, message_id))

    def stream_first(self, stream: str, first: int) -> None:
        self.firsts[stream] = first

    def commit(self, ops: Sequence[TxOp]) -> None:
        for op in ops:
            if isinstance(op, AddOp):
                self.add(op)
            else:
                self.ack(op)

    def prepare(self, xid: str, ops: Sequence[TxOp]) -> None:
        self.prepared[xid] = list(ops)

    def commit_prepared(self, xid: str) -> None:
        self.commit(self.prepared.pop(xid, []))

    def rollback_prepared(self, xid: str) -> None:
        self.prepared.pop(xid, None)

    def sync(self, callback: SyncCallback) -> None:
        self.syncs += 1
        callback(None)

    def sync_inline(self, callbacks: list[SyncCallback]) -> bool:
        """Never: :meth:`sync` answers at once already."""
        return False

    def space_low(self) -> str | None:
        return None  # memory is bounded by memory_high_watermark and the destinations' limits

    def backlog(self) -> int:
        return 0

    def syncs_off_loop(self, seconds: float) -> None:
        pass  # it syncs nothing

    def reading_waits(self) -> bool:
        return False

    def recover(self) -> Recovered:
        return Recovered(
            definitions=list(self.definitions.values()),
            messages={
                name: sorted(
                    (s for s in held.values() if s.message.persistent), key=lambda s: s.seq
                )
                for name, held in self.messages.items()
                if any(s.message.persistent for s in held.values())
            },
            prepared={xid: list(ops) for xid, ops in self.prepared.items()},
            next_seq=dict(self.next_seq),
            sent=list(self.sent_ids),
            firsts=dict(self.firsts),
        )

    def page_in(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        held = self.messages.get(queue, {})
        return [held[seq] for seq in sorted(s for s in held if s > after)[:limit]]

    def page_blocks(self, queue: str, after: int, limit: int) -> list[StoredBlock]:
        return [message_block(s.seq, s.message) for s in self.page_in(queue, after, limit)]

    def sealed(self, destination: str) -> int:
        """Everything: memory has no part that takes writes apart from the rest."""
        return self.next_seq.get(destination, 1)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        held = sum(len(m) for m in self.messages.values())
        return f"MemoryStore(queues={len(self.definitions)}, messages={held})"
