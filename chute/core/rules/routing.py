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

from dataclasses import dataclass

from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.store import AddOp
from chute.core.model.stream import Stream
from chute.errors import DestinationFull


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
