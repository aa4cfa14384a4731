# Written by scripts/unasync.py from chute/client/api_async.py: edit that, then run the script.
"""The client API's protocols, declared once: :class:`Connection`,
:class:`Session` and :class:`Consumer`, with what each method means, its
arguments and errors.

One source declares both shapes of the API: the blocking protocols are written
from the asyncio ones (``scripts/unasync.py``), the same methods, those that talk
to the broker awaited on one side and called on the other. :mod:`chute.client.api`
gathers the two shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from chute.client.received import Received
from chute.client.requests import CursorPage, Page
from chute.message import DEFAULT_PRIORITY, BodyKind, Message


@runtime_checkable
class Consumer(Protocol):
    """Receives messages from one address; iterate it to receive until it closes."""

    @property
    def id(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def receive(self, timeout: float | None = None) -> Received | None:
        """The next message, or None after ``timeout`` seconds (None = wait forever).

        Raises:
            ConsumerError: the consumer is closed.
            ConnectError: the connection failed.
            ChuteError: the broker reported an error for this consumer or session.
        """
        ...

    def __iter__(self) -> Iterator[Received]:
        """Receive until the consumer is closed."""
        ...

    def close(self) -> None:
        """Close; messages not yet received go back to the destination."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class Session(Protocol):
    """An ack mode, maybe a transaction, a confirm window, and the session's consumers."""

    @property
    def id(self) -> int: ...

    @property
    def confirm_window(self) -> int:
        """How many persistent sends (transacted: commits) may await confirmation."""
        ...

    @property
    def unconfirmed(self) -> int:
        """How many persistent sends (or commits) of the window await confirmation now."""
        ...

    def send(
        self,
        address: str,
        body: bytes | str = b"",
        *,
        priority: int = DEFAULT_PRIORITY,
        ttl: int = 0,
        properties: Mapping[str, Any] | None = None,
        persistent: bool = True,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
        id: str | None = None,
        kind: BodyKind | None = None,
        key: str | None = None,
    ) -> None:
        """Send a message to ``address`` (``queue:NAME``, ``topic:NAME`` or ``NAME``).

        A persistent send (the default) returns once the message is stored (on
        disk); a non-persistent one may return at once (errors surface on a later
        call of the session). In a transacted session nothing waits: :meth:`commit`
        does. A ``str`` body is sent as UTF-8 ``text``; ``ttl`` is in milliseconds
        (0 = never expires). ``key``: the message's key (the string property
        ``key``): on a stream with partitions, messages with the same key go to the
        same partition.

        With a ``confirm_window`` of N, a persistent send returns as soon as at most
        N sends of this session await their confirmation. A send then refused, or
        not stored, is raised by a later :meth:`send`, :meth:`commit`,
        :meth:`flush` or :meth:`close`, with a note saying it was an earlier one.

        On a connection that moves (a URL of several nodes, or ``?failover=``), a
        persistent send not yet confirmed when the node goes is sent again on the
        node the connection reaches, and confirmed there; the broker drops a resend
        of what it had stored (docs/client.md).

        Raises:
            InvalidAddress, InvalidMessage: a bad address or field.
            ValueError: a negative ``ttl``.
            DestinationFull: the destination refused the message (now or earlier).
            ConnectError, RequestTimeout: the connection failed (and reached no node
                within ``failover``) or the broker is slow.
        """
        ...

    def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None:
        """Send many messages to ``address`` in few requests (a bulk producer's path):
        each item is a body (``bytes``, or ``str`` sent as UTF-8 ``text``, with the
        defaults of :meth:`send`) or a :class:`~chute.message.Message` whose fields
        are sent (a new id if it has none). ``ttl`` applies to all of them.

        The messages go in requests of up to 1 MiB each. In a transacted session
        they join the transaction, as :meth:`send` of each would, and nothing
        waits. Outside one, the broker stores and delivers each request's messages
        together, all or none (a destination without room for all of them refuses
        them all and this raises; earlier requests of the call stay sent: for all
        or none over any number, use a transaction), and this returns once every
        request is stored. With a dropbox URL each message is a file of its own,
        written in order, as :meth:`send` writes it.

        Raises:
            InvalidAddress: a bad address (nothing sent).
            InvalidMessage: a bad item or field (raised before its request is sent).
            ValueError: a negative ``ttl``.
            DestinationFull: the destination refused them.
            ConnectError, RequestTimeout: the connection failed or the broker is slow.
        """
        ...

    def flush(self) -> None:
        """Wait until every persistent send (or commit) of the session is confirmed.

        Raises:
            ChuteError: one refused or unstored send (one per call: call until it
                returns to see them all), or the connection failed.
            RequestTimeout: no confirmation in time.
        """
        ...

    def consumer(
        self,
        address: str,
        *,
        selector: str | None = None,
        prefetch: int = 100,
        exclusive: bool = False,
        subscription: str | None = None,
        durable: bool = False,
        shared: bool = False,
        offset: str | int | None = None,
    ) -> Consumer:
        """Open a consumer on ``address``; for a topic, ``subscription`` names the
        subscription (``durable`` outlives the connection, ``shared`` competes); for a
        stream, ``offset`` is where reading starts: ``first``, ``last``, ``next`` (the
        default), an offset, or ``timestamp=MS``.

        Raises:
            InvalidAddress, InvalidSelector, NotFound, AccessDenied: refused.
            ConsumerError: ``exclusive`` where no broker can grant it (dropbox).
            ValueError: prefetch below 1, or durable without a name.
        """
        ...

    def commit(self) -> None:
        """Commit the transaction: its sends are delivered, its acks take effect.

        Raises:
            TransactionError: the session is not transacted; or the connection moved
                to another node during the transaction, which was rolled back: retry
                it (the message says so).
        """
        ...

    def rollback(self) -> None:
        """Roll back: sends are dropped, messages taken are redelivered.

        Raises:
            TransactionError: the session is not transacted.
        """
        ...

    def prepare(self, xid: str) -> None:
        """Prepare the transaction under ``xid`` (two-phase) and start a new one; finish
        it with :meth:`Connection.commit_prepared` (from any connection).

        Raises:
            TransactionError: not transacted, or no broker to hold it (dropbox).
        """
        ...

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Message]:
        """The messages of a queue in sequence order (the order the broker accepted them;
        priorities do not reorder a browse), nothing consumed: at most ``limit`` (0 =
        all, into one list: for a queue of any size, iterate :meth:`iter_browse`).
        A queue nothing made holds nothing. What a walk shows of a queue that changes
        meanwhile is in docs/semantics.md.

        Raises:
            InvalidAddress: a bad address, or a topic (browse a subscription's queue).
            InvalidSelector, AccessDenied: refused.
        """
        ...

    def iter_browse(
        self,
        address: str,
        selector: str | None = None,
        *,
        page_messages: int = 0,
        page_bytes: int = 0,
    ) -> Iterator[Message]:
        """Every message of a queue, as :meth:`browse` shows them, fetched page by page
        as the iteration goes (the memory of one or two pages, whatever the queue's
        size). ``page_messages`` and ``page_bytes`` ask for smaller pages than the
        broker's (at most 1,000 messages and 256 KiB); 0 takes the broker's. A dropbox
        reads one file at a time. Raises as :meth:`browse`, once iteration starts.
        """
        ...

    def temporary_queue(self) -> str:
        """Create a queue that lives as long as the connection; returns its address."""
        ...

    def unsubscribe(self, name: str) -> None:
        """Delete the durable subscription ``name`` of this connection's client id."""
        ...

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create a callback queue: durable subscription ``name`` on ``topic`` forwarding
        every (selected) message to ``forward_to``.

        Raises:
            ChuteError: no broker to forward (dropbox).
        """
        ...

    def close(self) -> None:
        """Await every unconfirmed send (:meth:`flush`), then close the session and its
        consumers; never raises for a lost connection.

        Raises:
            ChuteError: an unconfirmed send was refused or not stored (the session is
                closed all the same).
        """
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class Connection(Protocol):
    """A connection to a broker, or an opened dropbox: sessions, management, cursors."""

    @property
    def connection_id(self) -> str: ...

    @property
    def closed(self) -> bool:
        """Closed, or lost with no node to move to (a connection moving to another node
        of its URL is not closed)."""
        ...

    @property
    def node(self) -> str:
        """The node the connection is on, ``host:port`` (of a URL that lists several,
        the one it reached; after a move, the one it moved to). A dropbox: its root."""
        ...

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> Session:
        """Open a session.

        Args:
            ack: ``auto``, ``client`` (cumulative ``ack()``) or ``individual``.
            transacted: sends and acks take effect on :meth:`Session.commit`.
            confirm_window: how many persistent sends (in a transacted session:
                commits) may await confirmation while the application goes on; 0
                makes each wait for its own.

        Raises:
            ValueError: unknown ack mode, or a negative window.
            ConnectError: the connection is gone, or lost and moving to another node
                (a request of the connection waits for the move).
        """
        ...

    def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]:
        """Statistics: ``destinations`` in address order (each with ``address``,
        ``depth``, ``inflight``, ...) and ``connections``. ``pattern`` keeps the
        destinations it names (an address, or ``*`` for any characters:
        ``queue:orders.*``). The broker answers in pages of at most ``page_size``
        destinations (0: its own bound, 1,000), which this call joins, so any number
        of destinations can be listed.

        Raises:
            InvalidAddress: a pattern without ``*`` that is not an address.
        """
        ...

    def delete(self, address: str, *, force: bool = False) -> int:
        """Delete a queue or topic; returns how many messages went with it. Its consumers
        are closed (their next receive raises DestinationDeleted). A topic with durable
        subscriptions is deleted only with ``force``, which deletes them too. Needs the
        ``delete`` permission on the address.

        Raises:
            NotFound: no such destination.
            InvalidAddress: it cannot be deleted (a reserved, configured, temporary or
                login-name queue; the dropbox: a topic).
            ConsumerError: durable subscriptions and no ``force``; or a consumer the
                broker runs itself.
            TransactionError: prepared transactions hold messages of it.
            AccessDenied: not permitted.
        """
        ...

    def purge(self, address: str) -> int:
        """Remove every waiting message of a queue (those in flight to consumers stay);
        returns how many. Needs the ``delete`` permission on the address.

        Raises:
            NotFound: no such queue. InvalidAddress: a topic. AccessDenied.
        """
        ...

    def create(self, address: str) -> bool:
        """Make a queue, topic or stream before anyone uses it; True if made, False if it
        existed. Needs the ``manage`` permission on the address; one made by a user who
        manages only some addresses counts against their ``max_destinations_per_user``.
        A dropbox makes queues only (its directories).

        Raises:
            InvalidAddress, AccessDenied; DestinationFull: past a limit on what users make.
        """
        ...

    def move(
        self,
        source: str,
        target: str,
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> int:
        """Move the messages waiting in queue ``source`` to ``target`` (a queue or a
        topic), one at a time and atomically each, in sequence order: those ``selector``
        matches, of those numbered ``seqs`` (None: any), at most ``limit`` (0: all);
        returns how many moved. Messages in flight to consumers stay. Needs the
        ``manage`` permission on both.

        Raises:
            NotFound: no such queue. InvalidAddress: a topic as ``source``, or ``target``
                is ``source``. InvalidSelector, AccessDenied.
            ConnectError: the broker is older than moving ("does not support move").
            ChuteError: no broker (dropbox).
        """
        ...

    def retry_dead_letters(
        self,
        source: str = "queue:__sys__deadLetter",
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> dict[str, int]:
        """Send the messages waiting in the dead-letter queue ``source`` back to the
        destination each came from (its ``chute_original_destination``), picked as
        :meth:`move` picks them; returns how many went to each destination, and under
        ``""`` how many stayed for want of a known origin.

        Raises:
            As :meth:`move`.
        """
        ...

    def prepared(self) -> list[str]:
        """The xids of every prepared (two-phase) transaction waiting."""
        ...

    def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (prepared by any connection, also before a
        restart). Raises NotFound, or TransactionError without a broker."""
        ...

    def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction: its sends are dropped, its acks undone."""
        ...

    def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool:
        """Commit the prepared transactions ``xids`` together, once per (sink, batch).

        Returns False when this batch (or a later one) of ``sink`` was committed
        before: the xids were rolled back instead (a retried batch). With
        ``keep=False`` no batch is remembered: the commit is only atomic.

        Raises:
            NotFound: an xid is not prepared; nothing was committed.
            TransactionError: a bad sink name, batch or xid; no broker (dropbox).
        """
        ...

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        """Open (or refresh) the named cursor; returns ``(earliest, head)`` sequence
        numbers, ``head`` being the first not readable yet. Without ``cursor``,
        nothing is opened: the numbers describe a queue for a snapshot read
        (docs/spark.md).

        Raises:
            ConsumerError: the queue is held by another exclusive consumer or has
                messages in flight; a topic cursor exists with another selector.
            InvalidAddress, InvalidSelector: refused.
            ChuteError: cursors need a broker (dropbox).
        """
        ...

    def cursor_fetch(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> CursorPage:
        """One page of the messages with ``start <= seq < end``, not consumed: returns
        ``(next start, ((seq, message), ...))``; the range is done when next == end.
        Raises as :meth:`cursor_open`."""
        ...

    def cursor_read(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[Page]:
        """Every message with ``start <= seq < end``, page by page, in sequence order;
        the next page is requested before this one is handed out. Raises as
        :meth:`cursor_open`."""
        ...

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        """Consume every message the cursor holds below ``end``; returns once durable."""
        ...

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        """Release the cursor's lease; ``delete`` also forgets it (and a topic cursor's
        messages)."""
        ...

    def close(self) -> None:
        """Close gracefully: sessions' unconfirmed sends are awaited, then everything is
        released; never raises for a connection already gone.

        Raises:
            ChuteError: a session's unconfirmed send was refused or not stored (the
                connection is closed all the same).
        """
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


__all__ = ["Connection", "Consumer", "Session"]
