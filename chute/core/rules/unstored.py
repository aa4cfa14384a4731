"""Messages the store refused: take them back out of their queues before anyone gets them.

A persistent message is placed in its queues as it is sent; its producer is
answered once the store's sync calls back. When the disk fails that sync, the
store refuses what the failed sync covered (the journal's
:mod:`chute.store.unsynced`) and every sender waiting is told "not stored".
That must stay true in memory too: a consumer must not receive a message its
producer was told was not stored, or a producer that sends it again makes a
duplicate nobody can tell apart. So for each refused add, in each queue it
went to:

* waiting in a lane: it is taken out;
* paged out (held only in the store): it is no longer counted;
* pushed to a consumer that must ack it: it is taken out of that consumer's
  in-flight set and the consumer gets its credit back. Its delivery was held
  until its delivery mark was durable, which failed with the same sync; the
  driver drops a held delivery whose entry is no longer in flight
  (``StreamConnection``), so the consumer never sees it;
* already gone: an auto-acknowledging consumer got it as it was pushed (such
  deliveries never wait for the disk, docs/durability.md), or a login-name
  queue handed copies of it on. Counted and logged.

A stream takes the message back out of its tail and out of its readers' windows
where they have not pushed it yet (``Stream.withdraw``).

A refused ack leaves its message in the store: it comes back after a restart
(at least once), and is only logged here.

Runs on the broker's loop, before the senders hear of the failure (the server
hands the store's report over in order with the sync callbacks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from chute.core.model.queue import QueueChannel
from chute.core.model.registry import Registry
from chute.core.model.store import AddOp, TxOp

log = logging.getLogger("chute.broker")


class UnstoredHost(Registry, Protocol):
    """What taking refused messages back needs from the broker."""


def withdraw_unstored(host: UnstoredHost, ops: Sequence[TxOp]) -> tuple[int, int]:
    """Take the refused adds among ``ops`` out of their queues (see the module docstring);
    returns (copies taken back, copies already delivered or handed on)."""
    taken = gone = acks = 0
    for op in ops:
        if not isinstance(op, AddOp):
            acks += 1
            continue
        for name in op.queues:
            stream = host.streams.get(name)
            if stream is not None:
                if stream.withdraw(op.seq):
                    taken += 1
                else:
                    gone += 1
                continue
            queue = host.queue_by_name(name)
            if queue is None or queue.deleted:
                continue
            if _take_back(queue, op):
                taken += 1
            else:
                gone += 1
    if taken or gone:
        log.warning(
            "%d messages the store could not keep were taken out of their queues "
            "(their producers were told they were not stored)%s",
            taken,
            f"; {gone} had already been delivered without an ack" if gone else "",
        )
    if acks:
        log.warning(
            "%d acks could not be stored: those messages stay in the journal and are "
            "delivered again after a restart",
            acks,
        )
    return taken, gone


def _take_back(queue: QueueChannel, op: AddOp) -> bool:
    """Take ``op``'s message out of ``queue``; False if it is no longer there to take."""
    seq, message = op.seq, op.message
    pager = queue.pager
    if pager.count and seq > pager.top_seq and seq not in pager.skip:  # paged out
        pager.count -= 1
        pager.size -= message.size
        queue.held -= 1
        queue.held_bytes -= message.size
        if queue.settings.bounded:
            queue.host.room_freed(queue)
        return True
    entry = queue.withdraw(seq)
    if entry is None:
        for consumer in queue.router.consumers:
            found = consumer.inflight.get(seq)
            if found is not None and found.message is message:
                del consumer.inflight[seq]
                consumer.credit += 1  # the delivery never reaches it
                entry = found
                break
    if entry is None:
        return False
    pager.skip.discard(seq)
    queue.settle(entry, acked=False, recorded=True)  # nothing stored to ack
    return True
