"""The sink: each task sends inside a two-phase transaction and prepares it; the driver
commits the batch's transactions together, once per (query, batch).

Transaction ids are ``spark/<query or job>/<batch>/<partition>/<attempt>/<random>.<n>``:
the random part keeps a rerun after a restart (same partition, attempt 0) from
meeting a staged transaction a killed run left prepared. A task sends its rows
with ``send_many`` (consecutive rows to one destination with one ttl go
together: few requests, each message's content block encoded once; a batch of rows
that set only their bodies goes as SendMany packets built in Arrow, without a Python
object per row: :mod:`chute.spark.framing`) and prepares them
in chunks (:data:`CHUNK_ROWS`, :data:`CHUNK_BYTES`), ``n`` counting them: a prepared
chunk no longer counts against the broker's memory watermark, so a partition of any
size never waits for room that only its own commit would free, and the broker
records one chunk while the task sends the next. A task keeps a chunk's rows until
it is prepared: when its connection moves to another node of its URL (a backup that
took the node over), the transaction in progress is lost with the old node and the
chunk is sent again on the new one (:class:`_Task`). The driver commits every
chunk of the batch's tasks together. The driver's commit
goes through ``XaCommitBatch`` (docs/spark.md): a batch Spark retries after it
was committed is dropped, its new transactions rolled back. Then the
orphans of this query at or below the batch (tasks killed before they could
report) are rolled back too; those of a killed driver wait for the broker's
``prepared_timeout_ms``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from chute.client.blocking import BlockingConnection
from chute.errors import NotFound, TransactionLost
from chute.message import BodyKind, Message
from chute.spark.framing import framed, packets, plain
from chute.spark.options import ChuteOptions, OptionError
from chute.spark.schema import rows_of

log = logging.getLogger("chute.spark")
PREFIX = "spark"
CHUNK_ROWS = 8192
"""Rows a task prepares in one transaction (the driver commits all of them together)."""
CHUNK_BYTES = 4 << 20
"""... or fewer, once their bodies hold this many bytes."""
MOVES = 3
"""Times a task sends a chunk again after its connection moved to another node."""


@dataclass
class Staged(WriterCommitMessage):
    """What a task hands the driver: its prepared transactions (none if it sent nothing)."""

    job: str
    xids: tuple[str, ...]
    count: int


def write_staged(
    options: ChuteOptions, job: str, batch: int, batches: Iterator[pa.RecordBatch]
) -> Staged:
    """Send every row, preparing a transaction every chunk (executors)."""
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    stem = f"{PREFIX}/{job}/{batch}/{partition}/{attempt}/{secrets.token_hex(4)}"
    conn = options.connect_retrying()  # the broker may be restarting
    task = _Task(conn, stem)
    try:
        for record_batch in batches:
            if not record_batch.num_rows:
                continue
            if options.destination is not None and plain(record_batch):
                task.send_framed(options.destination, record_batch)
            else:
                task.send_rows(options.destination, record_batch)
        task.finish()
    except BaseException:
        with contextlib.suppress(Exception):
            roll_back(conn, task.xids)  # what this task prepared goes (abort gets no xids)
        raise
    finally:
        conn.close()
    return Staged(job, tuple(task.xids), task.count)


class _Run(NamedTuple):
    """Consecutive rows to one target with one ttl: one ``send_many``."""

    target: str
    ttl: int
    items: list[bytes | str | Message]


class _Framed(NamedTuple):
    """A SendMany's share of a batch of bodies alone: one ``send_many_framed``."""

    target: str
    entries: int
    data: memoryview


_Send = _Run | _Framed
"""One request of a chunk."""


class _Task:
    """One task's sending: runs of rows to one target and ttl go out with ``send_many``
    (a batch of bodies alone as framed packets built in Arrow), and a transaction is
    prepared every chunk (:data:`CHUNK_ROWS`, :data:`CHUNK_BYTES`).

    A chunk's requests are kept until it is prepared. On a URL of several addresses
    the connection moves when its node is lost (a backup takes the node over): the
    transaction in progress is lost with the node, and the chunk is sent again on the
    node moved to, under a new xid (the lost node may have prepared the old one before
    it died: an orphan the batch's commit rolls back)."""

    def __init__(self, conn: BlockingConnection, stem: str) -> None:
        self.conn = conn
        self.session = conn.session(transacted=True)
        self.stem = stem
        self.xids: list[str] = []
        self.count = 0
        self._rows = self._size = 0  # of the chunk not prepared yet
        self._sends: list[_Send] = []  # the chunk's requests, for a resend after a move
        self._moves = 0  # of this chunk
        self._run: list[bytes | str | Message] = []  # consecutive rows to one target, one ttl
        self._key: tuple[str, int] = ("", 0)

    def send_framed(self, target: str, batch: pa.RecordBatch) -> None:
        """Send a batch whose rows set only their bodies (:func:`plain`), without a
        Python object per row."""
        self._send_run()  # what came before goes first
        for packet in packets(framed(batch)):
            self._send(_Framed(target, packet.entries, packet.framed))
            self._sent(packet.entries, packet.body_bytes)

    def send_rows(self, default: str | None, batch: pa.RecordBatch) -> None:
        """Send a batch row by row (rows with headers, properties, a destination...)."""
        for row in rows_of(batch):
            target = row.destination or default
            if target is None:
                raise OptionError(
                    'a row has no destination: set option "destination" or a destination column'
                )
            fields = row.options
            ttl = fields.pop("ttl", 0) if fields else 0
            if (target, ttl) != self._key:
                self._send_run()
                self._key = (target, ttl)
            self._run.append(_item(row.body, fields))
            self._sent(1, len(row.body))

    def finish(self) -> None:
        self._send_run()
        if self._rows:
            self._prepare()

    def _sent(self, rows: int, size: int) -> None:
        self.count += rows
        self._rows += rows
        self._size += size
        if self._rows >= CHUNK_ROWS or self._size >= CHUNK_BYTES:
            self._send_run()
            self._prepare()

    def _xid(self) -> str:
        return f"{self.stem}.{len(self.xids)}" + (f"-{self._moves}" if self._moves else "")

    def _prepare(self) -> None:
        while True:
            xid = self._xid()
            try:
                self.session.prepare(xid)
            except TransactionLost:
                self._again()
                continue
            break
        self.xids.append(xid)
        self._rows = self._size = 0
        self._sends.clear()
        self._moves = 0

    def _send_run(self) -> None:
        """Send the rows gathered for the current (target, ttl) in as few requests as fit."""
        if self._run:
            self._send(_Run(self._key[0], self._key[1], list(self._run)))
            self._run.clear()

    def _send(self, request: _Send) -> None:
        self._sends.append(request)
        try:
            self._request(request)
        except TransactionLost:
            self._again()

    def _request(self, request: _Send) -> None:
        if isinstance(request, _Run):
            self.session.send_many(request.target, request.items, ttl=request.ttl)
        else:
            self.session.send_many_framed(request.target, request.entries, request.data)

    def _again(self) -> None:
        """The connection moved during the chunk's transaction: send the chunk so far
        again on the node moved to (at most :data:`MOVES` times a chunk)."""
        while True:
            if self._moves == MOVES:
                raise TransactionLost(
                    f"the connection moved {MOVES} times during one chunk: giving up"
                )
            self._moves += 1
            log.warning(
                "chute sink: the connection moved to node %s during a transaction: "
                "sending its chunk again there",
                self.conn.node,
            )
            try:
                for request in self._sends:
                    self._request(request)
            except TransactionLost:
                continue
            return


def _item(body: bytes | str, fields: dict[str, Any]) -> bytes | str | Message:
    """A row as ``send_many`` takes it: its body alone when it sets no other field."""
    if not fields:
        return body
    if isinstance(body, str):
        return Message(body.encode(), kind=BodyKind.TEXT, **fields)
    return Message(body, **fields)


def xids_of(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
    return [xid for m in messages if isinstance(m, Staged) for xid in m.xids]


def roll_back(conn: BlockingConnection, xids: Sequence[str]) -> None:
    """Roll back what is still prepared (abort may follow a commit that published)."""
    for xid in xids:
        with contextlib.suppress(NotFound):
            conn.rollback_prepared(xid)


class ChuteStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("chute")``. ``commit``/``abort`` run on a fresh instance on
    the driver: everything they need is in the messages."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        return write_staged(self.options, query or "query", int(batch or 0), iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        xids = xids_of(messages)
        jobs = {m.job for m in messages if isinstance(m, Staged)}
        if not jobs:
            return
        (job,) = jobs
        with self.options.connect_retrying() as conn:
            if xids and not conn.commit_batch(job, batchId, xids, keep=True):
                log.warning("query %s batch %d had been committed: retry dropped", job, batchId)
            orphans = [x for x in conn.prepared() if _orphan(x, job, batchId, xids)]
            roll_back(conn, orphans)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        xids = xids_of(messages)
        if xids:
            with self.options.connect_retrying() as conn:
                roll_back(conn, xids)


class ChuteBatchWriter(DataSourceArrowWriter):
    """``df.write.format("chute")``: every task's rows become visible together, or none."""

    def __init__(self, options: ChuteOptions) -> None:
        self.options = options
        self.job = uuid.uuid4().hex  # made at planning: the same in every task and the commit

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        return write_staged(self.options, self.job, 0, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        xids = xids_of(messages)
        with self.options.connect_retrying() as conn:  # a backup may be taking over
            if xids:
                conn.commit_batch(self.job, 0, xids, keep=False)
            roll_back(conn, [x for x in conn.prepared() if _orphan(x, self.job, 0, xids)])

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Roll back the job's prepared transactions: those ``messages`` name and those of
        tasks that prepared but had not reported when Spark gave up on the job (a failed
        task ends the job at once, while its siblings may still be finishing)."""
        xids = xids_of(messages)
        with self.options.connect_retrying() as conn:
            roll_back(conn, [*xids, *(x for x in conn.prepared() if _orphan(x, self.job, 0, xids))])


def _orphan(xid: str, job: str, batch: int, kept: Sequence[str]) -> bool:
    """A prepared transaction of this query at or below ``batch`` that no commit names."""
    parts = xid.split("/")
    if len(parts) != 6 or parts[0] != PREFIX or parts[1] != job or xid in kept:
        return False
    return parts[2].isdigit() and int(parts[2]) <= batch
