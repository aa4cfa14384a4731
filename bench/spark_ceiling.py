"""The ceiling Spark itself allows for the connector: Python data sources without a broker.

``chute_ceiling`` is a Python data source (registered like chute's) that

* reads: yields the rows of chute's source (:data:`chute.spark.schema.READ_SCHEMA`,
  1 KiB ``body``) from memory, split into partitions as chute splits them and in
  pages of the size chute reads, either as tuples (``.option("form", "tuples")``)
  or as ``pyarrow.RecordBatch`` es (``"arrow"``, what chute yields); only ``seq``
  changes from page to page;
* writes: takes Arrow batches (``DataSourceArrowWriter`` for batch writes,
  ``DataSourceStreamArrowWriter`` for streams, as chute's sink) and discards them,
  checking on commit that ``rows`` rows arrived.

The functions at the bottom time it exactly as ``bench/spark.py`` times chute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from chute.message import Message
from chute.spark.schema import ARROW_SCHEMA, READ_SCHEMA, to_record_batch
from chute.spark.source import SeqRange, split

NAME: Final = "chute_ceiling"
PAGE_ROWS: Final = 3800
"""Rows per page: about what chute's 4 MiB pages of 1 KiB messages hold."""


def template(rows: int, body: int) -> pa.RecordBatch:
    """``rows`` messages as a chute consumer gets them (persistent, delivered once)."""
    now = int(time.time() * 1000)
    page = [
        (
            i,
            Message(
                bytes([i % 251]) * body,
                id=f"ID:0123456789abcdef-{i}",
                timestamp=now,
                delivery_count=1,
            ),
        )
        for i in range(rows)
    ]
    return to_record_batch("queue:in", page)


@dataclass
class Count(WriterCommitMessage):
    """Rows one write task discarded."""

    rows: int


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``rows`` rows at offsets ``{"seq": 1}`` to ``{"seq": rows + 1}``, from memory."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options.get("rows", "100000"))
        self.body = int(options.get("bodyBytes", "1024"))
        self.parts = int(options.get("numPartitions", "2"))
        self.arrow = options.get("form", "arrow") == "arrow"

    def initialOffset(self) -> dict[str, int]:
        return {"seq": 1}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"seq": self.rows + 1}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return split(int(start["seq"]), int(end["seq"]), self.parts)

    def commit(self, end: dict[str, int]) -> None:
        pass

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SeqRange):
            raise TypeError(f"not a ceiling partition: {partition!r}")
        page = template(PAGE_ROWS, self.body)  # built once per task, outside the pages
        if self.arrow:
            return _arrow_pages(page, partition)
        return _tuple_rows(page, partition)


def _arrow_pages(page: pa.RecordBatch, part: SeqRange) -> Iterator[pa.RecordBatch]:
    rest = page.columns[1:]
    for first in range(part.start, part.end, PAGE_ROWS):
        n = min(PAGE_ROWS, part.end - first)
        seqs = pa.array(range(first, first + n), type=pa.int64())
        columns = [seqs, *(c if n == PAGE_ROWS else c.slice(0, n) for c in rest)]
        yield pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _tuple_rows(page: pa.RecordBatch, part: SeqRange) -> Iterator[tuple[Any, ...]]:
    rests = [tuple(row.values())[1:] for row in page.to_pylist()]
    for first in range(part.start, part.end, PAGE_ROWS):
        for seq, rest in zip(range(first, part.end), rests, strict=False):
            yield (seq, *rest)


def _check(messages: Sequence[WriterCommitMessage | None], expected: int) -> None:
    got = sum(m.rows for m in messages if isinstance(m, Count))
    if expected and got != expected:
        raise RuntimeError(f"the discarding writer got {got} rows, not {expected}")


class DiscardWriter(DataSourceArrowWriter):
    """A batch write that drops every Arrow batch (counts them)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Count:
        return Count(sum(b.num_rows for b in iterator))

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _check(messages, self.expected)


class DiscardStreamWriter(DataSourceStreamArrowWriter):
    """A stream write that drops every Arrow batch (counts them)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Count:
        return Count(sum(b.num_rows for b in iterator))

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _check(messages, self.expected)


class CeilingDataSource(DataSource):
    """Options: ``rows``, ``bodyBytes``, ``numPartitions``, ``form`` (tuples|arrow)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return READ_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CeilingStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return DiscardWriter(int(self.options.get("rows", "0")))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return DiscardStreamWriter(int(self.options.get("rows", "0")))


def register(spark: Any) -> None:
    """Make ``chute_ceiling`` known to ``spark`` (whose workers must import ``bench``:
    ``bench.spark`` puts the repository on their ``PYTHONPATH``)."""
    spark.dataSource.register(CeilingDataSource)


@dataclass
class Timed:
    """One stream query: seconds from ``start()`` to its end, and its micro-batches' own
    seconds (``triggerExecution``: without the query's start-up and shut-down)."""

    seconds: float
    batches: float
    rows: int


def timed(start_query: Callable[[], Any]) -> Timed:
    """Run the query ``start_query()`` starts to its end."""
    start = time.perf_counter()
    query = start_query()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = query.recentProgress
    batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    return Timed(seconds, batches, sum(p["numInputRows"] for p in progress))


def source(spark: Any, rows: int, form: str, checkpoint: str) -> Timed:
    """As chute's source: a stream query, one micro-batch, into ``noop``."""
    result = timed(
        lambda: (
            spark.readStream.format(NAME)
            .option("rows", rows)
            .option("form", form)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )
    if result.rows != rows:
        raise RuntimeError(f"the ceiling source gave {result.rows} rows, not {rows}")
    return result


def sink(df: Any, rows: int) -> float:
    """As chute's sink: a batch write of the cached DataFrame ``df``; seconds."""
    start = time.perf_counter()
    df.write.format(NAME).option("rows", rows).mode("append").save()
    return time.perf_counter() - start


def stream_sink(spark: Any, rows: int, checkpoint: str) -> Timed:
    """The stream Arrow writer, fed the in-memory Arrow source's ``body`` column in one
    micro-batch (so its time includes that source's)."""
    return timed(
        lambda: (
            spark.readStream.format(NAME)
            .option("rows", rows)
            .load()
            .select("body")
            .writeStream.format(NAME)
            .option("rows", rows)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )
