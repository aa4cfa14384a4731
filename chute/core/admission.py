"""Admission: whether the broker takes new messages now, broker-wide.

Two resources bound what producers may add, whatever the destination: the
memory the queues hold (:class:`~chute.core.paging.MemoryBudget`: past its
``high`` line) and the store (its disk under its free-space limit, or its
writer far behind, as the store says through ``Store.space_low``). While
either is short, a producer's send raises :class:`~chute.core.routing.WouldBlock`
with no address (the whole broker): its driver holds that producer (it stops reading the producer's
socket, so the data waits in the network, not in the broker) and retries the
send once admission opens, or fails it with the reason after ``timeout_ms``.

Consumers are never held: receiving, acks, nacks, rollbacks and commits that
add nothing go on, and they are what frees the room. So does paging: durable
queues page long before ``high`` (at the budget's ``limit``), so what reaches
``high`` is what cannot page (temporary queues, non-durable subscriptions,
messages in flight).

Memory has hysteresis: admission closes at ``high`` and opens again below
:data:`RESUME_RATIO` of it, so producers do not flap around the line. A send
checks the memory line itself (a burst overshoots by one message at most) and
asks the store every :data:`STORE_CHECK_EVERY` sends (a flood of
non-persistent messages paged to the journal can outrun its writer);
:meth:`Admission.check` re-evaluates both resources, opens admission and
wakes the waiting producers: the server calls it a few times a second. Each
closing and opening is logged once, with how long producers waited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from chute.core.paging import MemoryBudget
from chute.core.routing import WouldBlock

log = logging.getLogger("chute.broker")

RESUME_RATIO: Final = 0.9
"""Admission closed by memory opens again once the queues hold less than this of ``high``."""
STORE_CHECK_EVERY: Final = 256
"""Sends between two questions to the store (each is cheap, but not free)."""


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class Admission:
    """The broker-wide gate in front of every producer. Used from the broker's loop only."""

    __slots__ = (
        "_cause",
        "_closed_at",
        "_countdown",
        "_waiters",
        "clock",
        "memory",
        "reason",
        "refused",
        "store_says",
        "timeout_ms",
    )

    def __init__(
        self,
        memory: MemoryBudget,
        store_says: Callable[[], str | None],
        clock: Callable[[], int],
        timeout_ms: int = 30_000,
    ) -> None:
        self.memory = memory
        self.store_says = store_says
        """Why the store cannot take more now (``Store.space_low``), or None."""
        self.clock = clock
        self._countdown = STORE_CHECK_EVERY
        self.timeout_ms = timeout_ms
        self.reason: str | None = None
        """Why producers wait now (None: admission is open)."""
        self.refused = 0  # sends that found admission closed (each retry counts)
        self._cause = ""  # "memory" or "disk" while closed
        self._closed_at = 0
        self._waiters: list[Callable[[], None]] = []

    def admit(self) -> None:
        """Return if a producer may add a message now.

        Raises:
            WouldBlock: the broker is over its memory or disk limit (address None).
        """
        if self.reason is None:
            memory = self.memory
            if memory.high and memory.used >= memory.high:
                self._close("memory", self._memory_reason())
            else:
                self._countdown -= 1
                if self._countdown:
                    return
                self._countdown = STORE_CHECK_EVERY
                short = self.store_says()
                if short is None:
                    return
                self._close("store", short)
        self.refused += 1
        raise WouldBlock(self.reason or "", None, self.timeout_ms)

    def check(self) -> None:
        """Re-evaluate memory and the store; open admission and wake the producers once
        both allow."""
        memory = self.memory
        short = self.store_says()
        if short is not None:
            self._close("store", short)
            return
        if memory.high and memory.used >= (
            memory.high * RESUME_RATIO if self.reason is not None else memory.high
        ):
            self._close("memory", self._memory_reason())
            return
        if self.reason is not None:
            self._open()

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` once admission opens."""
        self._waiters.append(wake)

    def cancel(self, wake: Callable[[], None]) -> None:
        if wake in self._waiters:
            self._waiters.remove(wake)

    @property
    def waiting(self) -> int:
        """Producers held now."""
        return len(self._waiters)

    def _memory_reason(self) -> str:
        memory = self.memory
        return (
            f"the broker's queues hold {_mib(memory.used)} in memory, over "
            f"memory_high_watermark ({_mib(memory.high)}): producers wait while "
            "consumers drain"
        )

    def _close(self, cause: str, reason: str) -> None:
        """Close (or keep closed) for ``cause``; logged when the cause changes."""
        if self.reason is None:
            self._closed_at = self.clock()
            log.warning("producers wait: %s", reason)
        elif cause != self._cause:
            log.warning("producers still wait: %s", reason)
        self._cause = cause
        self.reason = reason

    def _open(self) -> None:
        waited = self.clock() - self._closed_at
        waiters, self._waiters = self._waiters, []
        log.info(
            "producers resume after %.1f s (%d waiting, %d attempts refused): "
            "memory %s (high watermark %s), the store takes more again",
            waited / 1000,
            len(waiters),
            self.refused,
            _mib(self.memory.used),
            _mib(self.memory.high) if self.memory.high else "no limit",
        )
        self.reason = None
        self._cause = ""
        self.refused = 0
        for wake in waiters:
            wake()
