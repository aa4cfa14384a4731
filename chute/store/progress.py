"""How far a broker's recovery is: one object its thread updates and others read.

A recovery runs on one thread (the journal's replay in :mod:`chute.store.recovery`,
then the broker placing what it got back, :meth:`chute.core.rules.broker.Broker.recover`);
while it runs, the server's loop reads a :class:`RecoveryProgress` to log how far it
is every few seconds and to answer ``/readyz``. The recovering thread only assigns
plain fields, once per segment read or queue restored, never per message, so the
progress costs nothing measurable; a reader may see figures a segment old, never
torn ones (each is one attribute).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any


class Phase(enum.Enum):
    """What a recovery is doing, in the order it does it."""

    STARTING = "starting"
    REPLAYING = "replaying the journal"
    READING = "reading each queue's first messages"
    RESTORING = "restoring queues"
    DONE = "done"


@dataclass(slots=True)
class RecoveryProgress:
    """The figures so far. Written by the recovering thread only; read from any."""

    phase: Phase = Phase.STARTING
    segments: int = 0
    """Journal segments to read (0 with the memory store)."""
    segments_read: int = 0
    bytes_total: int = 0
    """The segments' size on disk, read whole."""
    bytes_read: int = 0
    records: int = 0
    """Journal records replayed."""
    messages: int = 0
    """Live messages found (while replaying), then placed back in their queues."""
    destinations: int = 0
    """Queues and subscriptions given back messages (while restoring)."""
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    """How long the whole recovery took, once done."""

    def restored(self, messages: int, destinations: int) -> None:
        """The broker placed ``messages`` in ``destinations`` so far (what
        :meth:`chute.core.rules.broker.Broker.recover` is given to call)."""
        self.phase = Phase.RESTORING
        self.messages = messages
        self.destinations = destinations

    def finish(self) -> None:
        self.seconds = time.monotonic() - self.started
        self.phase = Phase.DONE

    @property
    def elapsed(self) -> float:
        return self.seconds if self.phase is Phase.DONE else time.monotonic() - self.started

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: what ``/readyz`` shows while the broker recovers."""
        return {
            "phase": self.phase.value,
            "segments": self.segments,
            "segments_read": self.segments_read,
            "bytes_total": self.bytes_total,
            "bytes_read": self.bytes_read,
            "records": self.records,
            "messages": self.messages,
            "destinations": self.destinations,
            "elapsed_s": round(self.elapsed, 1),
        }

    def describe(self) -> str:
        """One log line's worth: how far the current phase is."""
        if self.phase is Phase.REPLAYING and self.bytes_total:
            mib = 1 << 20
            return (
                f"{self.phase.value}: segment {self.segments_read} of {self.segments}, "
                f"{self.bytes_read / mib:.1f} of {self.bytes_total / mib:.1f} MiB "
                f"({100 * self.bytes_read // self.bytes_total}%), {self.records} records, "
                f"{self.messages} messages so far"
            )
        if self.phase is Phase.RESTORING:
            return (
                f"{self.phase.value}: {self.messages} messages in {self.destinations} queues so far"
            )
        return f"{self.phase.value}: {self.records} records, {self.messages} messages so far"
