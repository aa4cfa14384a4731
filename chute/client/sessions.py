"""The sessions and consumers of one client connection: buffers, credit and acks.

Theory of operation
-------------------
Session and consumer ids come from one counter per connection, so a target
id never names both (docs/protocol.md). A consumer buffers what the broker
delivered until the application *takes* it (``receive``); taking, not
acking, is what returns credit:

* a consumer opens with ``prefetch`` credits; each message taken adds one to
  the credit owed back;
* the credit goes back with the next ack (one ``Ack`` packet acks and refills
  the window), or on its own once half the window is taken, or before the
  application blocks on an empty buffer (:meth:`Sessions.before_wait`), so an
  application that acks in batches larger than the window never stalls;
* in ``auto`` mode, taking *is* acknowledging: the same packet is a
  cumulative ``Ack`` of everything taken so far, and a taken message cannot be
  nacked;
* in a transacted session taking acknowledges too, but the cumulative ``Ack``
  waits for the commit, rollback or prepare (:meth:`Sessions.settle_session`)
  or the consumer's close, and names the last message taken that was not
  nacked: a nack in a transaction is the broker's to decide at commit.

One-way failures come back later: an ``Error`` targeted at a session or a
consumer is kept on it and raised by its next call (:meth:`Sessions.session`,
:meth:`Sessions.take`); once the connection failed, every call raises that.
A ``destination-deleted`` error means the broker closed the consumer (its
destination was deleted): the consumer closes here too, what it buffered is
dropped (it went with the destination), and its next take raises the error
once; later ones find it closed.

The packets this decides (``Ack``, ``Credit``, ``Nack``) go out through the
``emit`` callable the owner gives; nothing here encodes or waits.
Not thread-safe: part of :class:`~chute.client.protocol.ClientProtocol`,
whose driver serialises calls.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from chute.client.received import Acknowledger, Received
from chute.errors import ChuteError, ConsumerError, DestinationDeleted
from chute.message import Message
from chute.protocol.packets import Ack, Credit, Nack, Packet, SessionAckMode

Emit = Callable[[Packet], None]
"""Queues a one-way packet for the broker."""


class ConsumerOptions(NamedTuple):
    """What a consumer is opened with besides its address: ``consumer``'s keyword
    arguments (:meth:`chute.client.api.Session.consumer` documents each), as one
    value from the session through the link to :meth:`ClientProtocol.open_consumer
    <chute.client.protocol.ClientProtocol.open_consumer>`."""

    selector: str | None = None
    prefetch: int = 100
    exclusive: bool = False
    subscription: str | None = None
    durable: bool = False
    shared: bool = False
    offset: str | int | None = None


@dataclass(slots=True)
class SessionState:
    id: int
    ack_mode: SessionAckMode
    transacted: bool
    consumers: set[int] = field(default_factory=set)
    error: ChuteError | None = None
    """A one-way failure (a refused Send), raised by the session's next call."""
    closed: bool = False


@dataclass(slots=True)
class ConsumerState:
    id: int
    session: SessionState
    prefetch: int
    owner: Acknowledger
    """What the consumer's messages ack through (the driver's acknowledger)."""
    buffer: deque[Received] = field(default_factory=deque)
    pending_credit: int = 0
    """Messages taken since credit was last returned."""
    taken: list[int] = field(default_factory=list)
    """seqs taken and not yet acked, in delivery order (only where taking acks: the
    last one is what the next cumulative ack names)."""
    error: ChuteError | None = None
    """A failure the broker reported for this consumer, raised by the next take."""
    refill: int = field(init=False)
    """Credit is returned once this many messages are taken (half the window)."""
    acks_by_taking: bool = field(init=False)
    """Taking a message acks it (auto mode, transacted sessions)."""
    acks_at_refill: bool = field(init=False)
    """Returning credit also acks what was taken (auto mode outside a transaction). A
    transacted session acks at commit, rollback, prepare or close instead, so that a
    nack in the transaction never meets a message already acked in it."""

    def __post_init__(self) -> None:
        self.refill = max(1, self.prefetch // 2)
        self.acks_by_taking = (
            self.session.ack_mode is SessionAckMode.AUTO or self.session.transacted
        )
        self.acks_at_refill = self.acks_by_taking and not self.session.transacted


class Sessions:
    """Every open session and consumer of one connection. Not thread-safe."""

    __slots__ = ("_consumers", "_emit", "_ended", "_ids", "by_id", "failure", "woken")

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._ids = itertools.count(1)
        self.by_id: dict[int, SessionState] = {}
        """The open sessions by id: read it (the send path's lookup), never change it."""
        self._consumers: dict[int, ConsumerState] = {}
        self._ended: dict[int, ChuteError] = {}  # closed by the broker, error not yet raised
        self.failure: ChuteError | None = None
        """Set once the connection failed: what every later call raises."""
        self.woken: set[int] = set()
        """Consumers :meth:`deliver` buffered something for; the owner empties it."""

    # -- sessions ---------------------------------------------------------------------

    def open_session(self, ack_mode: SessionAckMode, transacted: bool) -> SessionState:
        session_id = next(self._ids)
        session = self.by_id[session_id] = SessionState(session_id, ack_mode, transacted)
        return session

    def session(self, session_id: int) -> SessionState:
        """The open session, after raising any error deferred to it.

        Raises:
            ConnectError: the connection failed.
            ConsumerError: the session is closed.
            ChuteError: a one-way send of this session failed earlier (raised once).
        """
        if self.failure is not None:
            raise self.failure
        session = self.by_id.get(session_id)
        if session is None or session.closed:
            raise ConsumerError(f"session {session_id} is closed")
        if session.error is not None:
            error, session.error = session.error, None
            raise error
        return session

    def close_session(self, session_id: int) -> bool:
        """Close the session and its consumers (their owed credit and acks go out first).
        False if it was closed already or the connection failed."""
        session = self.by_id.pop(session_id, None)
        if session is None or session.closed or self.failure is not None:
            return False
        for consumer_id in list(session.consumers):
            self.drop_consumer(consumer_id)
        session.closed = True
        return True

    def session_consumers(self, session_id: int) -> list[int]:
        """Ids of the session's open consumers (to wake their waiters on close)."""
        session = self.by_id.get(session_id)
        return list(session.consumers) if session is not None else []

    def settle_session(self, session: SessionState) -> None:
        """Ack and return credit for what the session's consumers took (before a commit)."""
        for consumer_id in session.consumers:
            self._settle(self._consumers[consumer_id])

    def settle_all(self) -> None:
        """Ack and return credit for what every consumer took (before a disconnect)."""
        for consumer in list(self._consumers.values()):
            self._settle(consumer)

    def fail_session(self, session_id: int, error: ChuteError) -> set[int] | None:
        """Defer ``error`` to the session; the consumers to wake, or None if no such session."""
        session = self.by_id.get(session_id)
        if session is None:
            return None
        session.error = error
        return set(session.consumers)

    # -- consumers --------------------------------------------------------------------

    def add_consumer(
        self, session: SessionState, prefetch: int, owner: Callable[[int], Acknowledger]
    ) -> int:
        """Register a consumer of ``session``; ``owner(consumer id)`` is what its messages
        ack through until :meth:`bind`. Returns its id."""
        consumer_id = next(self._ids)
        self._consumers[consumer_id] = ConsumerState(
            consumer_id, session, prefetch, owner(consumer_id)
        )
        session.consumers.add(consumer_id)
        return consumer_id

    def bind(self, consumer_id: int, owner: Acknowledger) -> None:
        """Make ``owner`` what the consumer's messages ack through from now on."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None:
            consumer.owner = owner

    def is_open(self, consumer_id: int) -> bool:
        return consumer_id in self._consumers

    def drop_consumer(self, consumer_id: int) -> bool:
        """Forget the consumer (its owed credit and acks go out first, while the connection
        lives); messages still buffered were never handed out: the broker redelivers them.
        False if it was not open."""
        consumer = self._consumers.pop(consumer_id, None)
        if consumer is None:
            self._ended.pop(consumer_id, None)
            return False
        if self.failure is None:
            self._settle(consumer)
        consumer.buffer.clear()
        consumer.session.consumers.discard(consumer_id)
        return True

    def fail_consumer(self, consumer_id: int, error: ChuteError) -> bool:
        """Keep ``error`` for the consumer's next take; False if no such consumer."""
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            return False
        if isinstance(error, DestinationDeleted):  # the broker closed it: nothing to settle
            del self._consumers[consumer_id]
            consumer.buffer.clear()
            consumer.session.consumers.discard(consumer_id)
            self._ended[consumer_id] = error
            return True
        consumer.error = error
        return True

    def consumer_ids(self) -> list[int]:
        return list(self._consumers)

    def deliver(self, consumer_id: int, seq: int, message: Message) -> None:
        """Buffer a delivery and note its consumer in :attr:`woken` (the codec's sink: one
        call per message). Dropped if the consumer closed meanwhile: the broker
        redelivers what it sent."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None:
            consumer.buffer.append(Received(message, seq, consumer.owner))
            self.woken.add(consumer_id)

    def take(self, consumer_id: int) -> Received | None:
        """The next message of the consumer, or None if its buffer is empty.

        Raises:
            ConnectError: the connection failed.
            ChuteError: an error the broker reported for this consumer (raised once).
            ConsumerError: the consumer is closed.
        """
        consumer = self._consumers.get(consumer_id)
        if consumer is None or self.failure is not None:
            if self.failure is not None:
                raise self.failure
            ended = self._ended.pop(consumer_id, None)
            if ended is not None:
                raise ended
            raise ConsumerError(f"consumer {consumer_id} is closed")
        if consumer.error is not None:
            error, consumer.error = consumer.error, None
            raise error
        if not consumer.buffer:
            return None
        received = consumer.buffer.popleft()
        if consumer.acks_by_taking:
            consumer.taken.append(received.seq)
        consumer.pending_credit += 1
        if consumer.pending_credit >= consumer.refill:
            self._refill(consumer)
        return received

    def before_wait(self, consumer_id: int) -> None:
        """The application is about to block on an empty buffer: give back all credit."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None and not consumer.buffer:
            self._refill(consumer)

    def ack(self, consumer_id: int, seq: int) -> None:
        """Ack delivery ``seq``: cumulative in ``client`` mode, just it in ``individual``
        mode; a no-op in ``auto`` mode and in transacted sessions (taking or commit acks).

        Raises:
            ConnectError: the connection failed.
            ConsumerError: the consumer is closed.
        """
        if self.failure is not None:
            raise self.failure
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise ConsumerError(f"cannot ack: consumer {consumer_id} is closed")
        if consumer.acks_by_taking:
            return
        credit, consumer.pending_credit = consumer.pending_credit, 0
        cumulative = consumer.session.ack_mode is SessionAckMode.CLIENT
        self._emit(Ack(consumer_id, seq, cumulative, credit))

    def nack(self, consumer_id: int, seq: int, requeue: bool = True) -> None:
        """Refuse delivery ``seq``: requeue it, or reject it to the dead-letter queue. In
        a transacted session the broker decides its fate at commit (a rollback gives it
        back like every other message of the transaction).

        Raises:
            ConnectError: the connection failed.
            ConsumerError: the consumer is closed; in ``auto`` mode outside a
                transaction (taking acknowledged it); ``seq`` is not waiting for an ack.
        """
        if self.failure is not None:
            raise self.failure
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise ConsumerError(f"cannot nack: consumer {consumer_id} is closed")
        if consumer.acks_at_refill:
            raise ConsumerError(
                f"cannot nack message {seq}: in auto mode taking a message acknowledges "
                "it; open the session with ack='client' or 'individual', or transacted, "
                "to refuse messages"
            )
        if consumer.acks_by_taking:
            try:
                consumer.taken.remove(seq)
            except ValueError:
                raise ConsumerError(
                    f"cannot nack message {seq}: it is not waiting for an acknowledgement"
                ) from None
        self._emit(Nack(consumer_id, seq, requeue))

    def _refill(self, consumer: ConsumerState) -> None:
        """Return the credit owed: in auto mode as an ack of everything taken."""
        credit = consumer.pending_credit
        if not credit:
            return
        consumer.pending_credit = 0
        if consumer.acks_at_refill:
            self._emit(Ack(consumer.id, consumer.taken[-1], True, credit))
            consumer.taken.clear()
        else:
            self._emit(Credit(consumer.id, credit))

    def _settle(self, consumer: ConsumerState) -> None:
        """Return the credit owed and, where taking acks, ack everything taken."""
        credit = consumer.pending_credit
        consumer.pending_credit = 0
        if consumer.taken:
            # Cumulative "in delivery order" (the broker's rule), so the last one taken
            # acks every earlier one still in flight, whatever their seqs (priority
            # reorders them); a nacked one has left flight already.
            self._emit(Ack(consumer.id, consumer.taken[-1], True, credit))
            consumer.taken.clear()
        elif credit:
            self._emit(Credit(consumer.id, credit))
