"""Delivery marks: a persistent delivery leaves only once its mark is durable.

A persistent message delivered for an ack must come back ``redelivered``
after a crash, so its delivery mark (``Store.delivered``) must be durable
before the delivery leaves. A driver calls ``mark_delivery`` after queueing
such a delivery (:class:`DeliveryMarks` notes where it sits in the output
queue); the next flush then asks the store for a sync first and writes once
it calls back, holding everything queued behind it, so the client's order is
kept. One sync covers every delivery of a flush, and the store groups it with
the producers'. If a sync fails, the store refused what it covered and the
broker took the refused messages back (:mod:`chute.core.rules.unstored`); a held
delivery whose entry is no longer in its consumer's flight when its own sync
calls back (which may come later and succeed) is dropped, not written, so no
consumer gets a message its producer was told was not stored.
"""

from __future__ import annotations

from chute.core.model.consumer import BrokerConsumer, Entry


class DeliveryMarks:
    """The marked deliveries in one connection's output queue, and how much of the
    queue waits for their sync. Indexes are positions in that queue."""

    __slots__ = ("_last", "_marks", "held")

    def __init__(self) -> None:
        self._last = -1  # the last marked delivery not yet covered by a sync (-1: none)
        self._marks: list[tuple[int, BrokerConsumer, Entry]] = []  # (index, ...) not yet written
        self.held = 0
        """The leading items of the queue waiting for a sync of their marks."""

    def mark(self, index: int, consumer: BrokerConsumer, entry: Entry) -> None:
        """The item at ``index`` delivers ``entry`` to ``consumer``: its mark must be
        durable before it leaves."""
        self._last = index
        self._marks.append((index, consumer, entry))

    @property
    def unsynced(self) -> bool:
        """A marked delivery is queued that no sync covers yet."""
        return self._last >= 0

    def hold(self, queued: int) -> None:
        """The first ``queued`` items wait for a sync now asked for."""
        self.held = queued
        self._last = -1

    def forget(self) -> None:
        """Everything queued is written now, synced or not (the connection closes)."""
        self.held = 0
        self._last = -1
        self._marks.clear()

    def release(self, out: list[bytes]) -> tuple[bytes, int] | None:
        """The sync of the held items called back: take them off the front of ``out``
        and return them joined, less the deliveries whose entry left its consumer's
        flight meanwhile (the broker took back a message the store refused, or the
        consumer closed), with how many were dropped. None: nothing was held (a forced
        flush already wrote it)."""
        held, self.held = self.held, 0
        if not held:
            return None
        marks = self._marks
        dropped = {
            i for i, consumer, entry in marks if i < held and not _in_flight(consumer, entry)
        }
        if dropped:
            data = b"".join(item for i, item in enumerate(out[:held]) if i not in dropped)
        else:
            data = b"".join(out[:held])
        del out[:held]
        if marks:
            if marks[-1][0] < held:
                marks.clear()
            else:
                self._marks = [(i - held, c, e) for i, c, e in marks if i >= held]
        if self._last >= 0:
            self._last -= held
        return data, len(dropped)


def _in_flight(consumer: BrokerConsumer, entry: Entry) -> bool:
    """Whether ``entry`` still waits for ``consumer``'s ack (the broker did not take it back)."""
    return consumer.inflight.get(entry.seq) is entry
