"""The source: batch reads (a snapshot) and micro-batch stream reads (ranges of a cursor).

What runs where (docs/spark.md): the stream reader's offset calls run in one
long-lived Python process on the driver, which keeps one connection;
``read(partition)`` runs on executors, on an unpickled copy, and opens its own
connection per partition. Offsets are ``{"seq": n}``: the destination's
sequence number, end exclusive. When a query stops, the stream reader releases its
cursor at once (see :meth:`ChuteStreamReader.stop`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from chute.client.blocking import BlockingConnection
from chute.errors import ChuteError, ConnectError, NotFound
from chute.spark.options import ChuteOptions
from chute.spark.pages import page_batch

PAGE_BYTES: Final = 4 << 20

log = logging.getLogger("chute.spark")


class SeqRange(InputPartition):
    """Sequence numbers ``[start, end)`` of one destination: what one task reads."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SeqRange({self.start}, {self.end})"


def split(start: int, end: int, parts: int) -> list[SeqRange]:
    """``[start, end)`` in up to ``parts`` contiguous ranges (deterministic: a replay of
    the same offsets plans the same partitions)."""
    if end <= start:
        return []
    step = max(1, -(-(end - start) // parts))
    return [SeqRange(a, min(a + step, end)) for a in range(start, end, step)]


def read_range(
    options: ChuteOptions, cursor: str | None, part: SeqRange
) -> Iterator[pa.RecordBatch]:
    """Read one partition as Arrow batches, one per page."""
    address = options.address
    conn = options.connect_retrying()
    try:
        if cursor is not None:  # (re)open: a broker that restarted has forgotten the cursor
            conn.cursor_open(address, cursor, selector=options.selector, lease_ms=options.lease_ms)
        for body in conn.cursor_read_raw(
            address,
            cursor,
            part.start,
            part.end,
            page_messages=options.page_messages,
            page_bytes=PAGE_BYTES,
        ):
            yield page_batch(address, body)
    finally:
        conn.close()


class ChuteBatchReader(DataSourceReader):
    """``spark.read.format("chute")``: a snapshot of a queue from ``startingOffsets`` to
    the head, without a cursor: nothing is consumed and nothing is held (topics are
    refused by :class:`~chute.spark.datasource.ChuteDataSource`)."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with o.connect() as conn:
            earliest, head = conn.cursor_open(o.address)
        start = _starting(o.starting, earliest, head)
        return split(start, head, o.partitions) or [SeqRange(head, head)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SeqRange) or partition.start >= partition.end:
            return iter(())
        return read_range(self.options, None, partition)


class ChuteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("chute")``: micro-batches are ranges of a named cursor.

    When the query stops, :meth:`stop` consumes what Spark has committed and lets go
    of the cursor (it stays, with its position), so other consumers get the queue at
    once instead of after the lease.
    """

    def __init__(self, options: ChuteOptions) -> None:
        if options.cursor is None:
            raise ValueError("a stream reader needs a cursor name")
        self.options = options
        self.cursor: str = options.cursor
        self._conn: BlockingConnection | None = (
            None  # driver only: opened lazily, never pickled live
        )
        self._available_now: int | None = None
        self._initial: int | None = None  # initialOffset of this run (a new checkpoint)
        self._done = 0  # below this Spark has committed every batch
        self._acked = 0  # below this the cursor has consumed

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        return state

    # -- driver ---------------------------------------------------------------------

    def _open(self) -> tuple[int, int]:
        """(earliest, head) of the cursor, opening it (again) and reconnecting if the
        broker went away (a restart)."""
        o = self.options
        for attempt in range(2):
            if self._conn is None or self._conn.closed:
                _stop_on_sigterm()
                self._conn = o.connect_retrying()
            try:
                return self._conn.cursor_open(
                    o.address, self.cursor, selector=o.selector, lease_ms=o.lease_ms
                )
            except ConnectError:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def initialOffset(self) -> dict[str, int]:
        earliest, head = self._open()
        self._initial = _starting(self.options.starting, earliest, head)
        return {"seq": self._initial}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        _, head = self._open()
        first = int(start["seq"])
        if first != self._initial:
            # Spark plans a batch from where the last one it committed ended (or from
            # the initial offset, below which this query read nothing).
            self._done = max(self._done, first)
        end = max(first, head)
        if self._available_now is not None:
            end = min(end, max(first, self._available_now))
        rows = _max_rows(limit)
        if rows:
            end = min(end, first + rows)
        return {"seq": end}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._open()[1]

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return split(int(start["seq"]), int(end["seq"]), self.options.partitions)

    def commit(self, end: dict[str, int]) -> None:
        """Spark is done with everything below ``end``: consume it. Arrives one batch late
        and not for the last batch: a retention hint, never the resume point."""
        self._open()
        if self._conn is not None:
            self._conn.cursor_ack(self.options.address, self.cursor, int(end["seq"]))
            self._acked = max(self._acked, int(end["seq"]))

    def stop(self) -> None:
        """The query stopped (``query.stop()``, the driver's end, a failure): consume
        what Spark committed and :meth:`commit` did not get to (the last batch), then
        release the cursor without deleting it: other consumers get the queue now,
        and a restarted query finds its topic subscription where it was. A batch that
        was planned but not committed stays in the queue."""
        conn, self._conn = self._conn, None
        if conn is None:
            return  # this copy never talked to the broker
        conn.close()  # it may be mid-request (a signal): use a fresh connection
        o = self.options
        try:
            with o.connect() as fresh:
                if self._done > self._acked:
                    fresh.cursor_ack(o.address, self.cursor, self._done)
                fresh.cursor_close(o.address, self.cursor)  # delete=False: keep the position
        except NotFound:
            pass  # the broker restarted or the destination went: nothing is held
        except (ChuteError, OSError) as exc:
            log.warning(
                "could not release cursor %r on %s (%s); the broker releases it when its "
                "lease (leaseMs) runs out",
                self.cursor,
                o.address,
                exc,
            )

    # -- executors ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SeqRange):
            raise TypeError(f"not a chute partition: {partition!r}")
        return read_range(self.options, self.cursor, partition)


def _stop_on_sigterm() -> None:
    """Let :meth:`ChuteStreamReader.stop` run when Spark stops the query.

    ``query.stop()`` ends the Python process that runs the stream reader with SIGTERM,
    whose default action ends it at once, without the ``reader.stop()`` that PySpark's
    runner has in a ``finally``. Turned into ``SystemExit``, the signal unwinds through
    that ``finally``. Only in a main thread whose SIGTERM nobody else handles (the
    runner's); a second SIGTERM is then ignored so that it cannot cut ``stop()`` short.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(0)


def _starting(starting: str, earliest: int, head: int) -> int:
    if starting == "earliest":
        return earliest
    if starting == "latest":
        return head
    return int(starting)


def _max_rows(limit: Any) -> int:
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    if isinstance(limit, dict) and "max_rows" in limit:
        return int(limit["max_rows"])
    return 0
