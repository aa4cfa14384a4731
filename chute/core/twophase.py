"""Two-phase transactions: work prepared under an xid, waiting for commit or rollback.

A transacted session's sends and acks can be *prepared* instead of committed:
the store records them durably under the xid (a prepare record), the sends
get their sequence numbers, and the acked messages stay locked (held, out of
every consumer's reach). Any connection may then commit or roll back by xid,
also after a restart: :meth:`PreparedTransactions.restore` rebuilds what the
store kept, locking the acked messages again and numbering past the prepared
sends, so a commit after a restart applies exactly what was prepared.

A prepared transaction waits for its coordinator forever unless the broker
has a ``prepared_timeout_ms``: then :meth:`PreparedTransactions.expire` (run
by the broker's periodic sweep) rolls back what has waited longer, counted
from the prepare or, for a transaction recovered after a restart, from the
restart, so a coordinator always gets the full time to come back. It is for
staged work no coordinator will ever finish (a killed Spark driver); XA
purists leave it at 0.

Commit applies the acks without writing them again (the store's
commit-prepared record carries them) and then places the sends, whose later
records (deliveries, auto-acks) follow that record. Rollback puts the acked
messages back (redelivered) and drops the sends; their sequence numbers stay
unused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chute.core.consumer import Entry
from chute.core.queue import QueueChannel
from chute.core.store import (
    AckOp,
    AddOp,
    QueueDefinition,
    Recovered,
    Store,
    StoredMessage,
    SyncCallback,
    TxOp,
)
from chute.errors import NotFound, TransactionError
from chute.message import Message

if TYPE_CHECKING:
    from chute.core.broker import Broker, Plan

log = logging.getLogger("chute.broker")

MAX_XID_LENGTH = 200


@dataclass
class Prepared:
    xid: str
    plans: list[Plan]
    acks: list[tuple[QueueChannel, Entry]]
    since: int  # broker clock (ms) when prepared, or when recovered


class PreparedTransactions:
    """The broker's prepared transactions, by xid. Used from the broker's loop only."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._by_xid: dict[str, Prepared] = {}

    def placements(self) -> Iterator[tuple[QueueChannel, Entry]]:
        """Where every prepared send will go at its commit (nothing changes)."""
        for prepared in self._by_xid.values():
            for plan in prepared.plans:
                yield from plan.placements

    def xids(self) -> list[str]:
        """Every prepared transaction waiting for commit or rollback, sorted."""
        return sorted(self._by_xid)

    def prepare(
        self,
        xid: str,
        sends: Sequence[tuple[str, Message, int]],
        acks: Sequence[tuple[QueueChannel, Entry]],
    ) -> None:
        """Stage sends and acks durably under ``xid`` (the caller checked room first).

        Raises:
            TransactionError: a bad xid, or one already prepared.
        """
        check_xid(xid)
        if xid in self._by_xid:
            raise TransactionError(f"transaction {xid!r} is already prepared")
        broker = self.broker
        plans: list[Plan] = []
        ops: list[TxOp] = []
        for address, message, ttl in sends:
            broker.stamp(message, ttl)
            plan = broker._plan(broker.destination(address), message)
            plans.append(plan)
            if plan.record is not None:
                ops.append(plan.record)
        for queue, entry in acks:
            if queue.durable and entry.message.persistent:
                ops.append(AckOp(queue.name, entry.seq))
        broker.store.prepare(xid, ops)
        self._by_xid[xid] = Prepared(xid, plans, list(acks), broker.clock())

    def commit(self, xid: str) -> None:
        """Apply a prepared transaction. Raises NotFound for an unknown xid."""
        prepared = self._take(xid)
        broker = self.broker
        broker.store.commit_prepared(xid)
        with _records_already_written(broker):
            for queue, entry in prepared.acks:
                queue.settle(entry)
        for plan in prepared.plans:
            broker._apply(plan)

    def rollback(self, xid: str) -> None:
        """Discard a prepared transaction; its acked messages are delivered again."""
        prepared = self._take(xid)
        self.broker.store.rollback_prepared(xid)
        by_queue: dict[int, tuple[QueueChannel, list[Entry]]] = {}
        for queue, entry in prepared.acks:
            by_queue.setdefault(id(queue), (queue, []))[1].append(entry)
        for queue, entries in by_queue.values():
            queue.requeue(entries)

    def expire(self, now: int, timeout_ms: int) -> list[str]:
        """Roll back every transaction prepared more than ``timeout_ms`` ago; their xids."""
        if timeout_ms <= 0 or not self._by_xid:
            return []
        stale = [p.xid for p in self._by_xid.values() if now - p.since >= timeout_ms]
        for xid in stale:
            log.warning(
                "rolling back prepared transaction %r: no commit or rollback within %d ms",
                xid,
                timeout_ms,
            )
            self.rollback(xid)
        return stale

    def _take(self, xid: str) -> Prepared:
        prepared = self._by_xid.pop(xid, None)
        if prepared is None:
            raise NotFound(f"no prepared transaction {xid!r}")
        return prepared

    def restore(self, recovered: Recovered) -> None:
        """Rebuild prepared transactions after a restart (messages already placed)."""
        from chute.core.broker import Plan  # noqa: PLC0415 - avoids an import cycle

        broker = self.broker
        for xid, ops in recovered.prepared.items():
            plans: list[Plan] = []
            acks: list[tuple[QueueChannel, Entry]] = []
            for op in ops:
                if isinstance(op, AddOp):
                    placements = [
                        (queue, Entry(op.seq, op.message))
                        for queue in map(broker.queue_by_name, op.queues)
                        if queue is not None
                    ]
                    dest = broker.queues.get(op.destination) or broker.topics.get(op.destination)
                    if dest is not None:
                        dest.next_seq = max(dest.next_seq, op.seq + 1)
                    plans.append(Plan(placements, None))
                else:
                    queue = broker.queue_by_name(op.queue)
                    entry = queue.withdraw(op.seq) if queue is not None else None
                    if queue is not None and entry is not None:
                        acks.append((queue, entry))
            self._by_xid[xid] = Prepared(xid, plans, acks, broker.clock())
        if recovered.prepared:
            log.warning(
                "%d prepared transactions wait for commit or rollback: %s",
                len(recovered.prepared),
                ", ".join(sorted(recovered.prepared)),
            )


def check_xid(xid: str) -> str:
    """Raises TransactionError unless ``xid`` is 1-200 printable characters."""
    if not isinstance(xid, str) or not 0 < len(xid) <= MAX_XID_LENGTH or not xid.isprintable():
        raise TransactionError(f"a transaction id must be 1-{MAX_XID_LENGTH} printable characters")
    return xid


class AlreadyWritten:
    """Stands in for the store while applying records a commit-prepared record carries."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def define(self, definition: QueueDefinition) -> None:
        self.store.define(definition)

    def undefine(self, name: str) -> None:
        self.store.undefine(name)

    def add(self, op: AddOp) -> None:
        if not op.message.persistent:  # recorded by a paging queue, not by the commit record
            self.store.add(op)

    def ack(self, op: AckOp) -> None:
        return None

    def acks(self, queue: str, seqs: Sequence[int]) -> None:
        return None

    def delivered(self, queue: str, seq: int, delivery_count: int) -> None:
        self.store.delivered(queue, seq, delivery_count)

    def delivered_many(self, queue: str, seqs: Sequence[int], counts: Sequence[int]) -> None:
        self.store.delivered_many(queue, seqs, counts)

    def commit(self, ops: Sequence[TxOp]) -> None:
        self.store.commit(ops)

    def prepare(self, xid: str, ops: Sequence[TxOp]) -> None:
        self.store.prepare(xid, ops)

    def commit_prepared(self, xid: str) -> None:
        self.store.commit_prepared(xid)

    def rollback_prepared(self, xid: str) -> None:
        self.store.rollback_prepared(xid)

    def sync(self, callback: SyncCallback) -> None:
        self.store.sync(callback)

    def recover(self) -> Recovered:
        return self.store.recover()

    def page_in(self, queue: str, after: int, limit: int) -> list[StoredMessage]:
        return self.store.page_in(queue, after, limit)

    def close(self) -> None:
        self.store.close()


@contextmanager
def _records_already_written(broker: Broker) -> Iterator[None]:
    store = broker.store
    broker.store = AlreadyWritten(store)
    try:
        yield
    finally:
        broker.store = store
