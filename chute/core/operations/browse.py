"""Browsing a queue in pages: a walk in sequence order, bounded work per page.

Theory of operation
-------------------
A browse is a walk over one queue's messages by sequence number, after
Artemis' and RabbitMQ's page cursors. Each request says where the walk stands
(``after``: the last sequence number it covered, 0 at the start) and where it
ends (``before``: the queue's head, its next sequence number, when the walk
began). A page holds the held messages (waiting, in flight, and paged out to
the store) numbered ``after < seq < before``, lowest first, up to a bound in
messages and bytes; the walk goes on after the last one the page covered. The
broker keeps nothing between pages: the position is the whole cursor, so a
walk a client gives up costs nothing, and many walks cost only their pages.

What a walk guarantees:

* It shows each message at most once, in **sequence order** (the order the
  broker accepted them): priorities do not reorder a browse as they reorder
  delivery.
* A message held for the whole walk is shown; one that left (consumed,
  expired, dropped) before the walk reached it is not.
* A message sent after the walk began is not shown (its number is at or past
  ``before``), so a walk ends however fast producers send. One numbered
  before the walk began but placed later (a prepared transaction's send,
  committed during the walk) is shown if the walk has not passed its number.
* Messages in flight are shown with their delivery count so far.

Bounded work. Each lane of a queue is normally in sequence order, so a page
finds its place in a lane by bisection and takes at most ``max_messages``
from there; messages in flight are bounded by the consumers' credit. A queue
marks when a lane may have fallen out of order (``QueueChannel.out_of_order``:
a prepared send placed at its commit behind later ones, a message kept in
memory ahead of paged ones); then a page scans the lanes, O(waiting), and
clears the mark if they are in order again. Paged messages come from one
read of the store (:meth:`~chute.core.model.paging.Pager.peek`) sized to about
``max_bytes``.

A selector filters what a page returns, not what it covers: a page may hold
fewer messages than its bound, or none, and the walk still moves on and ends.

Pure: no sockets, no files (the store is the queue's). Used from the broker's
loop only.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Generator
from dataclasses import dataclass
from typing import Final

from chute.core.model.consumer import Entry, as_delivered
from chute.core.model.queue import QueueChannel
from chute.core.model.selector import Selector
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription

PAGE_MESSAGES: Final = 1000
"""The most messages one page covers (a request asking more gets this many)."""
STEP_MESSAGES: Final = 16
"""The most messages one step of a page covers (:func:`page_in_steps`): ~0.2 ms of the
loop's time for 1 KiB messages read from the journal."""
PAGE_BYTES: Final = 256 << 10
"""The most message bytes one page covers (a page holds at least one message). Small
enough that a page read from the journal is a few milliseconds of the loop's time
(1 MiB took 12-15 ms: bench/README.md), large enough that a walk is not all round
trips."""


@dataclass(frozen=True, slots=True)
class BrowsePage:
    """One page of a walk: what to show, and where the walk goes on."""

    entries: list[Entry]
    """The messages of the page that the selector (if any) matched, in sequence order."""
    after: int
    """The last sequence number the page covered: the next page's ``after``."""
    before: int
    """Where the walk ends: the next page's ``before``."""
    done: bool
    """Nothing is left to cover: the walk is over."""


def head(queue: QueueChannel) -> int:
    """The first sequence number ``queue`` has not given out yet (a walk's ``before``)."""
    return queue.topic.next_seq if isinstance(queue, Subscription) else queue.next_seq


def clamp(asked: int, most: int) -> int:
    """A page bound as the broker grants it: 0 (or less) asks for ``most``; never above."""
    return most if asked <= 0 else min(asked, most)


def browse_page(
    queue: QueueChannel,
    after: int = 0,
    before: int = 0,
    *,
    max_messages: int = PAGE_MESSAGES,
    max_bytes: int = PAGE_BYTES,
    selector: Selector | None = None,
) -> BrowsePage:
    """The page of ``queue`` after ``after``; ``before`` 0 starts a walk at the head now.

    ``max_messages`` and ``max_bytes`` are used as given (callers clamp them with
    :func:`clamp`); at least one message is covered, whatever its size.

    Raises:
        StoreError: the store cannot read paged messages now (try again).
    """
    return finish(
        page_in_steps(
            queue, after, before, max_messages=max_messages, max_bytes=max_bytes, selector=selector
        )
    )


def finish(steps: Generator[None, None, BrowsePage]) -> BrowsePage:
    """Take every step of a page at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            page: BrowsePage = done.value
            return page


def at_once(page: BrowsePage) -> Generator[None, None, BrowsePage]:
    """A page known already, as steps (there are none to take)."""
    yield from ()
    return page


def page_in_steps(
    queue: QueueChannel,
    after: int = 0,
    before: int = 0,
    *,
    max_messages: int = PAGE_MESSAGES,
    max_bytes: int = PAGE_BYTES,
    selector: Selector | None = None,
) -> Generator[None, None, BrowsePage]:
    """:func:`browse_page`'s page, built a step of at most :data:`STEP_MESSAGES` per
    ``next()``; the page is the generator's return value. Each step is a page of the
    same walk, so the walk's guarantees hold whatever happens to the queue between
    steps, and a caller on an event loop serves others between them: the page's
    cost is spread over turns (a 256 KiB page read from the journal is ~4 ms).

    Raises (from ``next()``):
        StoreError: the store cannot read paged messages now (try again).
    """
    if before <= 0:
        before = head(queue)
    max_messages = max(1, max_messages)
    entries: list[Entry] = []
    position = after
    covered = size = 0
    while True:
        step = _step(
            queue,
            position,
            before,
            max_messages=min(STEP_MESSAGES, max_messages - covered),
            max_bytes=max_bytes - size,
            selector=selector,
            first=not covered,
        )
        entries += step.entries
        position = step.position
        covered += step.covered
        size += step.size
        if not step.more or covered >= max_messages or not step.covered:
            done = not step.more or position + 1 >= before
            return BrowsePage(entries, position, before, done)
        yield


@dataclass(slots=True)
class _Step:
    entries: list[Entry]  # the ones the selector matched
    position: int  # the last sequence number covered
    covered: int  # how many messages the step covered
    size: int  # their bytes
    more: bool  # more may be left before the walk's end


def _step(
    queue: QueueChannel,
    after: int,
    before: int,
    *,
    max_messages: int,
    max_bytes: int,
    selector: Selector | None,
    first: bool,
) -> _Step:
    """Cover at most ``max_messages`` after ``after`` within ``max_bytes`` (the
    ``first`` step of a page covers one message whatever its size)."""
    if after + 1 >= before:
        return _Step([], after, 0, 0, False)
    held, more = _held(queue, after, before, max_messages)
    paged, more_paged = _paged(queue, after, before, held, most=max_messages, max_bytes=max_bytes)
    if paged:
        held = list(itertools.islice(heapq.merge(held, paged, key=_seq), max_messages + 1))
        if len(held) > max_messages:
            del held[max_messages:]
            more = True
    more = more or more_paged
    entries: list[Entry] = []
    size = covered = 0
    position = after
    for entry in held:
        message_size = entry.message.size
        if (covered or not first) and size + message_size > max_bytes:
            more = True
            break
        size += message_size
        covered += 1
        position = entry.seq
        if selector is None or selector.matches(as_delivered(entry)):
            entries.append(entry)
    return _Step(entries, position, covered, size, more)


def _held(queue: QueueChannel, after: int, before: int, most: int) -> tuple[list[Entry], bool]:
    """The lowest ``most`` entries held in memory (waiting or in flight) numbered
    ``after < seq < before``, in sequence order; and whether more may be there."""
    more = False
    found: list[list[Entry]] = []
    if queue.out_of_order:
        in_order = True
        for lane in queue.lanes:
            last = 0
            picked: list[Entry] = []
            for entry in lane:
                seq = entry.seq
                if seq < last:
                    in_order = False
                last = seq
                if after < seq < before:
                    picked.append(entry)
            picked.sort(key=_seq)
            if len(picked) > most:
                del picked[most:]
                more = True
            found.append(picked)
        if in_order:
            queue.out_of_order = False
    else:
        for lane in queue.lanes:
            if not lane or lane[-1].seq <= after:
                continue
            start = bisect.bisect_right(lane, after, key=_seq)
            taken = list(itertools.islice(lane, start, start + most))  # skips in C
            cut = bisect.bisect_left(taken, before, key=_seq)
            if cut < len(taken):
                del taken[cut:]
            elif start + most < len(lane):
                more = True
            found.append(taken)
    out = sorted((e for e in queue.sent_out() if after < e.seq < before), key=_seq)
    found.append(out)
    merged = list(itertools.islice(heapq.merge(*found, key=_seq), most + 1))
    if len(merged) > most:
        del merged[most:]
        more = True
    return merged, more


def _paged(
    queue: QueueChannel,
    after: int,
    before: int,
    held: list[Entry],
    *,
    most: int,
    max_bytes: int,
) -> tuple[list[Entry], bool]:
    """The paged messages the page may need, read from the store in one bounded read;
    and whether more may be there."""
    pager = queue.pager
    if not pager.count:
        return [], False
    top = pager.top_seq  # every paged message is numbered above it
    if len(held) >= most and held[-1].seq <= top:
        return [], True  # the page ends before the paged messages begin
    start = max(after, top)
    if start + 1 >= before:
        return [], False
    average = max(1, pager.size // pager.count)
    room = min(most, pager.count, max(1, max_bytes // average))
    read = pager.peek(start, room)
    more = len(read) >= room
    for i, entry in enumerate(read):
        if entry.seq >= before:
            del read[i:]
            more = False
            break
    return read, more


def _seq(entry: Entry) -> int:
    return entry.seq


def stream_page(  # noqa: PLR0917 - the walk's bounds, as browse_page takes them
    stream: Stream,
    after: int,
    before: int,
    max_messages: int,
    max_bytes: int,
    selector: Selector | None,
) -> BrowsePage:
    """One page of a browse of ``stream`` (offsets above ``after``, below ``before``; 0: its
    head), as :mod:`chute.core.operations.browse` walks a queue."""
    end = min(before, stream.head) if before > 0 else stream.head
    most = clamp(max_messages, PAGE_MESSAGES)
    nxt, entries = stream.read(
        after + 1, end, max_messages=most, max_bytes=clamp(max_bytes, PAGE_BYTES)
    )
    shown = [e for e in entries if selector is None or selector.matches(e.message)]
    covered = nxt - 1
    return BrowsePage(shown, covered, end, nxt >= end)
