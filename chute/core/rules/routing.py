"""Where an accepted message goes: the types routing shares with its users.

:meth:`Broker.route <chute.core.rules.broker.Broker.route>` turns one accepted
message into a :class:`Route`: the entries to place (one per target queue: a
queue, or each matching subscription of a topic) and the store record, if any
target is durable and the message persistent. Placing is a separate step
(:meth:`Broker.place <chute.core.rules.broker.Broker.place>`), so a caller can
record first (the add must reach the store before a consumer's delivery mark)
or hold a route until later (a prepared transaction places its sends at
commit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard, cast

from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Destination
from chute.core.model.store import AddOp, Store, TxOp
from chute.core.model.stream import Stream
from chute.core.rules.partitions import partition_count
from chute.errors import DestinationFull, StoreError
from chute.message import Message


@dataclass(slots=True)
class Route:
    """Where one accepted message goes: entries to place and the store record, if any;
    for a stream, the stream and the entry it appends."""

    placements: list[tuple[QueueChannel, Entry]]
    record: AddOp | None
    appended: tuple[Stream, Entry] | None = None


class WouldBlock(DestinationFull):
    """No room now: wait for it, then retry. ``address`` is the destination under the
    ``block`` policy that is full, or None when the whole broker is over its memory or
    disk limit (:mod:`chute.core.rules.admission`)."""

    def __init__(self, reason: str, address: str | None, timeout_ms: int) -> None:
        super().__init__(reason)
        self.address = address
        self.timeout_ms = timeout_ms

    def gave_up(self) -> DestinationFull:
        """What the producer is told once ``timeout_ms`` passed without room."""
        why = "overflow = block" if self.address is not None else "block_timeout_ms"
        return DestinationFull(
            f"{self.reason}; no room within {self.timeout_ms} ms ({why}): "
            "the message was not accepted, send it again later"
        )


def stamped_adds(
    stream: Stream, messages: Sequence[Message], now: int, ttl: int, seq: int
) -> list[AddOp]:
    """The adds of ``messages`` accepted together at ``now`` by ``stream``, at consecutive
    offsets from ``seq``: each message stamped (its time, its expiry from ``ttl``) and
    kept persistent (a stream keeps everything it takes, in the store). The stream's
    numbering is the caller's to move on."""
    address = stream.address
    queues = (address,)
    expiration = now + ttl if ttl > 0 else 0
    adds: list[AddOp] = []
    append = adds.append
    for offset, message in enumerate(messages, seq):
        message.timestamp = now
        if expiration:
            message.expiration = expiration
        message.persistent = True
        append(AddOp(address, queues, offset, message))
    return adds


def stream_routes(
    stream: Stream, messages: Sequence[Message], now: int, ttl: int = 0
) -> list[Route]:
    """The routes of ``messages`` accepted together at ``now`` by ``stream`` (one that
    takes them itself, :func:`takes_itself`): :func:`stamped_adds` from the stream's
    next offset, in one pass with no question asked per message (:meth:`Broker.route`
    asks which partition, which node, which kind of destination for each)."""
    seq = stream.next_seq
    stream.next_seq = seq + len(messages)
    return [
        Route([], add, (stream, Entry(add.seq, add.message)))
        for add in stamped_adds(stream, messages, now, ttl, seq)
    ]


def stream_run(
    stream: Stream, messages: Sequence[Message], now: int, ttl: int = 0
) -> tuple[list[Entry], list[TxOp]]:
    """:func:`stream_routes` without a :class:`Route` a message, for a prepared chunk: the
    entries ``stream`` appends at the commit and the adds the store records."""
    seq = stream.next_seq
    stream.next_seq = seq + len(messages)
    adds = stamped_adds(stream, messages, now, ttl, seq)
    return [Entry(add.seq, add.message) for add in adds], list(adds)


def take_each(
    stream: Stream, messages: Sequence[Message], store: Store, now: int, ttl: int = 0
) -> int:
    """Take ``messages``, sent one by one outside a transaction and accepted at ``now``,
    into ``stream`` (one that :func:`takes_itself`) in one pass, as a send of each
    would, at consecutive offsets: each stamped, and the stream appends them at once
    (its retention, tail and readers look once). The store records them as one batch
    (one ``commit``: after a crash all of them or none, and none was confirmed before
    it is durable); if it cannot (a field too long for the journal), each as its own
    add. Returns how many were taken: fewer than all when the store cannot record one;
    that one and those after it are not taken, and no offset is skipped."""
    seq = stream.next_seq
    ops: list[TxOp] = list(stamped_adds(stream, messages, now, ttl, seq))
    try:
        store.commit(ops)
    except StoreError:
        ops = _add_each(store, ops)
    taken = len(ops)
    stream.next_seq = seq + taken
    if taken and not stream.deleted:
        stream.append([Entry(seq + i, message) for i, message in enumerate(messages[:taken])])
    return taken


def _add_each(store: Store, ops: list[TxOp]) -> list[TxOp]:
    """Record each of ``ops`` (adds) on its own, up to the first the store cannot; those
    recorded."""
    for index, op in enumerate(ops):
        try:
            store.add(cast(AddOp, op))
        except StoreError:
            return ops[:index]
    return ops


def takes_itself(dest: Destination) -> TypeGuard[Stream]:
    """Whether ``dest`` is a stream that keeps what is sent to it itself (one partition,
    its home on this node): :func:`stream_routes` may route a batch for it."""
    return isinstance(dest, Stream) and dest.forward is None and partition_count(dest) <= 1
