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

Commit and rollback keep the rules a local commit keeps
(:mod:`chute.core.rules.transaction`): commit applies the acks without writing them
again (the store's commit-prepared record carries them) and then places the
sends, whose later records (deliveries, auto-acks) follow that record, and last
the nacks (a requeue, or a dead letter). Rollback puts the acked and nacked
messages back (redelivered) and drops the sends; their sequence numbers stay
unused. Nacks are memory only: after a restart a nacked message is simply back
in its queue.

What this needs from the broker is :class:`XaHost`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Destination, Registry
from chute.core.model.store import AckOp, AddOp, Recovered, TxOp
from chute.core.model.stream import Stream
from chute.core.rules.routing import Route, stream_run, takes_itself
from chute.core.rules.transaction import Nacked, Send, Taken, apply, give_back, runs
from chute.errors import NotFound, TransactionError
from chute.message import Message

log = logging.getLogger("chute.broker")

MAX_XID_LENGTH = 200


class XaHost(Registry, Protocol):
    """What prepared transactions need from the broker."""

    def stamp(self, message: Message, ttl: int = 0) -> None:
        """Set the broker-owned fields of an accepted message."""

    def route(self, dest: Destination, message: Message) -> Route:
        """Where ``message`` goes (overflow policies applied, sequence assigned)."""

    def place_all(self, routes: Iterable[Route]) -> None:
        """Place routes' entries in order (pushing to consumers)."""


@dataclass
class Prepared:
    xid: str
    routes: list[Route]
    acks: list[Taken]
    since: int  # broker clock (ms) when prepared, or when recovered
    nacks: list[Nacked] = field(default_factory=list)
    chunks: list[tuple[Stream, list[Entry]]] = field(default_factory=list)
    """Runs of sends to a stream that takes them itself: appended whole at the commit."""


class PreparedTransactions:
    """The broker's prepared transactions, by xid. Used from the broker's loop only."""

    def __init__(self, host: XaHost) -> None:
        self.host = host
        self._by_xid: dict[str, Prepared] = {}

    def placements(self) -> Iterator[tuple[QueueChannel, Entry]]:
        """Where every prepared send will go at its commit (nothing changes)."""
        for prepared in self._by_xid.values():
            for route in prepared.routes:
                yield from route.placements

    def taken(self) -> Iterator[Taken]:
        """Every message a prepared transaction acks at its commit (nothing changes)."""
        for prepared in self._by_xid.values():
            yield from prepared.acks

    def xids(self) -> list[str]:
        """Every prepared transaction waiting for commit or rollback, sorted."""
        return sorted(self._by_xid)

    def in_prepare_order(self, xids: Iterable[str]) -> list[str]:
        """``xids`` in the order they were prepared (any not prepared last, as given): a
        sink's chunks of a stream then commit in offset order, each appended whole."""
        rank = {xid: i for i, xid in enumerate(self._by_xid)}
        last = len(rank)
        return sorted(xids, key=lambda xid: rank.get(xid, last))

    def __contains__(self, xid: str) -> bool:
        return xid in self._by_xid

    def prepare(
        self,
        xid: str,
        sends: Sequence[Send],
        acks: Sequence[Taken],
        nacks: Sequence[Nacked] = (),
    ) -> None:
        """Stage sends, acks and nacks durably under ``xid`` (the caller checked room
        first; nacks are kept in memory only).

        Raises:
            TransactionError: a bad xid, or one already prepared.
        """
        check_xid(xid, MAX_XID_LENGTH + 65)  # a key: the user's xid behind "user/"
        if xid in self._by_xid:
            raise TransactionError(f"transaction {xid!r} is already prepared")
        host = self.host
        routes: list[Route] = []
        chunks: list[tuple[Stream, list[Entry]]] = []
        ops: list[TxOp] = []
        found: dict[str, Destination] = {}  # a chunk's sends go to one or a few
        for address, ttl, messages in runs(sends):
            dest = found.get(address)
            if dest is None:
                dest = found[address] = host.destination(address)
            if takes_itself(dest):  # a chunk to a stream: taken in one pass, no route each
                first = dest.next_seq
                entries, adds = stream_run(dest, messages, host.clock(), ttl)
                ops += adds
                dest.hold_range(first, dest.next_seq)  # readers of the stream wait for it
                chunks.append((dest, entries))
                continue
            routed = []
            for message in messages:
                host.stamp(message, ttl)
                routed.append(host.route(dest, message))
            for route in routed:
                if route.record is not None:
                    ops.append(route.record)
                if route.appended is not None:  # readers of the stream wait for it
                    route.appended[0].hold(route.appended[1].seq)
            routes += routed
        for queue, entry in acks:
            if queue.durable and entry.message.persistent:
                ops.append(AckOp(queue.name, entry.seq))
        host.store.prepare(xid, ops)
        self._by_xid[xid] = Prepared(xid, routes, list(acks), host.clock(), list(nacks), chunks)

    def commit(self, xid: str) -> None:
        """Apply a prepared transaction. Raises NotFound for an unknown xid."""
        prepared = self._take(xid)
        host = self.host
        host.store.commit_prepared(xid)

        def place() -> None:
            host.place_all(prepared.routes)
            for stream, entries in prepared.chunks:
                if not stream.deleted:
                    stream.append(entries)

        apply(prepared.acks, place, prepared.nacks, recorded=True)

    def rollback(self, xid: str) -> None:
        """Discard a prepared transaction; its acked and nacked messages are delivered
        again. Raises NotFound for an unknown xid."""
        prepared = self._take(xid)
        self.host.store.rollback_prepared(xid)
        for route in prepared.routes:
            if route.appended is not None:
                route.appended[0].release(route.appended[1].seq)
        for stream, entries in prepared.chunks:
            for entry in entries:
                stream.release(entry.seq)
        give_back(prepared.acks, prepared.nacks)

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
        host = self.host
        for xid, ops in recovered.prepared.items():
            routes: list[Route] = []
            acks: list[Taken] = []
            for op in ops:
                if isinstance(op, AddOp):
                    placements = [
                        (queue, Entry(op.seq, op.message))
                        for queue in map(host.queue_by_name, op.queues)
                        if queue is not None
                    ]
                    dest = host.find(op.destination)
                    if dest is not None:
                        dest.next_seq = max(dest.next_seq, op.seq + 1)
                    appended = None
                    if isinstance(dest, Stream):
                        dest.hold(op.seq)
                        appended = (dest, Entry(op.seq, op.message))
                    routes.append(Route(placements, None, appended))
                else:
                    queue = host.queue_by_name(op.queue)
                    entry = queue.withdraw(op.seq) if queue is not None else None
                    if queue is not None and entry is not None:
                        acks.append((queue, entry))
            self._by_xid[xid] = Prepared(xid, routes, acks, host.clock())
        if recovered.prepared:
            log.warning(
                "%d prepared transactions wait for commit or rollback: %s",
                len(recovered.prepared),
                ", ".join(sorted(recovered.prepared)),
            )


def check_xid(xid: str, limit: int = MAX_XID_LENGTH) -> str:
    """Raises TransactionError unless ``xid`` is 1-200 printable characters."""
    if not isinstance(xid, str) or not 0 < len(xid) <= limit or not xid.isprintable():
        raise TransactionError(f"a transaction id must be 1-{MAX_XID_LENGTH} printable characters")
    return xid
