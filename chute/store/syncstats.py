"""What the journal's fsyncs cost: their latency and how many records each one covered.

The writer thread (or a caller running an inline cycle, under the writer's cycle
lock) records one observation per group-commit fsync: how long the ``fdatasync``
took and how many records it made durable. Each observation lands in fixed
buckets (a histogram), so the figures cost two bisections and a few additions
per fsync, never anything per message, and whoever reads them (the ``/metrics``
scrape) takes a consistent :class:`SyncSnapshot` at any time.

Thread-safety: :meth:`SyncStats.record` and :meth:`SyncStats.snapshot` may be
called from any thread; a small lock keeps a snapshot's counts, sums and buckets
in step (it is taken once per fsync, uncontended but for a scrape).
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Final

SECONDS_BOUNDS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Upper bounds of the fsync latency buckets, in seconds (the last bucket is unbounded)."""

RECORDS_BOUNDS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
"""Upper bounds of the records-per-fsync buckets (the last bucket is unbounded)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """One histogram's figures: per-bucket counts (not cumulative; one more than the
    bounds, the last for everything above them), their sum, and the count."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ``inf`` last, as Prometheus shows them."""
        running = 0
        out: list[tuple[float, int]] = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass(frozen=True, slots=True)
class SyncSnapshot:
    """The fsyncs since the journal opened: their latency and their group-commit sizes."""

    seconds: Histogram
    records: Histogram


class SyncStats:
    """Counts of the journal's fsyncs in buckets. See the module docstring."""

    __slots__ = ("_lock", "_record_counts", "_records", "_seconds", "_seconds_counts")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds_counts = [0] * (len(SECONDS_BOUNDS) + 1)
        self._record_counts = [0] * (len(RECORDS_BOUNDS) + 1)
        self._seconds = 0.0
        self._records = 0

    def record(self, seconds: float, records: int) -> None:
        """One fsync took ``seconds`` and made ``records`` records durable."""
        slow = bisect.bisect_left(SECONDS_BOUNDS, seconds)
        many = bisect.bisect_left(RECORDS_BOUNDS, records)
        with self._lock:
            self._seconds_counts[slow] += 1
            self._record_counts[many] += 1
            self._seconds += seconds
            self._records += records

    def snapshot(self) -> SyncSnapshot:
        with self._lock:
            return SyncSnapshot(
                Histogram(SECONDS_BOUNDS, tuple(self._seconds_counts), self._seconds),
                Histogram(RECORDS_BOUNDS, tuple(self._record_counts), float(self._records)),
            )
