"""Received: a delivered message plus what it takes to acknowledge it."""

from __future__ import annotations

from typing import Protocol

from chute.message import BodyKind, Message, PropertyValue


class Acknowledger(Protocol):
    """What a received message acks through: its consumer's deliveries, by ``seq``.

    Each client has its own (the blocking and asyncio drivers, the dropbox
    client); one is made per consumer.
    """

    def ack(self, seq: int) -> None: ...

    def nack(self, seq: int, requeue: bool) -> None: ...


class ConsumerLink(Protocol):
    """A link that acks for its consumers (the blocking and the asyncio driver)."""

    def ack(self, consumer_id: int, seq: int) -> None: ...

    def nack(self, consumer_id: int, seq: int, requeue: bool) -> None: ...


class LinkAcks:
    """A consumer's :class:`Acknowledger` on a broker client: its link, told which
    consumer acks."""

    __slots__ = ("consumer_id", "link")

    def __init__(self, link: ConsumerLink, consumer_id: int) -> None:
        self.link = link
        self.consumer_id = consumer_id

    def ack(self, seq: int) -> None:
        self.link.ack(self.consumer_id, seq)

    def nack(self, seq: int, requeue: bool) -> None:
        self.link.nack(self.consumer_id, seq, requeue)


class Received:
    """A message handed to the application by a consumer.

    Reads like a :class:`~chute.message.Message` (``body``, ``properties``,
    ``priority``, ``redelivered``, ...; the message itself is ``message``) and
    knows its delivery: ``seq`` is its ack identity within the consumer.
    ``ack()`` and ``nack()`` never block: they queue a packet for the broker, and
    a failure surfaces from a later call. Safe to use from any thread.
    """

    __slots__ = ("_acks", "message", "seq")

    def __init__(self, message: Message, seq: int, acks: Acknowledger) -> None:
        self.message = message
        self.seq = seq
        self._acks = acks

    def ack(self) -> None:
        """Acknowledge: this message and, in ``client`` ack mode, every earlier one of
        its consumer. A no-op in ``auto`` mode and in transacted sessions.

        Raises:
            ConnectError: the connection is gone.
            ConsumerError: the consumer is closed.
        """
        self._acks.ack(self.seq)

    def nack(self, requeue: bool = True) -> None:
        """Refuse this message: requeue it for redelivery, or (``requeue=False``) reject it
        to the dead-letter queue.

        Raises:
            ConnectError: the connection is gone.
            ConsumerError: the consumer is closed.
        """
        self._acks.nack(self.seq, requeue)

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def properties(self) -> dict[str, PropertyValue]:
        return self.message.properties

    @property
    def key(self) -> str | None:
        """The message's key (the string property ``key``), or None."""
        return self.message.key

    @property
    def offset(self) -> int:
        """A stream's message: its offset in its partition (on a reader of every partition
        of a stream with several, where ``seq`` numbers the deliveries, its
        ``x-stream-offset`` property; elsewhere ``seq``)."""
        properties = self.message.properties
        if "x-stream-partition" not in properties:
            return self.seq
        return int(properties.get("x-stream-offset", self.seq))

    @property
    def partition(self) -> int:
        """A stream's message: its partition (its ``x-stream-partition`` property; 0 on a
        stream with one)."""
        return int(self.message.properties.get("x-stream-partition", 0))

    @property
    def priority(self) -> int:
        return self.message.priority

    @property
    def timestamp(self) -> int:
        return self.message.timestamp

    @property
    def expiration(self) -> int:
        return self.message.expiration

    @property
    def correlation_id(self) -> str | None:
        return self.message.correlation_id

    @property
    def reply_to(self) -> str | None:
        return self.message.reply_to

    @property
    def type(self) -> str | None:
        return self.message.type

    @property
    def persistent(self) -> bool:
        return self.message.persistent

    @property
    def redelivered(self) -> bool:
        return self.message.redelivered

    @property
    def delivery_count(self) -> int:
        return self.message.delivery_count

    @property
    def kind(self) -> BodyKind:
        return self.message.kind

    def __repr__(self) -> str:
        return f"Received(seq={self.seq}, {self.message!r})"
