"""``chute.connect("dropbox:///srv/mq")``: the client API with no broker, on a dropbox root.

As in JBoss Messaging's design, serverful and serverless look the same to a client. A
:class:`DropboxConnection` offers what :class:`chute.client.blocking.Connection`
offers (sessions, producers, consumers, ack modes, local transactions,
browsing) over the DropboxMQ files of :mod:`chute.dropbox.queue` and
:mod:`chute.dropbox.topic`, so any number of processes on one machine (or on
machines sharing a filesystem) exchange messages through a directory.

URL: ``dropbox:///abs/path`` or ``dropbox:relative/path``, with options in the
query (:mod:`chute.dropbox.options`). The API is :mod:`chute.client.api`'s,
method for method.

What the filesystem cannot do, and what happens instead (docs/dropbox.md):

- **Transactions** are local and *not atomic across files*: sends are held in
  memory and written at :meth:`DropboxSession.commit`, then the received
  messages are acknowledged, one rename each. A crash during a commit may
  leave part of it done; no message is ever torn or lost. Two-phase
  (``prepare``) needs a broker and raises :class:`TransactionError`.
- **Prefetch** does not apply: each receive claims one file. **Exclusive**
  consumers and **callback queues** need a broker and are refused.
- **Flow control**: DropboxMQ's lock files are obeyed
  (:mod:`chute.dropbox.flow`): a read-locked dropbox looks empty to its
  consumers; a queue send waits while ``write-lock.properties`` holds it back,
  up to the URL's ``block_timeout_ms``, then raises ``DestinationFull``.
- **Selectors** are evaluated over each file's name (headers and properties)
  before it is claimed; a file no consumer selects stays in ``target/``.
- A **non-durable topic subscription** is a subscription directory removed
  when its consumer closes; a killed process leaves it behind.
- **Temporary queues** are queue dropboxes removed when the connection
  closes (a killed process leaves them behind).
- **Confirm window**: a persistent send is on disk when ``send`` returns, so
  nothing ever awaits confirmation (``unconfirmed`` is 0, ``flush`` returns).
- **Delete and purge** work on queue dropboxes only (a topic's subscriptions are
  directories: unsubscribe them); other processes' consumers are told at their next scan.
- **Cursors** (reading by sequence number) and **batch commits** need a
  broker: they raise :class:`~chute.errors.ChuteError` and
  :class:`~chute.errors.TransactionError`.

Not thread-safe: use a connection, its sessions and consumers from one thread
at a time (open one connection per thread; they may share the root).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from chute.client.requests import CursorPage, Page
from chute.core.address import Kind, parse, pattern_matcher
from chute.core.selector import compile_selector
from chute.dropbox.consumer import Deliveries, DropboxConsumer
from chute.dropbox.layout import (
    TOPIC_SUBSCRIPTIONS,
    QueueLayout,
    init_queue,
    init_topic,
    queue_layout,
)
from chute.dropbox.names import (
    TOPIC_ROOT,
    check_destination_name,
    claim_room,
    subscription_dir_name,
)
from chute.dropbox.options import DropboxOptions, parse_dropbox_url
from chute.dropbox.queue import QueueConsumer, QueueProducer, delete_queue, purge_queue
from chute.dropbox.topic import TopicPublisher, remove_subscription
from chute.dropbox.transcoder import DecodedName, decode_filename
from chute.errors import (
    ChuteError,
    ConnectError,
    ConsumerError,
    InvalidAddress,
    TransactionError,
)
from chute.message import DEFAULT_PRIORITY, BodyKind, Message, now_ms

__all__ = [
    "DropboxConnection",
    "DropboxSession",
    "connect",
    "open_root",
]

SHARED_CLIENT: Final = "__shared__"
"""The client part of a shared subscription's directory name."""
_ACK_MODES: Final = ("auto", "client", "individual")
_NO_TWO_PHASE: Final = "two-phase transactions need a broker (chute://), not a dropbox"
_NO_CURSORS: Final = "cursors need a broker (chute://): a dropbox has no sequence numbers"


def connect(
    url: str,
    *,
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 10.0,
    heartbeat: float = 0.0,
) -> DropboxConnection:
    """Open a dropbox root as a connection. ``login``, ``passcode`` and
    ``heartbeat`` have no meaning without a broker (file permissions guard a
    dropbox) and are ignored. The root is created if missing.

    Raises:
        ConnectError: a bad URL, or the root cannot be used as a directory.
    """
    del login, passcode, heartbeat
    return open_root(parse_dropbox_url(url, client_id), timeout)


def open_root(options: DropboxOptions, timeout: float = 10.0) -> DropboxConnection:
    """:func:`connect` without a URL (a root path needs no escaping here).

    Raises:
        ConnectError: the root cannot be used as a directory.
    """
    try:
        options.root.mkdir(parents=True, exist_ok=True)
        if not os.access(options.root, os.R_OK | os.W_OK | os.X_OK):
            raise PermissionError(f"{options.root}: not readable and writable")
    except OSError as exc:
        raise ConnectError(f"cannot use dropbox root {options.root}: {exc}") from None
    return DropboxConnection(options, timeout)


class DropboxConnection:
    """A dropbox root opened by one client id. See the module docstring."""

    def __init__(self, options: DropboxOptions, timeout: float = 10.0) -> None:
        self.options = options
        self.root = options.root
        self.client_id = options.client_id
        self.connection_id = options.client_id
        self.timeout = timeout
        self._sessions: list[DropboxSession] = []
        self._temporary: list[QueueLayout] = []
        self._temp_ids = itertools.count(1)
        self._closed = False
        self._session_ids = itertools.count(1)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise ConnectError("the connection is closed")

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> DropboxSession:
        """Open a session. A ``confirm_window`` is accepted and never fills: each send is
        on disk when it returns. Raises ValueError for an unknown ack mode or a
        negative window."""
        self._check()
        if ack not in _ACK_MODES:
            raise ValueError(f"ack must be one of {', '.join(_ACK_MODES)}, not {ack!r}")
        if confirm_window < 0:
            raise ValueError("confirm_window must not be negative")
        session = DropboxSession(self, next(self._session_ids), ack, transacted, confirm_window)
        self._sessions.append(session)
        return session

    def release(self, session: DropboxSession) -> None:
        """Forget a session that closed itself."""
        with contextlib.suppress(ValueError):
            self._sessions.remove(session)

    def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]:
        """Each queue dropbox (that ``pattern`` names) with ``depth`` (files in
        ``target/``) and ``inflight`` (claimed, in ``processing/``); the same shape as a
        broker's ``stat``. There is no packet to bound: ``page_size`` changes nothing."""
        self._check()
        keep = pattern_matcher(pattern) if pattern else None
        destinations: list[dict[str, Any]] = []
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.name == TOPIC_ROOT or not entry.is_dir(follow_symlinks=False):
                continue
            if keep is not None and not keep(f"queue:{entry.name}"):
                continue
            try:
                layout = queue_layout(self.root, entry.name)
                depth = _count(layout.target)
                inflight = _count(layout.processing)
            except (InvalidAddress, OSError):
                continue
            destinations.append(
                {"address": f"queue:{entry.name}", "depth": depth, "inflight": inflight}
            )
        return {"destinations": destinations, "connections": 0, "root": str(self.root)}

    def delete(self, address: str, *, force: bool = False) -> int:
        """Delete a queue dropbox and every file in it (``dropbox.queue.delete_queue``; a
        topic's subscriptions are directories: unsubscribe them); how many messages went."""
        self._check()
        return delete_queue(self.root, address)

    def purge(self, address: str) -> int:
        """Remove the files waiting in a queue dropbox's ``target/``; how many."""
        self._check()
        return purge_queue(self.root, address)

    def move(
        self,
        source: str,
        target: str,
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> int:
        """Raises ChuteError: moving messages between destinations needs a broker."""
        raise ChuteError("moving messages needs a broker (chute://), not a dropbox")

    def retry_dead_letters(
        self,
        source: str = "queue:__sys__deadLetter",
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> dict[str, int]:
        """Raises ChuteError: a dropbox has no dead letters to retry."""
        raise ChuteError("retrying dead letters needs a broker (chute://), not a dropbox")

    def prepared(self) -> list[str]:
        """Always empty: two-phase transactions need a broker."""
        return []

    def commit_prepared(self, xid: str) -> None:
        """Raises TransactionError: two-phase transactions need a broker."""
        raise TransactionError(_NO_TWO_PHASE)

    def rollback_prepared(self, xid: str) -> None:
        """Raises TransactionError: two-phase transactions need a broker."""
        raise TransactionError(_NO_TWO_PHASE)

    def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool:
        """Raises TransactionError: batch commits of prepared transactions need a broker."""
        raise TransactionError(_NO_TWO_PHASE)

    # -- cursors: a broker's sequence numbers; a dropbox has none -----------------------

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        """Raises ChuteError: cursors need a broker."""
        raise ChuteError(_NO_CURSORS)

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
        """Raises ChuteError: cursors need a broker."""
        raise ChuteError(_NO_CURSORS)

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
        """Raises ChuteError (at once, not when iterated): cursors need a broker."""
        raise ChuteError(_NO_CURSORS)

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        """Raises ChuteError: cursors need a broker."""
        raise ChuteError(_NO_CURSORS)

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        """Raises ChuteError: cursors need a broker."""
        raise ChuteError(_NO_CURSORS)

    def temporary_queue(self) -> str:
        """Create a queue dropbox removed when this connection closes; its address."""
        self._check()
        client = re.sub(r"[^A-Za-z0-9_-]", "_", self.client_id)[:100]
        name = f"__tmp__.{client}.{uuid.uuid4().hex[:8]}"
        self._temporary.append(init_queue(self.root, name))
        return f"queue:{name}"

    def close(self) -> None:
        """Close every session (unacknowledged messages go back to ``target/``) and
        remove temporary queues. Idempotent; never raises for files already gone."""
        if self._closed:
            return
        for session in list(self._sessions):
            session.close()
        for layout in self._temporary:
            shutil.rmtree(layout.base.parent, ignore_errors=True)
        self._temporary.clear()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<chute.DropboxConnection {self.root} as {self.client_id}>"


def _count(path: Path) -> int:
    with os.scandir(path) as entries:
        return sum(1 for _ in entries)


class DropboxSession:
    """An ack mode and maybe a local transaction, over a dropbox root."""

    def __init__(
        self,
        connection: DropboxConnection,
        session_id: int,
        ack: str,
        transacted: bool,
        confirm_window: int = 0,
    ) -> None:
        self.connection = connection
        self.id = session_id
        self.ack_mode = ack
        self.transacted = transacted
        self.confirm_window = confirm_window
        self._consumers: list[tuple[DropboxConsumer, Deliveries]] = []
        self._producers: dict[tuple[str, bool], QueueProducer | TopicPublisher] = {}
        self._tx_sends: list[tuple[str, Message, bool]] = []
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self.connection.closed

    @property
    def unconfirmed(self) -> int:
        """Always 0: a send is on disk (or refused) when it returns."""
        return 0

    def flush(self) -> None:
        """Returns at once: nothing ever awaits confirmation (see :attr:`unconfirmed`)."""
        self._check()

    def _check(self) -> None:
        if self.connection.closed:
            raise ConnectError("the connection is closed")
        if self._closed:
            raise ConsumerError("the session is closed")

    # -- producing --------------------------------------------------------------------

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
    ) -> None:
        """Write a message file into the destination's dropbox (every subscription
        of a topic gets a copy). Returns once the file is in ``target/`` (and
        fsynced, unless ``persistent=False`` or the URL says ``sync=false``); in
        a transacted session, at :meth:`commit`.

        A queue send waits while DropboxMQ's ``write-lock.properties`` holds it
        back (:mod:`chute.dropbox.flow`), up to the URL's ``block_timeout_ms``.

        Raises:
            InvalidAddress: a bad address (a name is never a path).
            InvalidMessage: a bad field, or a name too long for a filename.
            DestinationFull: still write-locked after ``block_timeout_ms``.
            OSError: the file could not be written.
        """
        self._check()
        addr = parse(address)
        check_destination_name(addr.name, topic=addr.kind is Kind.TOPIC)
        message = Message.create(
            body,
            id=id,
            priority=priority,
            ttl=ttl,
            correlation_id=correlation_id,
            reply_to=reply_to,
            type=type,
            persistent=persistent,
            properties=properties,
            kind=kind,
        )
        if id is None:
            message.id = ""  # the producer makes a DropboxMQ id that carries the time
        message.timestamp = now_ms()
        durable = persistent and self.connection.options.sync
        if self.transacted:
            self._tx_sends.append((str(addr), message, durable))
            return
        self._write(str(addr), message, durable)

    def _write(self, address: str, message: Message, durable: bool) -> None:
        producer = self._producers.get((address, durable))
        if producer is None:
            addr = parse(address)
            root = self.connection.root
            options = self.connection.options
            if addr.kind is Kind.TOPIC:
                producer = TopicPublisher(
                    root,
                    addr.name,
                    durable=durable,
                    block_timeout=options.block_timeout,
                    poll_interval=options.poll_interval,
                )
            else:
                producer = QueueProducer(
                    root,
                    addr.name,
                    durable=durable,
                    block_timeout=options.block_timeout,
                    poll_interval=options.poll_interval,
                    claim_room=claim_room([self.connection.client_id]),
                )
            self._producers[(address, durable)] = producer
        producer.send(message)

    # -- consuming --------------------------------------------------------------------

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
    ) -> DropboxConsumer:
        """Consume a queue dropbox, or a topic subscription's dropbox (created if
        missing: ``subscription`` names it; ``durable`` keeps it after close;
        ``shared`` lets consumers of any client id compete on it).

        Raises:
            InvalidAddress, InvalidSelector: a bad address or selector.
            ConsumerError: ``exclusive``, or subscription options on a queue.
            ValueError: prefetch below 1, or durable without a name.
        """
        self._check()
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if exclusive:
            raise ConsumerError(
                "exclusive consumers need a broker: a dropbox cannot keep other processes away"
            )
        compiled = compile_selector(selector) if selector else None
        addr = parse(address)
        check_destination_name(addr.name, topic=addr.kind is Kind.TOPIC)
        conn = self.connection
        temporary: QueueLayout | None = None
        if addr.kind is Kind.TOPIC:
            if durable and not subscription:
                raise ValueError("a durable subscription needs a name")
            topic = init_topic(conn.root, addr.name)
            owner = SHARED_CLIENT if shared else conn.client_id
            name = subscription or f"nd-{uuid.uuid4().hex[:12]}"
            layout = topic.subscription(name, owner)
            layout.create()
            if not durable and not shared:
                temporary = layout
        else:
            if subscription or durable or shared:
                raise ConsumerError("subscription, durable and shared apply to topics only")
            layout = init_queue(conn.root, addr.name)

        def accept(decoded: DecodedName) -> bool:
            return compiled is None or compiled.matches(decoded.to_message(b""))

        files = QueueConsumer(
            layout,
            "",
            conn.client_id,
            options=conn.options.consumer_options(),
            accept=accept if compiled is not None else None,
        )
        deliveries = Deliveries(files, self.ack_mode, self.transacted)
        consumer = DropboxConsumer(self, len(self._consumers) + 1, deliveries, temporary)
        self._consumers.append((consumer, deliveries))
        return consumer

    # -- transactions -------------------------------------------------------------------

    def commit(self) -> None:
        """Write the held sends, then acknowledge every message received in the
        transaction. Not atomic across files (see the module docstring).

        Raises:
            TransactionError: not a transacted session.
            DestinationFull, OSError: a file could not be written (write-locked,
                or an I/O error); the sends before it are done, the ones from it
                on and the acks are still held (retry or roll back).
        """
        self._check()
        if not self.transacted:
            raise TransactionError("this session is not transacted")
        while self._tx_sends:
            address, message, durable = self._tx_sends[0]
            self._write(address, message, durable)
            self._tx_sends.pop(0)
        for _, deliveries in self._consumers:
            deliveries.settle_all()

    def prepare(self, xid: str) -> None:
        """Raises TransactionError: two-phase transactions need a broker."""
        raise TransactionError(_NO_TWO_PHASE)

    def rollback(self) -> None:
        """Drop the held sends; messages received in the transaction go back to
        ``target/`` (redelivered, or to ``error/`` past the redelivery limit)."""
        self._check()
        if not self.transacted:
            raise TransactionError("this session is not transacted")
        self._tx_sends.clear()
        for _, deliveries in self._consumers:
            deliveries.recover_all()

    # -- the rest of the API ----------------------------------------------------------

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Message]:
        """The messages in a queue dropbox's ``target/``, in the order they were sent,
        unclaimed (see :meth:`iter_browse`)."""
        browsing = self.iter_browse(address, selector)
        return list(itertools.islice(browsing, limit) if limit > 0 else browsing)

    def iter_browse(
        self,
        address: str,
        selector: str | None = None,
        *,
        page_messages: int = 0,
        page_bytes: int = 0,
    ) -> Iterator[Message]:
        """The messages in a queue dropbox's ``target/`` in the order they were sent
        (their timestamp, then sequence), unclaimed; each file is read as the iteration
        reaches it, so only the names are held. A snapshot of the names: a file claimed
        before it is read is left out. The page bounds change nothing here.

        Raises:
            InvalidAddress: a bad address, or a topic (browse its subscriptions'
                files with ls).
        """
        self._check()
        addr = parse(address)
        if addr.kind is not Kind.QUEUE:
            raise InvalidAddress("only queues can be browsed")
        compiled = compile_selector(selector) if selector else None
        layout = queue_layout(self.connection.root, addr.name)  # looking creates nothing
        now = now_ms()
        try:
            with os.scandir(layout.target) as entries:
                decoded = [decode_filename(e.name, now_ms=now) for e in entries]
        except FileNotFoundError:
            return  # no such dropbox: it holds nothing
        decoded.sort(key=lambda d: d.sort_key[1:])  # as sent: priorities do not reorder
        for item in decoded:
            if 0 < item.expiration <= now:
                continue
            try:
                body = (layout.target / item.name).read_bytes()
            except OSError:
                continue  # claimed (or removed) meanwhile
            message = item.to_message(body)
            if compiled is None or compiled.matches(message):
                yield message

    def temporary_queue(self) -> str:
        """Create a queue dropbox removed when the connection closes; returns its address."""
        self._check()
        return self.connection.temporary_queue()

    def unsubscribe(self, name: str) -> None:
        """Delete the durable subscription ``name`` of this client id, with its messages.

        Raises:
            NotFound-like ConsumerError: no such subscription.
        """
        self._check()
        client_id = self.connection.client_id
        missing = ConsumerError(f"no durable subscription {name!r} of {client_id}")
        try:
            wanted = subscription_dir_name(name, client_id)
        except InvalidAddress:
            raise missing from None  # a subscription cannot have been made with this name
        topic_root = self.connection.root / TOPIC_ROOT
        found = [
            p
            for p in topic_root.rglob(wanted)
            if p.name == wanted and p.parent.name == TOPIC_SUBSCRIPTIONS  # rglob: * is a glob
        ]
        if not found:
            raise missing
        for path in found:
            remove_subscription(QueueLayout(self.connection.root, name, path))

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Raises ChuteError: callback queues need a broker (a dropbox has no forwarder)."""
        raise ChuteError("callback queues need a broker (chute://): a dropbox has no forwarder")

    def close(self) -> None:
        """Roll back an open transaction and close every consumer. Idempotent."""
        if self._closed:
            return
        self._tx_sends.clear()
        for consumer, _ in list(self._consumers):
            consumer.close()
        self._closed = True
        self.connection.release(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
