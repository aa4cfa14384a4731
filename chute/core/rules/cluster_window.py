"""Flow control on one link, in the core: a bound on what one node has handed over to
another and not yet had confirmed, over every queue and topic (:class:`LinkWindow`).

Each peer consumer has its own credit (``window``, per queue or topic copy), which
bounds what one queue has in flight to a node, but not what a link carries: a node
feeding a thousand queues to another could have a thousand windows in flight, each
message in the sender's memory (paged in to be sent), in its transport's write buffer
and in the receiver's store backlog at once. The link's window bounds the sum: once
``size`` hand-overs to a node, or ``max_bytes`` of their messages, are unconfirmed,
every peer consumer standing for that node is held (the queues keep their messages, as
for a slow local consumer), and they are let go once the confirms brought both down to
half. (A message larger than ``max_bytes`` goes alone.)

A peer consumer may be held for its own reasons too (its node's link is down, its node
has no consumers, its node refused for want of room): :meth:`LinkWindow.hold` is the one
way the cluster holds or lets go of one, so the link's hold never lets go of a consumer
held for another reason, nor the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable

from chute.core.model.consumer import BrokerConsumer

DEFAULT_LINK_WINDOW = 1024
"""Hand-overs one node may have unconfirmed with another, over all its queues and topics."""
DEFAULT_LINK_BYTES = 16 << 20
"""Bytes of messages one node may have unconfirmed with another (their bodies and
properties: ``Message.size``)."""


class LinkWindow:
    """The bound on one link's unconfirmed hand-overs (see the module docstring). Used
    from the broker's loop only."""

    __slots__ = ("count", "held", "max_bytes", "nbytes", "size")

    def __init__(
        self, size: int = DEFAULT_LINK_WINDOW, max_bytes: int = DEFAULT_LINK_BYTES
    ) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.count = 0  # hand-overs unconfirmed
        self.nbytes = 0  # their messages' bytes
        # while the window is full: the consumers it holds (by id) that would take
        # messages otherwise; None while it is open
        self.held: dict[int, BrokerConsumer] | None = None

    @property
    def full(self) -> bool:
        return self.held is not None

    def add(self, size: int) -> bool:
        """A hand-over of a message of ``size`` bytes is unconfirmed; whether the window is
        open and reached ``size`` hand-overs or ``max_bytes`` with it (:meth:`sent` then
        holds the consumers)."""
        self.count += 1
        self.nbytes += size
        return self.held is None and (self.count >= self.size or self.nbytes >= self.max_bytes)

    def remove(self, size: int, count: int = 1) -> None:
        """``count`` hand-overs of messages of ``size`` bytes in all are confirmed, refused or
        dropped."""
        self.count -= count
        self.nbytes -= size

    def hold(self, consumer: BrokerConsumer, held: bool) -> None:
        """Hold ``consumer`` (or let it go) for its own reasons; while the window is full,
        one let go stays held until the window opens."""
        if self.held is not None:
            if held:
                self.held.pop(id(consumer), None)
            else:
                self.held[id(consumer)] = consumer
                held = True
        consumer.held = held

    def sent(self, consumers: Iterable[BrokerConsumer]) -> None:
        """A hand-over left: at ``size`` hand-overs or ``max_bytes``, hold ``consumers``."""
        if self.held is not None or (self.count < self.size and self.nbytes < self.max_bytes):
            return
        self.held = {id(c): c for c in consumers if not c.held}
        for consumer in self.held.values():
            consumer.held = True

    def settled(self) -> list[BrokerConsumer]:
        """Hand-overs were confirmed or refused: once both are down to half, the
        consumers the window held, let go (the caller has their queues deliver)."""
        if self.held is None or self.count > self.size // 2 or self.nbytes > self.max_bytes // 2:
            return []
        woken = [c for c in self.held.values() if not c.closed]
        self.held = None
        for consumer in woken:
            consumer.held = False
        return woken
