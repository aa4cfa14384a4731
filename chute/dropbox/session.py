"""A dropbox client's session: its producers, consumers, ack mode and local transaction.

:class:`DropboxSession` is what :meth:`chute.dropbox.client.DropboxConnection.session`
opens (the module docstring there says what a dropbox can and cannot do): sends
are written as DropboxMQ files (:mod:`chute.dropbox.queue`,
:mod:`chute.dropbox.topic`), or held until :meth:`DropboxSession.commit` in a
transacted session; consumers claim files (:mod:`chute.dropbox.consumer`);
browsing reads names without claiming. What the session needs of its connection
is :class:`SessionOwner`.

Not thread-safe: one thread at a time, as the rest of the dropbox client.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from chute.client.closing import ClosedAtExit
from chute.client.outgoing import SendOptions, send_item
from chute.core.model.address import Kind, parse
from chute.core.model.selector import compile_selector
from chute.dropbox.consumer import Deliveries, DropboxConsumer
from chute.dropbox.layout import (
    TOPIC_SUBSCRIPTIONS,
    QueueLayout,
    init_queue,
    init_topic,
    queue_layout,
)
from chute.dropbox.names import (
    SHARED_CLIENT,
    TOPIC_ROOT,
    check_destination_name,
    claim_room,
    subscription_dir_name,
)
from chute.dropbox.options import DropboxOptions
from chute.dropbox.queue import QueueConsumer, QueueProducer
from chute.dropbox.topic import TopicPublisher, remove_subscription
from chute.dropbox.transcoder import DecodedName, check_body, decode_filename
from chute.errors import (
    ChuteError,
    ConnectError,
    ConsumerError,
    InvalidAddress,
    TransactionError,
)
from chute.message import DEFAULT_PRIORITY, KEY_PROPERTY, BodyKind, Message, now_ms

NO_TWO_PHASE: Final = "two-phase transactions need a broker (chute://), not a dropbox"


class SessionOwner(Protocol):
    """What a session needs of its connection (a
    :class:`~chute.dropbox.client.DropboxConnection`)."""

    options: DropboxOptions
    root: Path
    client_id: str

    @property
    def closed(self) -> bool: ...

    def release(self, session: DropboxSession) -> None:
        """Forget a session that closed itself."""

    def temporary_queue(self) -> str:
        """Create a queue dropbox removed when the connection closes; its address."""


class DropboxSession(ClosedAtExit):
    """An ack mode and maybe a local transaction, over a dropbox root."""

    def __init__(
        self,
        connection: SessionOwner,
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
        key: str | None = None,
    ) -> None:
        """Write a message file into the destination's dropbox (every subscription
        of a topic gets a copy). Returns once the file is in ``target/`` (and
        fsynced, unless ``persistent=False`` or the URL says ``sync=false``); in
        a transacted session, at :meth:`commit`.

        A queue send waits while DropboxMQ's ``write-lock.properties`` holds it
        back (:mod:`chute.dropbox.flow`), up to the URL's ``block_timeout_ms``.

        Raises:
            InvalidAddress: a bad address (a name is never a path).
            InvalidMessage: a bad field, a name too long for a filename, or a map,
                stream or object body that is not Java-serialized (DropboxMQ could
                not read it).
            DestinationFull: still write-locked after ``block_timeout_ms``.
            OSError: the file could not be written.
        """
        self._check()
        target = self._target(address)
        if key is not None:  # the string property "key", as every client sends it
            properties = {**(properties or {}), KEY_PROPERTY: key}
        options = SendOptions(
            priority, ttl, properties, persistent, correlation_id, reply_to, type, id, kind
        )
        self._send(target, _stamped(body, options))

    def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None:
        """:meth:`send` of each, in order, once all are checked: a file each (DropboxMQ
        has no atomic group of files; in a transacted session they are written at
        :meth:`commit`)."""
        self._check()
        target = self._target(address)
        stamped = [_stamped(*send_item(item, ttl)) for item in messages]
        for message in stamped:
            self._send(target, message)

    def _target(self, address: str) -> str:
        addr = parse(address)
        if addr.kind is Kind.STREAM:
            raise InvalidAddress(f"{addr} is a stream: streams need a broker")
        check_destination_name(addr.name, topic=addr.kind is Kind.TOPIC)
        return str(addr)

    def _send(self, address: str, message: Message) -> None:
        durable = message.persistent and self.connection.options.sync
        if self.transacted:
            self._tx_sends.append((address, message, durable))
            return
        self._write(address, message, durable)

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
                    claim_room=claim_room(options.consumers or [self.connection.client_id]),
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
        offset: str | int | None = None,
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
        if addr.kind is Kind.STREAM or offset is not None:
            raise ConsumerError("streams need a broker: a dropbox holds queues and topics")
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
        raise TransactionError(NO_TWO_PHASE)

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

    def _described(self) -> str:
        return "the dropbox session"


def _stamped(body: bytes | str, options: SendOptions) -> Message:
    """A message to write, checked and timestamped (an id only if the sender chose one:
    the producer makes a DropboxMQ id that carries the time)."""
    priority, ttl, properties, persistent, correlation_id, reply_to, type, id, kind = options
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
    check_body(message)  # at send, in a transaction too, not at commit
    if id is None:
        message.id = ""
    message.timestamp = now_ms()
    return message
