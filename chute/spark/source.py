"""The source: batch reads (a snapshot) and micro-batch stream reads (ranges of a cursor).

What runs where (docs/spark.md): the stream reader's offset calls run in one
long-lived Python process on the driver, which keeps one connection;
``read(partition)`` runs on executors, on an unpickled copy, and opens its own
connection per partition. Offsets are ``{"seq": n}``: the destination's
sequence number, end exclusive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from chute.client.blocking import Connection
from chute.errors import ConnectError
from chute.spark.options import ChuteOptions
from chute.spark.schema import to_record_batch

PAGE_BYTES: Final = 4 << 20


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
        for page in conn.cursor_read(
            address,
            cursor,
            part.start,
            part.end,
            page_messages=options.page_messages,
            page_bytes=PAGE_BYTES,
        ):
            yield to_record_batch(address, page)
    finally:
        conn.close()


class ChuteBatchReader(DataSourceReader):
    """``spark.read.format("chute")``: a snapshot of a queue (or of a topic cursor's
    subscription with ``cursor``) from ``startingOffsets`` to the head; nothing is
    consumed."""

    def __init__(self, options: ChuteOptions, *, use_cursor: bool) -> None:
        self.options = options
        self.cursor = options.cursor if use_cursor else None

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        with o.connect() as conn:
            if self.cursor is None:
                earliest, head = conn.cursor_open(o.address)
            else:
                earliest, head = conn.cursor_open(
                    o.address, self.cursor, selector=o.selector, lease_ms=o.lease_ms
                )
        start = _starting(o.starting, earliest, head)
        return split(start, head, o.partitions) or [SeqRange(head, head)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SeqRange) or partition.start >= partition.end:
            return iter(())
        return read_range(self.options, self.cursor, partition)


class ChuteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("chute")``: micro-batches are ranges of a named cursor."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options
        self._conn: Connection | None = None  # driver only: opened lazily, never pickled live
        self._available_now: int | None = None

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
                self._conn = o.connect_retrying()
            try:
                return self._conn.cursor_open(
                    o.address, o.cursor, selector=o.selector, lease_ms=o.lease_ms
                )
            except ConnectError:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def initialOffset(self) -> dict[str, int]:
        earliest, head = self._open()
        return {"seq": _starting(self.options.starting, earliest, head)}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        _, head = self._open()
        first = int(start["seq"])
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
        o = self.options
        self._open()
        if self._conn is not None:
            self._conn.cursor_ack(o.address, o.cursor, int(end["seq"]))

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- executors ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SeqRange):
            raise TypeError(f"not a chute partition: {partition!r}")
        return read_range(self.options, self.options.cursor, partition)


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
