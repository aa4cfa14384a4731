"""Where one queue's content blocks sit in one journal record, for a stream read.

A stream read (:func:`chute.store.pager.read_blocks`) sends each stored content block
on as it is. :func:`chute.store.heads.queue_blocks` looks at a record once and says
where its blocks are, as a :class:`BlockLayout`; later reads of the same record read
only the bytes their blocks need (:meth:`BlockLayout.extent`) and cut the blocks out
of them (:meth:`BlockLayout.blocks`).

An ADD's block is known by its :data:`BlockSpan`. A BATCH's messages (thousands in
one operation: a ``send_many``, a transaction's sends) are known only by where each
starts (:data:`BatchRun`): the first look walks their lengths and nothing else, and
each message's times and size are read from the bytes a page reads anyway, so a
record's first read does not pay up front for every message a page may never ask for.

Pure, no files. Raises only :class:`~chute.store.errors.CorruptRecord`.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from array import array
from collections.abc import Iterable, Sequence
from typing import Final

from chute.content import CONTENT_HEAD, content_size
from chute.core.model.store import StoredBlock
from chute.message import SIZE_OVERHEAD
from chute.store.errors import CorruptRecord
from chute.store.payload import BATCH_ITEM, DECODE_ERRORS

BlockSpan = tuple[int, int, int, int, int]
"""Where an add's content block sits: (timestamp, expiration, block start, block end,
``Message.size``)."""

BatchRun = tuple[int, "array[int]"]
"""The messages of one BATCH: the seq of its first, and the file position where each
one's item (:data:`~chute.store.payload.BATCH_ITEM`, then its content block) starts,
then where the last one ends (one more position than messages)."""

_ITEM: Final = BATCH_ITEM.size
_U32: Final = struct.Struct(">I")
_ITEM_AND_CONTENT: Final = struct.Struct(BATCH_ITEM.format + CONTENT_HEAD.format[1:])


@dataclasses.dataclass(slots=True)
class BlockLayout:
    """One queue's blocks in one record: ``spans`` by seq (its ADDs), ``runs`` (its
    BATCHes, in seq order, none overlapping). File positions throughout."""

    spans: dict[int, BlockSpan] = dataclasses.field(default_factory=dict)
    runs: list[BatchRun] = dataclasses.field(default_factory=list)

    def seqs(self) -> set[int]:
        """The seq of every block (tests and diagnostics)."""
        out = set(self.spans)
        for first, starts in self.runs:
            out.update(range(first, first + len(starts) - 1))
        return out

    def extent(self, seqs: Sequence[int]) -> tuple[int, int] | None:
        """The file range ``(start, end)`` that holds the blocks of ``seqs`` (ascending)
        this layout has; None if it has none of them."""
        low, high = -1, -1
        spans = self.spans
        if spans:
            for seq in seqs:
                span = spans.get(seq)
                if span is not None:
                    low = span[2] if low < 0 else min(low, span[2])
                    high = max(high, span[3])
        runs = self.runs
        if runs and seqs:  # the runs that may hold one of seqs (a record may hold many)
            at = max(0, bisect.bisect_right(runs, seqs[0], key=first_of) - 1)
            until = bisect.bisect_right(runs, seqs[-1], key=first_of)
            for first, starts in runs[at:until]:
                i = bisect.bisect_left(seqs, first)
                j = bisect.bisect_left(seqs, first + len(starts) - 1, lo=i)
                if i < j:
                    a, b = starts[seqs[i] - first], starts[seqs[j - 1] - first + 1]
                    low = a if low < 0 else min(low, a)
                    high = max(high, b)
        return None if low < 0 else (low, high)

    def blocks(self, seqs: Iterable[int], data: bytes, base: int, out: list[StoredBlock]) -> int:
        """Append the :data:`~chute.core.model.store.StoredBlock` of each of ``seqs``
        (ascending) to ``out``, cut out of ``data`` (the file's bytes from position
        ``base``, holding at least :meth:`extent`); returns how many of ``seqs`` this
        layout does not have.

        Raises:
            CorruptRecord: a batched message's item or content head is malformed.
        """
        spans, runs = self.spans, self.runs
        view = memoryview(data)
        missing = 0
        lo = hi = 0  # the seqs of the run at hand: [lo, hi)
        starts: array[int] = array("q")
        head = _ITEM_AND_CONTENT.unpack_from  # a batched message's item and content heads
        try:
            for seq in seqs:
                span = spans.get(seq) if spans else None
                if span is not None:
                    timestamp, expiration, a, b, size = span
                    out.append((seq, 0, 0, timestamp, expiration, view[a - base : b - base], size))
                    continue
                if not lo <= seq < hi:
                    run = _run_of(runs, seq)
                    if run is None:
                        missing += 1
                        continue
                    lo, starts = run
                    hi = lo + len(starts) - 1
                p = starts[seq - lo] - base
                timestamp, expiration, length, _, _, _, i, c, r, t, n_props = head(data, p)
                p += _ITEM
                if n_props:
                    size = content_size(data, p, p + length)
                else:  # sized from its head alone: block_size
                    body = length - _CONTENT_HEAD_SIZE - i - c - r - t
                    if body < 0:
                        raise IndexError("content runs past the message")
                    size = SIZE_OVERHEAD + body
                out.append((seq, 0, 0, timestamp, expiration, view[p : p + length], size))
        except DECODE_ERRORS as exc:
            raise CorruptRecord(f"malformed batched message: {exc}") from exc
        return missing


def _run_of(runs: list[BatchRun], seq: int) -> BatchRun | None:
    """The run that holds ``seq``, if any (``runs`` in seq order)."""
    i = bisect.bisect_right(runs, seq, key=first_of) - 1
    if i < 0:
        return None
    run = runs[i]
    return run if seq < run[0] + len(run[1]) - 1 else None


def first_of(run: BatchRun) -> int:
    """The seq of a run's first message (its sort key)."""
    return run[0]


_CONTENT_HEAD_SIZE: Final = CONTENT_HEAD.size
_content_head: Final = CONTENT_HEAD.unpack_from


def block_size(data: bytes, c: int, q: int) -> int:
    """The ``Message.size`` of the content block ``data[c:q]``: from its head alone when it
    has no properties.

    Raises:
        DECODE_ERRORS: the block is malformed.
    """
    _, _, _, id_len, corr_len, reply_len, type_len, n_props = _content_head(data, c)
    if n_props:
        return content_size(data, c, q)
    body: int = c + _CONTENT_HEAD_SIZE + id_len + corr_len + reply_len + type_len
    if body > q:
        raise IndexError("content runs past the message")
    return SIZE_OVERHEAD + q - body


def batch_run(data: bytes, r: int, q: int, first: int, count: int, *, base: int) -> BatchRun:
    """The :data:`BatchRun` of the ``count`` messages from ``first`` whose items fill
    ``data[r:q]``, its positions plus ``base``: only their lengths are read.

    Raises:
        DECODE_ERRORS: the items do not fill ``data[r:q]`` exactly.
    """
    starts = array("q", bytes(8 * (count + 1)))
    length_of = _U32.unpack_from
    at = _ITEM - 4  # the length is an item's last field
    for i in range(count):
        starts[i] = base + r
        r += _ITEM + length_of(data, r + at)[0]
    if r != q:
        raise ValueError("a batch's messages do not fill its operation")
    starts[count] = base + r
    return first, starts
