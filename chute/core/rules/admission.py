"""Admission: whether the broker takes a producer's new message now.

Two resources bound what producers may add, whatever the destination: the
memory the queues hold (:class:`~chute.core.model.paging.MemoryBudget`) and the
store (its disk, and how far its writer is behind the broker). When one is
short, the producers that cause the shortage wait first: a producer's send
raises :class:`~chute.core.rules.routing.WouldBlock` with no address (the whole
broker); its driver holds that producer (it stops reading the producer's
socket, so the data waits in the network, not in the broker) and retries the
send once admission opens, or fails it with the reason after ``timeout_ms``.

Who waits, in two steps:

* *Pressure* (memory past ``high``, or the writer more than
  :data:`BEHIND` behind): the heavy producers wait. Each connection keeps a
  :class:`Share`, what it sent lately (bytes, decayed every tick); a producer
  is heavy while its share is at least the mean of every recent producer's
  (a waiting producer's share does not decay: it still wants to send).
  So a flood waits and a bystander sending a little goes on; producers that
  all send alike all wait, as with one gate.
* *Shortage* (memory past ``high`` plus :data:`HARD_MARGIN` of it, the
  writer more than :data:`BEHIND_ALL` behind, or the disk under its
  free-space limit): every producer waits. This is the bound.

Consumers are never held: receiving, acks, nacks, rollbacks and commits that
add nothing go on, and they are what frees the room. So does paging: durable
queues page long before ``high`` (at the budget's ``limit``), so what reaches
``high`` is what cannot page (temporary queues, non-durable subscriptions,
open transactions, messages in flight).

Each resource has hysteresis, so that producers are not held and let go once
per message around one line: admission closed by memory opens again only once
the queues hold less than the budget's ``low`` (``memory_low_watermark``, by
default 90% of ``high``: :meth:`MemoryBudget.must_wait`); closed by the
writer's backlog, only once it is :data:`BEHIND_RESUME` or less; the store's
disk has its own (``Store.space_low`` stays low until a tenth more than the
limit is free). A send checks the memory line itself (a burst overshoots by
one message at most) and asks the store every :data:`STORE_CHECK_EVERY` sends;
:meth:`Admission.check` (the server calls it every tick, a few times a second)
ages the shares, re-evaluates both resources, opens admission and wakes the
waiting producers.
Each closing and opening is logged once, with how long producers waited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from chute.core.model.paging import MemoryBudget
from chute.core.rules.routing import WouldBlock

if TYPE_CHECKING:
    from chute.core.model.store import Store

log = logging.getLogger("chute.broker")

STORE_CHECK_EVERY: Final = 256
"""Sends between two questions to the store (each is cheap, but not free)."""
BEHIND: Final = 4 << 20
"""Bytes the journal's writer may be behind the broker before the heavy producers wait (a
flood of non-persistent messages paged can outrun it)."""
BEHIND_ALL: Final = 16 << 20
"""... and before every producer waits."""
BEHIND_RESUME: Final = 2 << 20
"""Admission closed by the writer's backlog opens again once it is this far behind or less."""
HARD_MARGIN: Final = 8
"""Every producer waits once memory passes ``high`` by ``high // HARD_MARGIN``."""
DECAY: Final = 4
"""A share keeps ``1 - 1/DECAY`` of what it counted at each tick."""


class Share:
    """What one producer (a connection) sent lately: bytes, decayed every tick."""

    __slots__ = ("counted", "recent", "sent", "waiting")

    def __init__(self) -> None:
        self.recent = 0  # decayed bytes, as of the last tick
        self.sent = 0  # bytes since then
        self.counted = False  # among the shares the ticks age (until it decays to 0)
        self.waiting = False  # refused, not admitted since: its share does not decay


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class Admission:
    """The gate in front of every producer. Used from the broker's loop only."""

    __slots__ = (
        "_cause",
        "_closed_at",
        "_countdown",
        "_shares",
        "_waiters",
        "clock",
        "everyone",
        "heavy",
        "memory",
        "reason",
        "refused",
        "store",
        "timeout_ms",
    )

    def __init__(
        self,
        memory: MemoryBudget,
        store: Store,
        clock: Callable[[], int],
        timeout_ms: int = 30_000,
    ) -> None:
        self.memory = memory
        self.store = store
        self.clock = clock
        self._countdown = STORE_CHECK_EVERY
        self.timeout_ms = timeout_ms
        self.reason: str | None = None
        """Why producers wait now (None: admission is open)."""
        self.everyone = False
        """Every producer waits (a shortage), not only the heavy ones."""
        self.heavy = 0
        """A share at least this heavy waits under pressure (the mean at the last tick)."""
        self._shares: list[Share] = []  # every share counted since it last decayed to 0
        self.refused = 0  # sends that found admission closed (each retry counts)
        self._cause = ""  # "memory" or "store" while closed
        self._closed_at = 0
        self._waiters: list[Callable[[], None]] = []

    def admit(self, share: Share, size: int, count: int = 1) -> None:
        """Return if the producer ``share`` belongs to may add a ``size``-byte message now
        (or ``count`` messages of ``size`` bytes in all: a bulk send counts as that many
        sends towards the next look at the store).

        Raises:
            WouldBlock: the broker is short of memory or store and this producer is
                heavy, or every producer waits (address None).
        """
        if not share.counted:
            share.counted = True
            self._shares.append(share)
        memory = self.memory
        if self.reason is None:
            if memory.must_wait(False):
                self._close("memory", *self._memory_says())
            else:
                self._countdown -= count
                if self._countdown <= 0:
                    self._countdown = STORE_CHECK_EVERY
                    self._store_short()
        if self.reason is not None:
            if not self.everyone and self._past_hard_line():
                self._close("memory", *self._memory_says())  # light producers reached the bound
            if self.everyone or share.recent + share.sent >= self.heavy:
                self.refused += 1
                share.waiting = True
                raise WouldBlock(self.reason, None, self.timeout_ms)
        share.sent += size
        share.waiting = False

    def check(self) -> None:
        """A tick: age the shares, re-evaluate memory and the store; open admission and
        wake the producers once both allow."""
        self._age()
        if self._store_short():
            return
        if self.memory.must_wait(self.reason is not None):
            self._close("memory", *self._memory_says())
            return
        if self.reason is not None:
            self._open()

    def _age(self) -> None:
        """Decay every share by a tick and set the heavy line to their mean."""
        kept: list[Share] = []
        total = 0
        for share in self._shares:
            if not share.waiting:  # a waiting producer still wants what it wanted
                share.recent = share.recent * (DECAY - 1) // DECAY + share.sent
            share.sent = 0
            if share.recent:
                kept.append(share)
                total += share.recent
            else:
                share.counted = False
        self._shares = kept
        self.heavy = total // len(kept) if kept else 0

    def _store_short(self) -> bool:
        """Close for the store if it is short; whether it is."""
        store = self.store
        low = store.space_low()
        if low is not None:
            self._close("store", low, everyone=True)
            return True
        behind = store.backlog()
        if behind <= (BEHIND_RESUME if self._cause == "store" else BEHIND):
            return False
        self._close(
            "store",
            f"the journal's writer is {behind >> 20} MiB behind the broker: "
            + (
                "every producer waits while it writes"
                if behind > BEHIND_ALL
                else "the heaviest producers wait while it writes"
            ),
            everyone=behind > BEHIND_ALL,
        )
        return True

    def never_admits(self, held: int) -> str | None:
        """Why a producer refused now, whose open transaction holds ``held`` bytes of
        memory, would wait in vain (None: it may wait). Admission closed for memory
        opens below the budget's ``low``, and the transaction's messages count until its
        commit, which waits behind this very send."""
        memory = self.memory
        if self._cause != "memory" or not memory.high or held < memory.low:
            return None
        return (
            f"this transaction holds {_mib(held)} of messages, and the broker takes new "
            f"ones only once its queues hold under {_mib(memory.low)} "
            f"(memory_low_watermark; memory_high_watermark {_mib(memory.high)}): it can "
            "never be admitted; "
            "commit in smaller transactions"
        )

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

    def _past_hard_line(self) -> bool:
        """Memory is past ``high`` and its :data:`HARD_MARGIN`: every producer waits."""
        memory = self.memory
        return bool(memory.high) and memory.used >= memory.high + memory.high // HARD_MARGIN

    def _memory_says(self) -> tuple[str, bool]:
        """Why producers wait for memory, and whether every one does."""
        memory = self.memory
        everyone = self._past_hard_line()
        who = "every producer waits" if everyone else "the heaviest producers wait"
        if memory.used >= memory.high:
            return (
                f"the broker's queues hold {_mib(memory.used)} in memory, over "
                f"memory_high_watermark ({_mib(memory.high)}): {who} until consumers "
                f"drain them under memory_low_watermark ({_mib(memory.low)})"
            ), everyone
        return (
            f"the broker's queues hold {_mib(memory.used)} in memory, not yet under "
            f"memory_low_watermark ({_mib(memory.low)}) since they passed "
            f"memory_high_watermark ({_mib(memory.high)}): {who} while consumers drain"
        ), everyone

    def _close(self, cause: str, reason: str, everyone: bool) -> None:
        """Close (or keep closed) for ``cause``; logged when the cause changes."""
        if self.reason is None:
            self._closed_at = self.clock()
            log.warning("producers wait: %s", reason)
        elif cause != self._cause:
            log.warning("producers still wait: %s", reason)
        self._cause = cause
        self.reason = reason
        self.everyone = everyone

    def _open(self) -> None:
        waited = self.clock() - self._closed_at
        waiters, self._waiters = self._waiters, []
        log.info(
            "producers resume after %.1f s (%d waiting, %d attempts refused): "
            "memory %s (watermarks: high %s, low %s), the store takes more again",
            waited / 1000,
            len(waiters),
            self.refused,
            _mib(self.memory.used),
            _mib(self.memory.high) if self.memory.high else "no limit",
            _mib(self.memory.low) if self.memory.high else "none",
        )
        self.reason = None
        self.everyone = False
        self._cause = ""
        self.refused = 0
        for share in self._shares:
            share.waiting = False  # every waiting producer goes on: its share ages again
        for wake in waiters:
            wake()
