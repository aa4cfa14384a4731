"""The source over streams: Spark reads ``stream:`` destinations the way it reads Kafka.

Offsets live in Spark's checkpoint, as the Kafka source keeps them: an offset is
``{"stream:a": 120, "stream:b": 7}``, each the next offset to read of that stream
(keys sorted, so the same position is always the same text); a stream with
partitions has one per partition, as Kafka writes them: ``{"stream:orders": {"0": 42,
"1": 7}}``. Inside, offsets are flat, keyed by each partition's address
(``stream:orders#1``; partition 0 is the stream's own): :func:`flat` and
:func:`nested` convert at Spark's edge. Each partition is read by tasks of its own
(``numPartitions`` splits them further), and a ``partition`` column says which; a
stream that gains partitions is seen at the next trigger, its new ones read from
their first offset. The broker keeps nothing for a query: no cursor, no lease, no
hold. Any number of queries read the same streams independently, and a query
replays from wherever its checkpoint says.

What runs where (docs/spark.md): the offset calls run in one long-lived Python
process on the driver, which keeps one connection; ``read(partition)`` runs on
executors, on an unpickled copy, and opens its own connection per partition.

Several streams, or an address pattern (``stream:orders.*``), in one query: a
pattern is looked up again at every trigger, and a stream that appears is read
from its first offset. ``maxOffsetsPerTrigger`` is shared among the streams in
proportion to what each has waiting; ``numPartitions`` (Kafka's
``minPartitions``) is the least number of tasks a batch is split into, in
proportion to each stream's range.

Retention may remove offsets a query still needed (it was stopped too long).
With ``failOnDataLoss`` (the default, as Kafka's) the query fails and says
which offsets went; without it, it warns and reads on from what is kept.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
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
from chute.core.model.address import (
    MAX_PARTITIONS,
    canonical,
    partition_address,
    split_partition,
)
from chute.errors import ChuteError, ConnectError, InvalidAddress
from chute.spark.homes import HomeBook, at_home, fall_back
from chute.spark.options import ChuteOptions, OptionError
from chute.spark.pages import page_batch

PAGE_BYTES: Final = 4 << 20

log = logging.getLogger("chute.spark")

Offsets = dict[str, int]
"""Offsets inside: the next offset to read, per stream partition's address."""
SparkOffsets = dict[str, Any]
"""Offsets as Spark keeps them: per stream an offset, or per partition of a stream with
several (``{"stream:orders": {"0": 42, "1": 7}}``)."""

BEGINNING: Final = 0
"""The start of a stream whatever retention removed (offsets start at 1): a range from
here reads from the stream's first offset, and no offset counts as lost."""


class DataLoss(ChuteError):
    """Retention removed offsets a query had not read (``failOnDataLoss``)."""


class StreamRange(InputPartition):
    """Offsets ``[start, end)`` of one stream partition: what one task reads, on its
    ``home`` (``host:port``, in a cluster: :mod:`chute.spark.homes`) or, without one,
    through the URL."""

    def __init__(self, address: str, start: int, end: int, home: str | None = None) -> None:
        super().__init__((address, start, end, home))
        self.address = address
        self.start = start
        self.end = end
        self.home = home

    def __repr__(self) -> str:
        home = f", home={self.home!r}" if self.home else ""
        return f"StreamRange({self.address!r}, {self.start}, {self.end}{home})"


def flat(offsets: Mapping[str, Any]) -> Offsets:
    """Spark's offsets as offsets per partition's address (see the module docstring)."""
    out: Offsets = {}
    for address, value in offsets.items():
        if isinstance(value, Mapping):
            for partition, offset in value.items():
                out[partition_address(address, int(partition))] = int(offset)
        else:
            out[address] = int(value)
    return out


def nested(offsets: Mapping[str, int]) -> SparkOffsets:
    """Offsets per partition's address as Spark keeps them: a stream with partitions as
    ``{"0": n, "1": m, ...}`` (keys sorted, partitions in order)."""
    grouped: dict[str, dict[int, int]] = {}
    for address, offset in offsets.items():
        base, partition = split_partition(address)
        grouped.setdefault(base, {})[partition] = int(offset)
    out: SparkOffsets = {}
    for base in sorted(grouped):
        parts = grouped[base]
        if set(parts) == {0}:
            out[base] = parts[0]
        else:
            out[base] = {str(p): parts[p] for p in sorted(parts)}
    return out


def ordered(offsets: Mapping[str, int]) -> Offsets:
    """``offsets`` with its keys sorted (Spark compares offsets as JSON text)."""
    return {key: int(offsets[key]) for key in sorted(offsets)}


def plan(
    start: Mapping[str, int],
    end: Mapping[str, int],
    parts: int,
    homes: Mapping[str, str] | None = None,
) -> list[StreamRange]:
    """The ranges of a batch: each stream's ``[start, end)`` cut so that there are at
    least ``parts`` tasks, shared in proportion to each range (deterministic: a replay
    of the same offsets plans the same ranges). A stream not in ``start`` (one a
    pattern found since) is read whole from :data:`BEGINNING` in one task: the broker
    skips to its first offset. Each range is read on its partition's home in
    ``homes`` (by partition's address), if it has one."""
    homes = homes or {}
    spans = {a: (start.get(a, BEGINNING), end[a]) for a in sorted(end)}
    total = sum(max(0, b - a) for a, b in spans.values() if a != BEGINNING)
    out: list[StreamRange] = []
    for address, (a, b) in spans.items():
        if b <= a:
            continue
        home = homes.get(address)
        if a == BEGINNING:
            out.append(StreamRange(address, a, b, home))
            continue
        pieces = max(1, round(parts * (b - a) / total)) if total else 1
        step = max(1, -(-(b - a) // pieces))
        out += [StreamRange(address, x, min(x + step, b), home) for x in range(a, b, step)]
    return out


def share(start: Mapping[str, int], heads: Mapping[str, int], rows: int) -> Offsets:
    """End offsets past ``start`` by at most ``rows`` in all, shared in proportion to
    what each stream has waiting (``maxOffsetsPerTrigger``, as Kafka shares it)."""
    waiting = {a: max(0, heads[a] - start.get(a, heads[a])) for a in heads}
    total = sum(waiting.values())
    if not rows or total <= rows:
        return ordered({a: max(heads[a], start.get(a, heads[a])) for a in heads})
    end: Offsets = {}
    given = 0
    for address in sorted(heads):
        begin = start.get(address, heads[address])
        n = waiting[address] * rows // total
        end[address] = begin + n
        given += n
    for address in sorted(heads):  # what rounding left: one each, oldest names first
        if given >= rows:
            break
        if end[address] < heads[address]:
            end[address] += 1
            given += 1
    return ordered(end)


def parse_starting(text: str, addresses: Sequence[str]) -> dict[str, str | int]:
    """``startingOffsets``/``endingOffsets`` per stream: ``earliest``, ``latest``, an
    offset (one stream), or Kafka's JSON form ``{"stream:a": 5, "stream:b": -2}``
    (-2 earliest, -1 latest; a stream not named starts at ``earliest``).

    Raises:
        OptionError: a value of none of these forms.
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise OptionError(f"option startingOffsets: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise OptionError('option startingOffsets: a JSON object {"stream:NAME": offset}')
        out: dict[str, str | int] = {}
        for key, value in raw.items():
            values = value if isinstance(value, dict) else {"0": value}
            for partition, offset in values.items():
                if (
                    not isinstance(offset, int)
                    or isinstance(offset, bool)
                    or offset < -2
                    or not str(partition).isdigit()
                ):
                    raise OptionError(
                        f"option startingOffsets: {key}: an offset, -2 (earliest) or -1 "
                        '(latest), or per partition {"0": offset, "1": offset}'
                    )
                address = partition_address(canonical(key), int(partition))
                out[address] = {-2: "earliest", -1: "latest"}.get(offset, offset)
        return out
    if text.isdigit():
        if len(addresses) != 1:
            raise OptionError(
                "option startingOffsets: one offset for several streams is ambiguous; give "
                'JSON such as {"stream:a": 5, "stream:b": 0}'
            )
        return {addresses[0]: int(text)}
    return dict.fromkeys(addresses, text)


def at_time(conn: BlockingConnection, address: str, timestamp: int) -> int:
    """The first offset of ``address`` whose message was accepted at ``timestamp`` (ms)
    or later (its head if none): a bisection with one-message reads."""
    first, head = conn.cursor_open(address)
    lo, hi = first, head
    while lo < hi:
        mid = (lo + hi) // 2
        _, found = conn.cursor_fetch(address, None, mid, head, max_messages=1)
        if not found or found[0][1].timestamp >= timestamp:
            hi = mid
        else:
            lo = found[0][0] + 1
    if lo >= head:
        return head
    _, found = conn.cursor_fetch(address, None, lo, head, max_messages=1)
    return found[0][0] if found else head


class StreamPlanner:
    """What the driver asks the broker: which streams, where they start and end."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options

    def streams(self, conn: BlockingConnection) -> list[str]:
        """The streams of the query: those named, and those its pattern matches now."""
        o = self.options
        found = [a for a in o.destinations]
        if o.pattern is not None:
            stats = conn.stat(o.pattern)
            found += [
                d["address"]
                for d in stats["destinations"]
                if d.get("kind") == "stream" and "#" not in d["address"]  # partitions: below
            ]
        return sorted(set(found))

    def bounds(
        self, conn: BlockingConnection, streams: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        """``(first, head)`` of each partition of each stream, by partition's address (a
        stream's partitions are asked for in turn until the broker says there is no
        such partition)."""
        out: dict[str, tuple[int, int]] = {}
        for address in streams:
            out[address] = conn.cursor_open(address)
            for partition in range(1, MAX_PARTITIONS):
                part = partition_address(address, partition)
                try:
                    out[part] = conn.cursor_open(part)
                except InvalidAddress:
                    break
        return out

    def starting(
        self,
        conn: BlockingConnection,
        bounds: Mapping[str, tuple[int, int]],
        text: str | None = None,
    ) -> Offsets:
        """Where a new checkpoint starts (``startingOffsets``, or ``startingTimestamp``)."""
        o = self.options
        if o.starting_timestamp is not None and text is None:
            return ordered({a: at_time(conn, a, o.starting_timestamp) for a in bounds})
        wanted = parse_starting(text or o.starting, list(bounds))
        out: Offsets = {}
        for address, (first, head) in bounds.items():
            value = wanted.get(address, "earliest")
            if value == "earliest":
                out[address] = first
            elif value == "latest":
                out[address] = head
            else:
                out[address] = min(max(int(value), BEGINNING), head)
        return ordered(out)


def check_loss(start: Mapping[str, int], bounds: Mapping[str, tuple[int, int]], fail: bool) -> None:
    """Raise :class:`DataLoss` (or warn, without ``fail``) for each stream whose retention
    removed offsets at or above ``start``."""
    for address, begin in start.items():
        first = bounds.get(address, (begin, begin))[0]
        if BEGINNING < begin < first:
            what = (
                f"{address}: offsets {begin}..{first - 1} were removed by the stream's "
                "retention before this query read them"
            )
            if fail:
                raise DataLoss(
                    f"{what}; set option failOnDataLoss=false to read on from offset {first}, "
                    "or keep the stream longer (max_age, max_bytes)"
                )
            log.warning("%s; reading on from offset %d (failOnDataLoss=false)", what, first)


def read_stream_range(options: ChuteOptions, part: StreamRange) -> Iterator[pa.RecordBatch]:
    """Read one task's range as Arrow batches, one per page: on its partition's home if
    it has one that holds the whole range, else through the URL; a home lost in the
    middle of the read, through the URL from the next offset (:mod:`chute.spark.homes`)."""
    start = part.start
    home = None if part.home is None else at_home(options, part.address, part.home, part.end)
    if home is not None:
        try:
            for batch in _read(options, home, part.address, start, part.end):
                start = int(batch.column("seq")[-1].as_py()) + 1
                yield batch
            return
        except (ConnectError, OSError) as exc:
            why = f"went away in the middle of a read ({exc}), from offset {start} on"
            fall_back(options, part.address, str(part.home), why)
    yield from _read(options, options.connect_retrying(), part.address, start, part.end)


def _read(
    options: ChuteOptions, conn: BlockingConnection, address: str, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """``[start, end)`` of ``address`` on ``conn`` (closed at the end), once the node
    holds it up to ``end`` (:func:`caught_up`)."""
    try:
        first, head = conn.cursor_open(address)
        if head < end:
            caught_up(conn, address, end, options.timeout_ms / 1000, options.fail_on_loss)
        if start != BEGINNING:
            check_loss({address: start}, {address: (first, first)}, options.fail_on_loss)
        base, partition = split_partition(address)
        number = pa.scalar(partition, pa.int32())
        for body in conn.cursor_read_raw(
            address,
            None,
            start,
            end,
            page_messages=options.page_messages,
            page_bytes=PAGE_BYTES,
        ):
            batch = page_batch(base, body)
            yield batch.append_column("partition", pa.repeat(number, batch.num_rows))
    finally:
        conn.close()


def caught_up(
    conn: BlockingConnection, address: str, end: int, patience: float, fail: bool
) -> None:
    """Wait until the node of ``conn`` holds ``address`` up to ``end`` (exclusive). A node
    that is not the partition's home holds a copy a moment behind it, and the batch's
    offsets may come from a node further ahead (another node of a URL of several, or
    the home): a read of a copy that is behind would end early, without the rows it
    does not hold yet. Past ``patience`` seconds (its home is down, or a broker that
    crashed lost messages that were not persistent) :class:`DataLoss` is raised, or,
    without ``fail`` (``failOnDataLoss=false``), the task reads what the node holds,
    with a warning."""
    deadline = time.monotonic() + patience
    while True:
        head = conn.cursor_open(address)[1]
        if head >= end:
            return
        if time.monotonic() >= deadline:
            if fail:
                raise DataLoss(
                    f"{address}: node {conn.node} holds offsets below {head} only, not up to "
                    f"{end}, after {patience:.0f} s of waiting for it (its copy is behind a "
                    "home that is down, or a broker lost messages that were not persistent); "
                    "the query can go on once the home is back, or set option "
                    "failOnDataLoss=false to read what the node holds"
                )
            log.warning(
                "%s: node %s holds offsets below %d only, not up to %d, after %.0f s of "
                "waiting for it (is its home down?); reading what it holds",
                address,
                conn.node,
                head,
                end,
                patience,
            )
            return
        time.sleep(0.05)  # polling a copy that follows its home, with a deadline


class StreamBatchReader(DataSourceReader):
    """``spark.read.format("chute")`` over streams: ``startingOffsets`` to
    ``endingOffsets`` (default: the heads when planned)."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        planner = StreamPlanner(o)
        with o.connect() as conn:
            bounds = planner.bounds(conn, planner.streams(conn))
            start = planner.starting(conn, bounds)
            end = planner.starting(conn, bounds, o.ending)
            homes = HomeBook(o).homes_of(conn, bounds)
        check_loss(start, bounds, o.fail_on_loss)
        parts = plan(start, {a: max(end[a], start[a]) for a in end}, o.partitions, homes)
        return parts or [StreamRange("", 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StreamRange) or partition.start >= partition.end:
            return iter(())
        return read_stream_range(self.options, partition)


class StreamSource(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("chute")`` over streams (see the module docstring)."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options
        self.planner = StreamPlanner(options)
        self.homes = HomeBook(options)
        self._conn: BlockingConnection | None = None  # driver only: opened lazily, never pickled
        self._available_now: Offsets | None = None
        self._heads: Offsets = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        return state

    # -- driver ---------------------------------------------------------------------

    def _bounds(self) -> dict[str, tuple[int, int]]:
        """``(first, head)`` of every stream of the query, reconnecting if the broker went
        away (a restart)."""
        return self._look()[1]

    def _look(self) -> tuple[BlockingConnection, dict[str, tuple[int, int]]]:
        for attempt in range(2):
            if self._conn is None or self._conn.closed:
                self._conn = self.options.connect_retrying()
            try:
                bounds = self.planner.bounds(self._conn, self.planner.streams(self._conn))
            except ConnectError:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            self._heads = ordered({a: head for a, (_, head) in bounds.items()})
            return self._conn, bounds
        raise AssertionError("unreachable")  # pragma: no cover

    def initialOffset(self) -> SparkOffsets:
        conn, bounds = self._look()
        return nested(self.planner.starting(conn, bounds))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: SparkOffsets, limit: ReadLimit) -> SparkOffsets:
        bounds = self._bounds()
        begin = flat(start)
        for address, (first, _) in bounds.items():
            begin.setdefault(address, first)  # a stream the pattern found since: from its first
        check_loss(begin, bounds, self.options.fail_on_loss)
        heads = {a: head for a, (_, head) in bounds.items()}
        for address, offset in begin.items():  # a stream gone (deleted) stays where it was
            heads.setdefault(address, offset)
        if self._available_now is not None:
            heads = {a: min(h, self._available_now.get(a, begin[a])) for a, h in heads.items()}
        heads = {a: max(h, begin[a]) for a, h in heads.items()}
        return nested(share(begin, heads, _max_rows(limit)))

    def reportLatestOffset(self) -> SparkOffsets:
        """The heads seen last: Spark's progress shows them beside the batch's end, which
        is how far behind the streams' heads the query is."""
        return nested(self._heads)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = ordered({a: h for a, (_, h) in self._bounds().items()})

    def partitions(self, start: SparkOffsets, end: SparkOffsets) -> Sequence[InputPartition]:
        """The batch's tasks, each on its partition's home (asked of the broker when due:
        :class:`~chute.spark.homes.HomeBook`)."""
        last = flat(end)
        homes: dict[str, str] = {}
        if self.options.direct:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self.options.connect_retrying()
            except ConnectError:
                pass  # the broker is away: the tasks read through the URL, and wait for it
            else:
                homes = self.homes.homes_of(self._conn, last)
        return plan(flat(start), last, self.options.partitions, homes)

    def commit(self, end: SparkOffsets) -> None:
        """Nothing to do: the broker keeps no position for a query (its offsets are in
        Spark's checkpoint), and retention, not reading, removes messages."""

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- executors ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StreamRange):
            raise TypeError(f"not a chute stream partition: {partition!r}")
        return read_stream_range(self.options, partition)


def _max_rows(limit: Any) -> int:
    if isinstance(limit, ReadMaxRows):
        return int(limit.max_rows)
    if isinstance(limit, dict) and "max_rows" in limit:
        return int(limit["max_rows"])
    return 0
