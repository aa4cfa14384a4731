"""Committed batches: a Spark sink's commit, idempotent per (sink, batch).

:class:`CommittedBatches` makes a sink's commit idempotent per (sink, batch):
before committing the prepared transactions of a batch, it records a durable
*marker* naming them. The marker is a persistent message on the system queue
:data:`BATCHES`, written with the previous marker's ack in one atomic store
commit (existing record kinds only). After a crash, :meth:`CommittedBatches.
recover` rolls forward any xid a marker names that is still prepared, so a
batch commits all or nothing. A sink's marker is its newest committed batch: a
batch at or below it is a duplicate (Spark retried it), whose xids are rolled
back. Nobody else may consume the markers: the queue is held the way a cursor
holds one (:func:`chute.core.rules.cursor.holder`).

What this needs from the broker is :class:`BatchHost`. Pure: no sockets, no
files. Used from the broker's loop only.
"""

from __future__ import annotations

import json
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Final, Protocol

from chute.core.model.consumer import BrokerConsumer
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Registry
from chute.core.rules.cursor import holder
from chute.core.rules.twophase import PreparedTransactions, check_xid
from chute.errors import InvalidAddress, NotFound, TransactionError
from chute.message import Message, new_message_id

log = logging.getLogger("chute.cursor")

BATCHES: Final = "queue:__sys__committedBatches"
"""The system queue that holds the sinks' committed-batch markers."""
MARKER_TYPE: Final = "chute.committed-batch"


class BatchHost(Registry, Protocol):
    """What committed batches need from the broker."""

    @property
    def xa(self) -> PreparedTransactions: ...

    def send(self, address: str, message: Message, *, ttl: int = 0) -> None:
        """Accept a message for ``address``."""

    def atomically(self) -> AbstractContextManager[None]:
        """Gather the records made inside into one atomic store commit."""


@dataclass(frozen=True)
class Marker:
    """What a committed-batch marker says."""

    sink: str
    batch: int
    xids: tuple[str, ...]
    keep: bool

    def encode(self) -> bytes:
        return json.dumps(
            {"sink": self.sink, "batch": self.batch, "xids": list(self.xids), "keep": self.keep},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, body: bytes) -> Marker:
        """Raises ValueError for anything that is not a marker."""
        doc = json.loads(body)
        sink, batch, xids, keep = doc["sink"], doc["batch"], doc["xids"], doc["keep"]
        if not (
            isinstance(sink, str)
            and isinstance(batch, int)
            and isinstance(xids, list)
            and all(isinstance(x, str) for x in xids)
            and isinstance(keep, bool)
        ):
            raise ValueError("not a committed-batch marker")
        return cls(sink, batch, tuple(xids), keep)


class CommittedBatches:
    """Idempotent group commits of prepared transactions (see the module docstring)."""

    def __init__(self, host: BatchHost) -> None:
        self.host = host
        self.latest: dict[str, tuple[Marker, int]] = {}  # sink -> (newest marker, its seq)
        self._queue: QueueChannel | None = None
        self._holder: BrokerConsumer | None = None

    def commit(self, sink: str, batch: int, xids: tuple[str, ...], *, keep: bool = True) -> bool:
        """Commit every xid of a batch once; False if the batch was a duplicate (its xids
        were rolled back). The caller syncs before answering.

        Raises:
            TransactionError: a bad sink name, batch or xid; xids repeated.
            NotFound: an xid is not prepared (it timed out?); nothing was committed.
        """
        check_xid(sink)
        for xid in xids:
            check_xid(xid)
        if batch < 0:
            raise TransactionError(f"batch {batch} must not be negative")
        if len(set(xids)) != len(xids):
            raise TransactionError("the same xid is listed twice")
        xa = self.host.xa
        prepared = set(xa.xids())
        previous = self.latest.get(sink) if keep else None
        if previous is not None and batch <= previous[0].batch:
            done = set(previous[0].xids)
            for xid in xids:
                if xid in prepared:
                    (xa.commit if xid in done else xa.rollback)(xid)
            log.info("sink %s: batch %d was committed before; dropped its retry", sink, batch)
            return False
        missing = [x for x in xids if x not in prepared]
        if missing:
            raise NotFound(
                f"sink {sink} batch {batch}: transactions {', '.join(missing)} are not prepared "
                "(rolled back by the broker's prepared timeout?); nothing was committed"
            )
        marker = Marker(sink, batch, xids, keep)
        queue = self._marker_queue()
        with self.host.atomically():
            seq = queue.next_seq
            self.host.send(BATCHES, _marker_message(marker))
            if previous is not None:
                _settle(queue, previous[1])
        for xid in xa.in_prepare_order(xids):  # a stream's chunks in offset order
            xa.commit(xid)
        if keep:
            self.latest[sink] = (marker, seq)
        else:
            _settle(queue, seq)
        return True

    def recover(self) -> int:
        """After the broker recovered: hold the marker queue, learn each sink's newest
        batch, and commit what a marker names but a crash left prepared; returns how
        many transactions were rolled forward."""
        queue = self.host.find(BATCHES)
        if not isinstance(queue, QueueChannel):
            return 0
        self._hold(queue)
        xa = self.host.xa
        prepared = set(xa.xids())
        rolled = 0
        for entry in queue.waiting_between(0, 1 << 63):
            try:
                marker = Marker.decode(entry.message.body)
            except (ValueError, KeyError, TypeError):
                log.warning("%s holds a message that is not a marker (seq %d)", BATCHES, entry.seq)
                continue
            for xid in marker.xids:
                if xid in prepared:
                    log.warning(
                        "sink %s batch %d: rolling %s forward", marker.sink, marker.batch, xid
                    )
                    xa.commit(xid)
                    prepared.discard(xid)
                    rolled += 1
            if not marker.keep:
                _settle(queue, entry.seq)
                continue
            known = self.latest.get(marker.sink)
            if known is None or known[0].batch < marker.batch:
                self.latest[marker.sink] = (marker, entry.seq)
        return rolled

    def _marker_queue(self) -> QueueChannel:
        queue = self._queue
        if queue is None or queue.deleted:
            dest = self.host.destination(BATCHES, create=True)
            if not isinstance(dest, QueueChannel):  # pragma: no cover - a queue: parse() says so
                raise InvalidAddress(f"{BATCHES} is not a queue")
            queue = dest
            self._hold(queue)
        return queue

    def _hold(self, queue: QueueChannel) -> None:
        """Nobody else may consume the markers: hold the queue like a cursor does."""
        self._queue = queue
        if self._holder is None or self._holder.closed or self._holder.queue is not queue:
            self._holder = holder(queue)


def _marker_message(marker: Marker) -> Message:
    return Message(
        marker.encode(),
        id=new_message_id(),
        type=MARKER_TYPE,
        properties={"sink": marker.sink},
    )


def _settle(queue: QueueChannel, seq: int) -> None:
    entry = queue.withdraw(seq)
    if entry is not None:
        queue.settle(entry)
