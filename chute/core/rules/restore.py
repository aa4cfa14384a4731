"""Recovery: the broker rebuilt from what its store kept, after a restart.

:func:`restore` reads the store's :class:`~chute.core.model.store.Recovered` and
gives back durable queues, durable and callback subscriptions (their topics
made again), each queue's messages (marked redelivered where the store knows
they were delivered; the paged rest left in the store), each destination's
numbering, prepared transactions and committed batches. Numbering resumes
before anything is placed, and callback queues start forwarding only once
every queue holds what it held, so a forwarded message never takes a recovered
message's sequence number or place. What it needs of the broker is
:class:`RestoreHost`. Pure: the store does the reading.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Protocol

from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.queuetypes import ForwardHost, attach_forwarder
from chute.core.model.registry import Registry
from chute.core.model.store import QueueDefinition, QueueKind, StoredMessage
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.rules.batches import CommittedBatches
from chute.core.rules.dedup import SentIds
from chute.core.rules.destinations import Destinations
from chute.core.rules.exchanges import Exchanges
from chute.core.rules.subscriptions import Subscriptions
from chute.core.rules.twophase import PreparedTransactions
from chute.errors import InvalidAddress

log = logging.getLogger("chute.broker")

_AMQP_KINDS: Final = (QueueKind.EXCHANGE, QueueKind.BINDING, QueueKind.DECLARATION)
_NOT_DESTINATIONS: Final = (QueueKind.LEDGER, *_AMQP_KINDS)


class RestoreHost(ForwardHost, Registry, Protocol):
    """What recovery needs of the broker."""

    ledgers: dict[str, tuple[int, list[StoredMessage]]]
    """A cluster's ledgers as recovered (their next number, their records), left for the
    cluster to take (:meth:`chute.core.rules.cluster.Cluster.recover`)."""
    subscriptions: Subscriptions
    destinations: Destinations
    xa: PreparedTransactions
    batches: CommittedBatches
    sent_ids: SentIds
    exchanges: Exchanges


def restore(host: RestoreHost, progress: Callable[[int, int], None] | None = None) -> int:
    """Rebuild durable queues and subscriptions from the store; returns messages restored.

    A message the store knows was delivered comes back marked redelivered.
    Numbering resumes before anything is placed, and callback queues start
    forwarding only once every queue holds what it held, so a forwarded
    message never takes a recovered message's sequence number or place.
    ``progress(messages, queues)``, if given, hears the counts so far after
    each queue given back its messages (for a server to watch; nothing runs
    per message).
    """
    recovered = host.store.recover()
    host.sent_ids.restore(recovered.sent)
    if recovered.report:
        (log.info if recovered.clean else log.warning)("%s", recovered.report)
    subscriptions: dict[str, Subscription] = {}
    ledgers = {d.name for d in recovered.definitions if d.kind is QueueKind.LEDGER}
    for name in ledgers:
        host.ledgers[name] = (
            recovered.next_seq.get(name, 1),
            _ledger_records(host, name, recovered.messages.get(name, []), recovered.paged),
        )
    for definition in recovered.definitions:
        if definition.kind in _NOT_DESTINATIONS:
            continue
        if definition.kind in (QueueKind.QUEUE, QueueKind.STREAM):
            host.destination(definition.name, create=True, maker=definition.owner)
            host.destinations.restored(definition)
        elif definition.topic is not None:
            subscriptions[definition.name] = restore_subscription(host, definition, start=False)
    # AMQP's exchanges, bindings and queue declarations, once the queues are back
    host.exchanges.restore(d for d in recovered.definitions if d.kind in _AMQP_KINDS)
    for address, next_seq in recovered.next_seq.items():
        dest = host.queues.get(address) or host.topics.get(address) or host.streams.get(address)
        if dest is not None:
            dest.next_seq = max(dest.next_seq, next_seq)
        elif address.startswith("stream:"):  # deleted: one made again goes on from here
            host.destinations.stream_seq[address] = next_seq
    count = restored = 0
    for name, stored in recovered.messages.items():
        if name in ledgers:
            continue
        stream = host.streams.get(name)
        if stream is not None:
            count += _restore_stream(
                stream, stored, recovered.paged.get(name), recovered.firsts.get(name)
            )
            restored += 1
            continue
        queue = host.queues.get(name) or subscriptions.get(name)
        if queue is None:
            log.warning("store holds %d messages for unknown queue %s; skipped", len(stored), name)
            continue
        numbered: QueueChannel | Topic = queue.topic if isinstance(queue, Subscription) else queue
        for item in stored:
            numbered.next_seq = max(numbered.next_seq, item.seq + 1)
            queue.place(Entry(item.seq, item.message, item.delivery_count, item.delivery_count > 0))
            count += 1
        paged = recovered.paged.get(name)
        if paged is not None:
            after = stored[-1].seq if stored else 0
            queue.restore_paged(*paged, after=after, up_to=numbered.next_seq - 1)
            count += paged[0]
        restored += 1
        if progress is not None:
            progress(count, restored)
    host.xa.restore(recovered)
    host.batches.recover()  # rolls forward batches a crash cut short
    for sub in subscriptions.values():
        if sub.kind is SubscriptionKind.CALLBACK and sub.forward_to:
            attach_forwarder(host, sub, sub.forward_to)
    return count


def _ledger_records(
    host: RestoreHost, name: str, stored: list[StoredMessage], paged: dict[str, tuple[int, int]]
) -> list[StoredMessage]:
    """Every record of a cluster's ledger, those the store left paged read back too (a
    ledger is small: the hand-overs of one link not yet settled)."""
    records = list(stored)
    if name in paged:
        while True:
            after = records[-1].seq if records else 0
            more = host.store.page_in(name, after, 1024)
            if not more:
                break
            records += more
    return records


def _restore_stream(
    stream: Stream,
    stored: list[StoredMessage],
    paged: tuple[int, int] | None,
    recorded: int | None,
) -> int:
    """A stream's kept messages: the store read back the oldest (``stored``), the rest
    it keeps (``paged``) are read as readers ask; ``recorded`` is its first offset as the
    store recorded it (None: never); returns how many."""
    count, size = paged or (0, 0)
    count += len(stored)
    size += sum(item.message.size for item in stored)
    if stored:
        stream.next_seq = max(stream.next_seq, stored[-1].seq + 1)
    stream.restore(stored[0].seq if stored else stream.next_seq, count, size, recorded)
    return count


def restore_subscription(
    host: RestoreHost, definition: QueueDefinition, *, start: bool = True
) -> Subscription:
    """Recreate a durable or callback subscription from its definition.

    A callback queue starts forwarding at once unless ``start`` is False.

    Raises:
        InvalidAddress: the definition names no topic, or not a topic.
    """
    if definition.topic is None:
        raise InvalidAddress(f"subscription {definition.name} names no topic")
    topic = host.destination(definition.topic, create=True)
    if not isinstance(topic, Topic):
        raise InvalidAddress(f"{definition.topic} is not a topic")
    sub = host.subscriptions.restore(definition, topic)
    if start and sub.kind is SubscriptionKind.CALLBACK and sub.forward_to:
        attach_forwarder(host, sub, sub.forward_to)
    return sub
