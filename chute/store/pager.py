"""Reading paged messages back from the journal's segments.

A paging queue (:mod:`chute.core.model.paging`) keeps nothing in memory for a
paged message: the journal's :class:`~chute.store.reclaim.LiveIndex` knows
where its live add record is, and :func:`read_paged` reads those records
back, in sequence order. A FIFO backlog's records sit one after another in
a segment, so one ``pread`` per segment fetches a whole window; a record
that the read-ahead cut short is read on its own.

A location can point at an ADD record or at a transaction's COMMIT (or
COMMIT_PREPARED, or a PREPARE committed in place) record holding the add among
its operations. Such a record
can hold thousands of messages (a transaction of 100,000 sends is one
record), so it is read and checked whole once, the positions of its adds are
remembered (:class:`TxLayouts`), and later windows read only the adds they
need. A message of a BATCH operation (:mod:`chute.store.payload`) is remembered
by its content block and times, and decoded from those alone.

A stream's read (:func:`read_blocks`) needs no message at all: it sends each
stored content block on as it is, so it only finds the blocks of its adds in
a record (:func:`~chute.store.heads.queue_blocks`, remembered per record and
queue in :class:`BlockLayouts`) and slices them out of the bytes read.

The caller holds the writer's ``index_lock`` (so no location moves and no
segment is deleted meanwhile) and the segments' ``lock``
(:class:`~chute.store.segments.Segments`).
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
from collections import OrderedDict
from typing import Final

from chute.core.model.store import StoredBlock, StoredMessage
from chute.message import Message
from chute.store.blocklayout import BlockLayout
from chute.store.errors import CorruptRecord
from chute.store.heads import op_add_keys, queue_blocks
from chute.store.payload import Names, decode_add, decode_batched
from chute.store.reclaim import SEGMENT_SHIFT, LiveIndex
from chute.store.record import HEADER, HEADER_SIZE, MAGIC, Kind, checksum
from chute.store.segment import segment_path

log = logging.getLogger(__name__)

_SLACK: Final = 64 << 10  # read this much past the last record's start, for its body
_OFFSET_MASK: Final = (1 << SEGMENT_SHIFT) - 1
_READ_MOST: Final = 64 << 20  # of one record in a window's read (a longer one: on its own)
_TX_KINDS: Final = frozenset({Kind.COMMIT, Kind.COMMIT_PREPARED, Kind.PREPARE})
"""The records whose operations may hold a live add (a PREPARE's, once committed in place)."""


Span = tuple[int, int, tuple[int, int] | None]
"""Where an add sits in a segment file: (start, end, times); with ``times`` None an ADD
payload, else a batched message's content block and its (timestamp, expiration)
(:data:`~chute.store.heads.AddKey`)."""

Layout = dict[tuple[int, str], Span]


class TxLayouts:
    """Where the adds of recently read transaction records sit:
    ``location -> {(seq, queue): span}``.

    A span is the add's (start, end) in the segment file. (One record can hold
    two adds of the same sequence number for different queues: compaction
    splits a fanned-out add whose queues know different delivery counts.) Records never change
    once written, so a layout stays true until its segment is deleted (and a
    paged message's location then moved: it is looked up afresh).
    """

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._layouts: OrderedDict[int, Layout] = OrderedDict()

    def get(self, location: int) -> Layout | None:
        layout = self._layouts.get(location)
        if layout is not None:
            self._layouts.move_to_end(location)
        return layout

    def put(self, location: int, layout: Layout) -> None:
        self._layouts[location] = layout
        while len(self._layouts) > self.capacity:
            self._layouts.popitem(last=False)


def read_paged(  # noqa: PLR0917 - the caller holds the locks these come from
    directory: str,
    index: LiveIndex,
    queue: str,
    after: int,
    limit: int,
    layouts: TxLayouts,
) -> list[StoredMessage]:
    """Up to ``limit`` live messages of ``queue`` numbered above ``after``, in order.

    A record that fails its check is logged and left out (it is damaged on
    disk; reading it again will not mend it).

    Raises:
        OSError: a segment cannot be read.
    """
    held = index.locations.get(queue)
    if not held or limit <= 0:
        return []
    wanted = list(itertools.islice(held.after(after), limit))
    counts = index.counts.get(queue) or {}
    reader = _Reader(queue, layouts)
    out: list[StoredMessage] = []
    for segment, group in itertools.groupby(wanted, key=lambda sl: sl[1] >> SEGMENT_SHIFT):
        picks = list(group)
        fd = os.open(segment_path(directory, segment), os.O_RDONLY | os.O_CLOEXEC)
        try:
            found = reader.segment(fd, segment, picks)
        finally:
            os.close(fd)
        out += [
            StoredMessage(seq, found[seq], counts.get(seq, 0)) for seq, _ in picks if seq in found
        ]
    return out


class _Reader:
    """One read-back: the records of one window, segment by segment."""

    def __init__(self, queue: str, layouts: TxLayouts) -> None:
        self.queue = queue
        self.layouts = layouts
        # the layouts this read-back uses: the shared cache may evict one before its
        # turn comes (a window can span more transaction records than it holds)
        self.mine: dict[int, Layout] = {}
        self.names = Names()

    def _layout(self, location: int) -> Layout | None:
        layout = self.mine.get(location)
        if layout is None:
            layout = self.layouts.get(location)
            if layout is not None:
                self.mine[location] = layout
        return layout

    def segment(self, fd: int, segment: int, picks: list[tuple[int, int]]) -> dict[int, Message]:
        """The messages of ``picks`` (seq, location), all in ``segment``, by seq."""
        found: dict[int, Message] = {}
        in_tx: dict[int, list[int]] = {}  # location of a transaction record -> seqs wanted
        plain = []
        for seq, location in picks:
            if self._layout(location) is not None:
                in_tx.setdefault(location, []).append(seq)
            else:
                plain.append((seq, location))
        if plain:
            low = min(loc & _OFFSET_MASK for _, loc in plain)
            high = max(loc & _OFFSET_MASK for _, loc in plain)
            chunk = os.pread(fd, high - low + _SLACK, low)
            for seq, location in plain:
                if location in in_tx:  # a transaction record met earlier in this window
                    in_tx[location].append(seq)
                    continue
                message = self._record(fd, chunk, low, segment, location, seq)
                if message is not None:
                    found[seq] = message
                elif self._layout(location) is not None:
                    in_tx.setdefault(location, []).append(seq)
        for location, seqs in in_tx.items():
            found.update(self._from_layout(fd, segment, location, seqs))
        return found

    def _record(  # noqa: PLR0917 - private
        self, fd: int, chunk: bytes, low: int, segment: int, location: int, seq: int
    ) -> Message | None:
        """The add of ``seq`` at ``location``: an ADD record's message, or None (a
        transaction record's layout is then remembered, for the caller to read from)."""
        offset = location & _OFFSET_MASK
        p = offset - low
        if p + HEADER_SIZE > len(chunk):
            chunk, p = os.pread(fd, HEADER_SIZE, offset), 0
        magic, crc, length, kind = HEADER.unpack_from(chunk, p)
        start, end = p + HEADER_SIZE, p + HEADER_SIZE + length
        if end > len(chunk):  # the read-ahead cut the record short: read it whole
            chunk, p = os.pread(fd, HEADER_SIZE + length, offset), 0
            start, end = HEADER_SIZE, HEADER_SIZE + length
        payload = memoryview(chunk)[start:end]
        if (
            magic != MAGIC
            or len(payload) != length
            or checksum(segment, offset, kind, payload) != crc
        ):
            log.error("journal: paged record at segment %d offset %d is damaged", segment, offset)
            return None
        try:
            if kind == Kind.ADD:
                op, _ = decode_add(chunk, start, end, self.names)
                if op.seq == seq and self.queue in op.queues:
                    return op.message
                log.error(
                    "journal: segment %d offset %d holds add #%d, not %s #%d",
                    segment,
                    offset,
                    op.seq,
                    self.queue,
                    seq,
                )
                return None
            if kind in _TX_KINDS:
                base = offset - p  # the file position of chunk[0]
                keys = op_add_keys(kind, chunk, start, end, self.names)
                layout = {
                    (s, q): (base + a, base + b, times)
                    for s, queues, a, b, times in keys
                    for q in queues
                }
                self.layouts.put(location, layout)
                self.mine[location] = layout
                return None
        except CorruptRecord as exc:
            log.error("journal: paged record at segment %d offset %d: %s", segment, offset, exc)
            return None
        log.error(
            "journal: segment %d offset %d holds no add of %s #%d", segment, offset, self.queue, seq
        )
        return None

    def _from_layout(
        self, fd: int, segment: int, location: int, seqs: list[int]
    ) -> dict[int, Message]:
        layout = self.mine.get(location) or {}
        queue = self.queue
        spans = [(seq, layout[seq, queue]) for seq in seqs if (seq, queue) in layout]
        if not spans:
            return {}
        low = min(span[0] for _, span in spans)
        high = max(span[1] for _, span in spans)
        chunk = os.pread(fd, high - low, low)
        found: dict[int, Message] = {}
        for seq, (a, b, times) in spans:
            try:
                if times is not None:  # a message of a batch: the layout says it is seq's
                    found[seq] = decode_batched(chunk, a - low, b - low, times)
                    continue
                op, _ = decode_add(chunk, a - low, b - low, self.names)
            except CorruptRecord as exc:
                log.error("journal: segment %d: add #%d in a transaction: %s", segment, seq, exc)
                continue
            if op.seq != seq:  # never expected: the layout would be wrong
                log.error(
                    "journal: segment %d: add #%d read where #%d was due", segment, op.seq, seq
                )
            elif self.queue in op.queues:
                found[seq] = op.message
        return found


class BlockLayouts:
    """Where one queue's content blocks sit in recently read records:
    ``(location, queue) -> BlockLayout`` (file positions), as :class:`TxLayouts`."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._layouts: OrderedDict[tuple[int, str], BlockLayout] = OrderedDict()

    def get(self, location: int, queue: str) -> BlockLayout | None:
        layout = self._layouts.get((location, queue))
        if layout is not None:
            self._layouts.move_to_end((location, queue))
        return layout

    def put(self, location: int, queue: str, layout: BlockLayout) -> None:
        self._layouts[location, queue] = layout
        while len(self._layouts) > self.capacity:
            self._layouts.popitem(last=False)


def read_blocks(  # noqa: PLR0917 - the caller holds the locks these come from
    directory: str,
    index: LiveIndex,
    queue: str,
    after: int,
    limit: int,
    layouts: BlockLayouts,
) -> list[StoredBlock]:
    """:func:`read_paged`'s messages as their stored content blocks (delivery count 0, not
    redelivered), none decoded. A damaged record is logged and left out.

    Raises:
        OSError: a segment cannot be read.
    """
    held = index.locations.get(queue)
    if not held or limit <= 0:
        return []
    seqs, locations = held.window(after, limit)
    if not seqs:
        return []
    runs: list[tuple[int, list[int]]]  # (location, its seqs): one record each, in seq order
    if len(set(locations)) == 1:  # one record (a batch, a transaction): the usual read
        runs = [(locations[0], seqs)]
    else:
        runs = [
            (location, [seq for seq, _ in run])
            for location, run in itertools.groupby(
                zip(seqs, locations, strict=True), key=operator.itemgetter(1)
            )
        ]
    out: list[StoredBlock] = []
    for segment, group in itertools.groupby(runs, key=_segment_of):
        fd = os.open(segment_path(directory, segment), os.O_RDONLY | os.O_CLOEXEC)
        try:
            _segment_blocks(fd, segment, list(group), queue, layouts, out)
        finally:
            os.close(fd)
    return out


def _segment_of(run: tuple[int, list[int]]) -> int:
    return run[0] >> SEGMENT_SHIFT


def _segment_blocks(  # noqa: PLR0917 - private
    fd: int,
    segment: int,
    runs: list[tuple[int, list[int]]],
    queue: str,
    layouts: BlockLayouts,
    out: list[StoredBlock],
) -> None:
    """Append the blocks of ``runs`` ((location, its seqs), all in ``segment``) to ``out``.

    Each record is looked at once, the ones not met recently read with one ``pread``
    for all."""
    # the layouts this read uses: the shared cache may evict one before its turn comes
    mine = {loc: layouts.get(loc, queue) for loc, _ in runs}
    unknown = [loc & _OFFSET_MASK for loc, layout in mine.items() if layout is None]
    chunk, low = b"", 0
    if unknown:
        low, last = min(unknown), max(unknown)
        head = os.pread(fd, HEADER_SIZE, last)
        length = 0
        if len(head) == HEADER_SIZE:
            magic, _, length, _ = HEADER.unpack(head)
            length = length if magic == MAGIC else 0
        # up to the end of the last record, unless it is too long to read with the others
        # (then on its own, by _record_blocks)
        size = last - low + (HEADER_SIZE + length if length <= _READ_MOST else 0)
        chunk = os.pread(fd, size, low)
    for location, seqs in runs:
        layout = mine[location]
        if layout is None:
            read = _record_blocks(fd, chunk, low, segment, location, queue)
            if read is None:
                continue
            layout, data, base = read
            mine[location] = layout
            layouts.put(location, queue, layout)
        else:
            extent = layout.extent(seqs)
            base, end = extent or (0, 0)
            data = os.pread(fd, end - base, base) if extent else b""
        try:
            missing = layout.blocks(seqs, data, base, out)
        except CorruptRecord as exc:  # never expected: the record's checksum was right
            log.error("journal: segment %d offset %d: %s", segment, location & _OFFSET_MASK, exc)
            continue
        if missing:  # never expected: the index and the record disagree
            log.error(
                "journal: segment %d offset %d holds no add of %s for %d of its messages",
                segment,
                location & _OFFSET_MASK,
                queue,
                missing,
            )


def _record_blocks(  # noqa: PLR0917 - private
    fd: int, chunk: bytes, low: int, segment: int, location: int, queue: str
) -> tuple[BlockLayout, bytes, int] | None:
    """The layout of ``queue``'s blocks in the record at ``location``, checked, with the
    bytes that hold it and their file position; None if it is damaged (logged)."""
    offset = location & _OFFSET_MASK
    p = offset - low
    if p + HEADER_SIZE > len(chunk):
        chunk, p = os.pread(fd, HEADER_SIZE, offset), 0
    magic, crc, length, kind = HEADER.unpack_from(chunk, p)
    start, end = p + HEADER_SIZE, p + HEADER_SIZE + length
    if end > len(chunk):  # the read-ahead cut the record short: read it whole
        chunk, p = os.pread(fd, HEADER_SIZE + length, offset), 0
        start, end = HEADER_SIZE, HEADER_SIZE + length
    payload = memoryview(chunk)[start:end]
    if magic != MAGIC or len(payload) != length or checksum(segment, offset, kind, payload) != crc:
        log.error("journal: paged record at segment %d offset %d is damaged", segment, offset)
        return None
    if kind != Kind.ADD and kind not in _TX_KINDS:
        log.error("journal: segment %d offset %d holds no add of %s", segment, offset, queue)
        return None
    base = offset - p  # the file position of chunk[0]
    try:
        return queue_blocks(kind, chunk, start, end, queue, base), chunk, base
    except CorruptRecord as exc:
        log.error("journal: paged record at segment %d offset %d: %s", segment, offset, exc)
        return None
