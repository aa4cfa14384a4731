"""Per-second rates of each destination's counters, for the admin API.

The core counts what went through each destination, queue, topic or stream
(``enqueued``, ``delivered``, ``acked``: :mod:`chute.core.operations.stats`) and nothing per second:
a rate is a difference over time, which is the admin layer's business.
:class:`RateSampler` takes a sample of every destination's counters once a
second (its task runs while the HTTP application does) and keeps the last
few per destination; a rate is the counter now minus the oldest sample of the
last :data:`WINDOW` seconds, over the time between them. So a rate costs
nothing per message, and the answer is as fresh as the request.

A broker may hold many destinations: a tick samples at most
:data:`PER_TICK` of them, going round, so with more each is sampled less
often and its rate spans a longer window (never a shorter one). A counter
that went down (the destination was deleted and made again) restarts its
samples. Samples of a destination that is gone are dropped.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from chute.core.operations.stats import queue_stats, stream_stats, topic_stats
from chute.core.rules.broker import Broker

log = logging.getLogger("chute.admin")

COUNTERS: Final = ("enqueued", "delivered", "acked")
WINDOW: Final = 5.0
"""Seconds a rate spans (at least: more when a tick cannot sample every destination)."""
INTERVAL: Final = 1.0
"""Seconds between two ticks."""
PER_TICK: Final = 5000
"""The most destinations one tick samples."""
KEEP: Final = 8
"""Samples kept per destination."""

Sample = tuple[float, tuple[int, ...]]
"""When (monotonic seconds), and the counters then, in :data:`COUNTERS` order."""


def counters(stats: dict[str, Any]) -> tuple[int, ...]:
    """The sampled counters of a destination's stats (0 for one the core lacks)."""
    return tuple(int(stats.get(name, 0)) for name in COUNTERS)


class RateSampler:
    """Samples of every destination's counters, and rates from them. See the module
    docstring. Used from the server's loop only."""

    def __init__(
        self,
        broker: Callable[[], Broker | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._broker = broker  # None until the broker has recovered
        self._clock = clock
        self._samples: dict[str, deque[Sample]] = {}
        self._round: list[str] = []  # addresses the current round still has to sample
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="chute-rates")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                self.tick()
            except Exception:  # a bug here must not stop the sampling for good
                log.exception("sampling destination rates failed")

    def tick(self) -> None:
        """Sample the next :data:`PER_TICK` destinations of the round (none before the
        broker has recovered)."""
        broker = self._broker()
        if broker is None:
            return
        if not self._round:
            self._round = [*broker.queues, *broker.streams, *broker.topics]
            self._round.reverse()  # popped from the end: address order, roughly
            alive = set(self._round)
            for gone in [a for a in self._samples if a not in alive]:
                del self._samples[gone]
        now = self._clock()
        for _ in range(min(PER_TICK, len(self._round))):
            address = self._round.pop()
            queue = broker.queues.get(address)
            if queue is not None:
                self.record(address, counters(queue_stats(queue)), now)
                continue
            topic = broker.topics.get(address)
            if topic is not None:
                self.record(address, counters(topic_stats(topic)), now)
                continue
            stream = broker.streams.get(address)
            if stream is not None:
                self.record(address, counters(stream_stats(stream)), now)

    def record(self, address: str, values: tuple[int, ...], now: float) -> None:
        """One sample of ``address``'s counters at ``now``."""
        samples = self._samples.get(address)
        if samples is None:
            samples = self._samples[address] = deque(maxlen=KEEP)
        elif any(v < old for v, old in zip(values, samples[-1][1], strict=True)):
            samples.clear()  # deleted and made again: its counters started over
        samples.append((now, values))

    def rates(self, address: str, stats: dict[str, Any]) -> dict[str, float]:
        """Per second, over about the last :data:`WINDOW` seconds: each counter of
        :data:`COUNTERS` (0.0 before there is a sample to compare with)."""
        values = counters(stats)
        now = self._clock()
        base = self._baseline(self._samples.get(address, ()), now)
        if base is None:
            return dict.fromkeys(COUNTERS, 0.0)
        then, old = base
        elapsed = now - then
        return {
            name: round(max(0, v - o) / elapsed, 3)
            for name, v, o in zip(COUNTERS, values, old, strict=True)
        }

    @staticmethod
    def _baseline(samples: Iterable[Sample], now: float) -> Sample | None:
        """The oldest sample within the window, or else the newest before it; None if
        there is none at least :data:`INTERVAL` old (a rate over less is mostly noise)."""
        chosen: Sample | None = None
        for sample in samples:  # oldest first
            age = now - sample[0]
            if age < INTERVAL:
                break
            chosen = sample
            if age <= WINDOW:
                break
        return chosen
