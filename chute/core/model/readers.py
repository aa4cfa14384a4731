"""A stream's readers: a consumer reads a stream through a queue of its own.

A :class:`StreamReader` is fed from its position in the stream, a window at a
time (:data:`WINDOW` messages, or the consumer's prefetch if larger), as its
consumer's credit allows; acks only make room in the window. It records
nothing (the stream's messages are in the store already) and is gone with its
consumer. Where it starts is the stream's business
(:meth:`Stream.locate <chute.core.model.stream.Stream.locate>`); the stream wakes its
readers when messages arrive and takes back from them what the store refused.

What a reader needs of its stream is :class:`ReadStream`. Pure: no sockets, no
files. Used from the broker's loop only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final, Protocol

from chute.core.model.consumer import Entry
from chute.core.model.lanes import merge_into
from chute.core.model.paging import held_cost
from chute.core.model.queue import QueueChannel, QueueHost
from chute.core.model.selector import Selector
from chute.core.model.settings import DestinationSettings

WINDOW: Final = 256
"""How many messages a reader holds at most (waiting and in flight) beyond its consumer's credit."""


class ReadStream(Protocol):
    """What a reader needs of the stream it reads (:class:`~chute.core.model.stream.Stream` is
    the one implementation)."""

    @property
    def address(self) -> str: ...

    @property
    def settings(self) -> DestinationSettings: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def readers(self) -> list[StreamReader]:
        """The stream's readers: a reader leaves the list when it closes."""

    def leave(self, reader: StreamReader) -> None:
        """``reader`` closed: drop it from :attr:`readers`, keeping what it counted."""

    @property
    def first(self) -> int:
        """The oldest offset kept."""

    @property
    def head(self) -> int:
        """The first offset a reader may not read yet."""

    def read(
        self, start: int, end: int, *, max_messages: int = 0, max_bytes: int = 0
    ) -> tuple[int, list[Entry]]:
        """The messages with offsets in ``[start, end)``, at most a page; returns
        ``(next start, entries)``."""


class StreamReader(QueueChannel):
    """A consumer's own queue on a stream: fed from its position as credit allows.

    Not durable: it records nothing (the stream's messages are in the store
    already) and is gone with its consumer. Every message it feeds waits in one
    lane, so delivery follows the offsets whatever the priorities.
    """

    def __init__(  # noqa: PLR0917 - all of them make a reader
        self,
        key: str,
        stream: ReadStream,
        position: int,
        host: QueueHost,
        prefetch: int,
        selector: Selector | None = None,
    ) -> None:
        # the stream's retention bounds the stream, not its readers
        own = dataclasses.replace(stream.settings, max_messages=0, max_bytes=0, max_age_ms=0)
        super().__init__(key, stream.address, own, host, durable=False)
        self.stream = stream
        self.position = position
        self.window = max(WINDOW, prefetch)
        self.selector = selector

    def close(self) -> None:
        """Its consumer closed: leave the stream and give back what it held."""
        self.stream.leave(self)
        self.deleted = True
        self.host.memory.used -= sum(held_cost(e.message) for e in self.drain())

    def _deliver(self) -> None:
        self.fill()
        super()._deliver()

    def fill(self) -> None:
        """Take the next messages from the stream while the window has room."""
        stream = self.stream
        if stream.deleted:
            return
        room = self.window - self.held
        if room * 2 < self.window:
            return
        # retention may have removed what it had not read yet
        self.position = max(self.position, stream.first)
        head = stream.head
        budget = 16 * self.window  # messages a selective reader looks at per fill
        selector = self.selector
        while room > 0 and budget > 0 and self.position < head:
            nxt, entries = stream.read(self.position, head, max_messages=min(room, budget))
            budget -= len(entries)
            for entry in entries:
                if selector is None or selector.matches(entry.message):
                    self.feed(Entry(entry.seq, entry.message))
                    room -= 1
            self.position = nxt
            if not entries:
                break

    def feed(self, entry: Entry) -> None:
        """One message in the single lane (as ``place`` does, without a push)."""
        size = entry.message.size
        self.held += 1
        self.held_bytes += size
        self.enqueued += 1
        self.host.memory.used += held_cost(entry.message)
        self._lanes[0].append(entry)
        self.ready += 1

    def _to_lanes(self, entries: Iterable[Entry]) -> None:
        """Entries given back (a nack, a closed consumer's) wait in the one lane too, in
        offset order."""
        returned = sorted(entries, key=_seq)
        if returned:
            merge_into(self._lanes[0], returned)
            self.ready += len(returned)

    def __repr__(self) -> str:
        return f"StreamReader({self.name!r}, position={self.position}, held={self.held})"


def _seq(entry: Entry) -> int:
    return entry.seq
