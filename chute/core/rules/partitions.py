"""Streams with partitions: which partition a send goes to, and readers of a partition
or of them all.

Theory of operation
-------------------
A stream with ``partitions = N`` (N > 1) is N streams: partition 0 is the stream itself
(``stream:orders``, so a stream that gains partitions keeps what it had there, offsets
and all), partition ``i`` the stream ``stream:orders#i``. Each is a
:class:`~chute.core.model.stream.Stream` of its own, with its own offsets, retention,
store records and, in a cluster, its own home; nothing here looks inside one.

Sends. A message sent to the stream goes to the partition its key picks (the string
property ``key``: CRC-32 of its UTF-8 bytes, modulo N), or without a key to the next
partition in turn (round robin per stream). A message handed over by another node of a
cluster, or one sent to a partition's own address, stays where it was sent.

Reads. A reader of one partition (``stream:orders#2``) reads it as any stream; each
message it hands on says its partition and offset (:data:`PARTITION_PROPERTY`,
:data:`OFFSET_PROPERTY`). A reader of the whole stream reads every partition, in order
within each, taking from the partitions in turn: its messages carry the same two
properties, and its ``seq`` numbers its deliveries (the acks' identity), since offsets
repeat across partitions. A start (``first``, ``next``, an offset, a time) applies to
each partition.

Pure: no sockets, no files. Used from the broker's loop only.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from chute.core.model.address import partition_address, split_partition
from chute.core.model.consumer import Entry
from chute.core.model.offsets import Offset
from chute.core.model.queue import QueueHost
from chute.core.model.readers import StreamReader
from chute.core.model.selector import Selector
from chute.core.model.settings import DestinationSettings
from chute.core.model.stream import Stream
from chute.errors import InvalidAddress
from chute.message import Int, Message

PARTITION_PROPERTY: Final = "x-stream-partition"
"""The property a stream with partitions' readers set on what they hand on: its partition."""
OFFSET_PROPERTY: Final = "x-stream-offset"
"""The property a stream with partitions' readers set on what they hand on: its offset."""


class PartitionsHost(QueueHost, Protocol):
    """What partitions need of the broker."""

    def destination(self, address: str, *, create: bool | None = None) -> object:
        """The destination at ``address``, made if allowed (``create`` True: by the broker)."""

    @property
    def settings(self) -> Callable[[str], DestinationSettings]:
        """The settings of an address."""


def partition_count(stream: Stream) -> int:
    """How many partitions ``stream`` has (1 for a partition itself)."""
    return 1 if "#" in stream.address else stream.settings.partitions


def pick(key: str | None, count: int, turn: int) -> int:
    """The partition of a message with ``key`` among ``count`` (``turn``: the round robin's
    count of keyless sends so far)."""
    if count <= 1:
        return 0
    if key is None:
        return turn % count
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % count


def tagged(message: Message, partition: int, offset: int) -> Message:
    """A copy of ``message`` saying its partition and offset (the stored one never changes)."""
    properties = dict(message.properties)
    properties[PARTITION_PROPERTY] = Int(partition)
    properties[OFFSET_PROPERTY] = offset
    return message.replace(properties=properties)


class Partitions:
    """The broker's partitioned streams: routing sends, making readers."""

    def __init__(self, host: PartitionsHost) -> None:
        self.host = host
        self._turns: dict[str, int] = {}

    def check(self, address: str) -> None:
        """Raises InvalidAddress unless ``address`` names a partition its stream has."""
        base, partition = split_partition(address)
        count = self._settings_count(base)
        if partition >= count:
            raise InvalidAddress(
                f"{address} is not a partition of {base}, which has {count} (0-{count - 1})"
            )

    def _settings_count(self, base: str) -> int:
        return self.host.settings(base).partitions

    def of(self, stream: Stream) -> list[Stream]:
        """Every partition of ``stream``, from 0 (made here if need be)."""
        found = [stream]
        for partition in range(1, partition_count(stream)):
            part = self.host.destination(partition_address(stream.address, partition), create=True)
            if not isinstance(part, Stream):  # pragma: no cover - a partition's address
                raise InvalidAddress(f"{part!r} is not a stream")
            found.append(part)
        return found

    def target(self, stream: Stream, message: Message) -> Stream:
        """The partition of ``stream`` that takes ``message`` (``stream`` itself if it has
        one partition)."""
        count = partition_count(stream)
        if count <= 1:
            return stream
        key = message.key
        turn = 0
        if key is None:
            turn = self._turns.get(stream.address, 0)
            self._turns[stream.address] = turn + 1
        partition = pick(key, count, turn)
        if partition == 0:
            return stream
        part = self.host.destination(partition_address(stream.address, partition), create=True)
        assert isinstance(part, Stream)  # noqa: S101 - a partition's address is a stream's
        return part

    def reader(
        self,
        key: str,
        stream: Stream,
        start: Offset,
        prefetch: int,
        selector: Selector | None,
    ) -> StreamReader:
        """A reader of ``stream`` from ``start``: of every partition if it has several, of
        the one it is if it is a partition, else (one partition) as ever."""
        if partition_count(stream) > 1:
            parts = self.of(stream)
            return WholeReader(
                key, parts, [p.locate(start) for p in parts], self.host, prefetch, selector
            )
        _, partition = split_partition(stream.address)
        reader: StreamReader
        if partition:
            reader = PartitionReader(
                key, stream, partition, stream.locate(start), self.host, prefetch, selector
            )
        else:
            reader = StreamReader(key, stream, stream.locate(start), self.host, prefetch, selector)
        stream.readers.append(reader)
        return reader


class PartitionReader(StreamReader):
    """A reader of one partition (other than 0): what it hands on says its partition."""

    def __init__(  # noqa: PLR0917 - all of them make a reader
        self,
        key: str,
        stream: Stream,
        partition: int,
        position: int,
        host: QueueHost,
        prefetch: int,
        selector: Selector | None = None,
    ) -> None:
        super().__init__(key, stream, position, host, prefetch, selector)
        self.partition = partition

    def feed(self, entry: Entry) -> None:
        super().feed(Entry(entry.seq, tagged(entry.message, self.partition, entry.seq)))


class _Feeder(StreamReader):
    """A whole reader's place in one partition: registered with that partition's stream,
    so the stream wakes it, and waking it wakes the whole reader. It holds nothing."""

    def __init__(self, whole: WholeReader, partition: int, stream: Stream, position: int) -> None:
        super().__init__(f"{whole.name}#{partition}", stream, position, whole.host, 1)
        self.whole = whole
        self.partition = partition
        self.router = whole.router  # the stream wakes a reader with consumers only

    def deliver(self) -> None:
        self.whole.deliver()

    def fill(self) -> None:
        """The whole reader fills."""


class WholeReader(StreamReader):
    """A reader of every partition of a stream: see the module docstring."""

    def __init__(  # noqa: PLR0917 - all of them make a reader
        self,
        key: str,
        parts: Sequence[Stream],
        positions: Sequence[int],
        host: QueueHost,
        prefetch: int,
        selector: Selector | None = None,
    ) -> None:
        super().__init__(key, parts[0], positions[0], host, prefetch, selector)
        self.feeders = [
            _Feeder(self, i, part, position)
            for i, (part, position) in enumerate(zip(parts, positions, strict=True))
        ]
        for feeder in self.feeders:
            feeder.stream.readers.append(feeder)
        self.delivered_count = 0

    def close(self) -> None:
        for feeder in self.feeders:
            feeder.stream.leave(feeder)
            feeder.deleted = True
        super().close()

    def fill(self) -> None:
        """Take the next messages from the partitions in turn while the window has room."""
        room = self.window - self.held
        if room * 2 < self.window:
            return
        budget = 16 * self.window  # messages a selective reader looks at per fill
        share = max(1, self.window // len(self.feeders))
        selector = self.selector
        progressed = True
        while progressed and room > 0 and budget > 0:
            progressed = False
            for feeder in self.feeders:
                stream = feeder.stream
                if room <= 0 or budget <= 0:
                    break
                if stream.deleted:
                    continue
                feeder.position = max(feeder.position, stream.first)
                head = stream.head
                if feeder.position >= head:
                    continue
                limit = min(room, budget, share)
                nxt, entries = stream.read(feeder.position, head, max_messages=limit)
                budget -= len(entries)
                for entry in entries:
                    if selector is None or selector.matches(entry.message):
                        self.delivered_count += 1
                        message = tagged(entry.message, feeder.partition, entry.seq)
                        self.feed(Entry(self.delivered_count, message))
                        room -= 1
                feeder.position = nxt
                progressed = progressed or bool(entries)

    def __repr__(self) -> str:
        positions = [f.position for f in self.feeders]
        return f"WholeReader({self.name!r}, positions={positions}, held={self.held})"
