"""Connections: one logged-in client each, and the one face of the broker adapters drive.

A :class:`BrokerConnection` is one logged-in client (XmlBlaster's *session*), made by
:func:`connect`, which authenticates it (:mod:`chute.core.rules.access`). Every
adapter drives the broker through it: it owns
:class:`~chute.core.operations.session.BrokerSession` objects (JBoss Messaging/JMS sessions: an ack
mode and maybe a local transaction), its temporary queues and, for a named
user, its pipe from the user's login-name queue; and it carries out what a
client asks for the connection as a whole (browse, prepared transactions,
cursors, subscriptions, stats). Every such operation asks the broker's
:class:`~chute.core.rules.access.Access` first, so no protocol decides on its own
what a client may do.

Closing a connection undoes all of it: consumers' in-flight messages go back
in their place, an open transaction rolls back, temporary queues and
non-durable subscriptions disappear.

Temporary (session) queues from XmlBlaster live here too —
``queue:__tmp__.<24 random hex digits>`` (unguessable, naming nothing of its
connection): anyone may send to one (it is the usual reply-to), only its connection
may consume, and it dies with the connection.
Login-name and callback queues are in :mod:`chute.core.model.queuetypes`.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Callable, Generator
from typing import Any

from chute.core.model.address import TEMP_PREFIX, canonical, parse, user_queue
from chute.core.model.consumer import AckMode, Entry
from chute.core.model.queue import QueueChannel
from chute.core.model.queuetypes import LoginQueue, attach_forwarder
from chute.core.model.selector import compile_selector
from chute.core.model.store import StoredBlock
from chute.core.model.stream import Stream
from chute.core.model.topic import Subscription, SubscriptionKind, Topic
from chute.core.operations import looking
from chute.core.operations.browse import BrowsePage
from chute.core.operations.connlog import CONNECTIONS
from chute.core.operations.session import BrokerSession
from chute.core.rules.access import ANONYMOUS, Action, PasswordCheck, Principal
from chute.core.rules.admission import Share
from chute.core.rules.broker import Broker
from chute.core.rules.subscriptions import callback_key, durable_key
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ClientIdInUse,
    ConsumerError,
    InvalidAddress,
    NotFound,
)

log = logging.getLogger("chute.session")


def connect(
    broker: Broker,
    login: str | None,
    passcode: str | None,
    *,
    client_id: str | None = None,
    protocol: str = "native",
    peer: str = "",
    certificate_user: str | None = None,
    check: PasswordCheck | None = None,
) -> BrokerConnection:
    """Authenticate a client and make its core connection (every protocol comes here).

    ``certificate_user`` is the user a TLS client certificate names, once the server
    verified the certificate against its CA. ``check`` is this login's
    :meth:`~chute.core.rules.access.Access.password_check`, already run (off the loop).

    Raises:
        AuthenticationFailed: the login and passcode do not match (logged).
    """
    try:
        principal = broker.access.authenticate(
            login, passcode, peer=peer, certificate_user=certificate_user, check=check
        )
    except AuthenticationFailed:
        log.warning("%s authentication failed for %r from %s", protocol, login, peer or "?")
        raise
    if client_id is not None:
        holder = broker.client_ids.get(client_id)
        if holder is not None:
            log.warning(
                "%s client from %s refused: client id %r is in use by %s",
                protocol,
                peer or "?",
                client_id,
                holder,
            )
            raise ClientIdInUse(
                f"client id {client_id!r} is in use by another connection (one at a time): "
                "close that one first, or use another client id"
            )
    connection = BrokerConnection(
        broker, principal, client_id=client_id, protocol=protocol, peer=peer
    )
    CONNECTIONS.connected(  # INFO, or DEBUG when it reconnects (chute.core.operations.connlog)
        log, connection.id, protocol=protocol, peer=peer, user=str(principal), client_id=client_id
    )
    return connection


_connection_ids = itertools.count(1)


class BrokerConnection:
    """One client connection's core state and the operations it may ask for.

    Made by :func:`connect` (which authenticates); built directly, it trusts its
    ``principal`` (tests, and the broker's own clients). Used from the broker's loop only.
    """

    def __init__(
        self,
        broker: Broker,
        principal: Principal = ANONYMOUS,
        *,
        client_id: str | None = None,
        protocol: str = "core",
        peer: str = "",
    ) -> None:
        self.broker = broker
        self.id = f"c{next(_connection_ids)}"
        self.principal = principal
        self.client_id = client_id
        self.protocol = protocol
        self.peer = peer
        self.sessions: list[BrokerSession] = []
        self.temp_queues: dict[str, QueueChannel] = {}
        self.share = Share()  # what it sent lately (chute.core.rules.admission)
        self.closed = False
        self.connected_at = broker.clock()  # ms
        self.on_closed_by_broker: Callable[[str], None] | None = None
        """Set by the driver: end the transport, telling the client the reason (an
        operator closed the connection: :func:`chute.core.operations.manage.close_connection`)."""
        self._sendable: set[str] = set()  # addresses this connection was allowed to send to
        self._removed = broker.destinations.removed  # when _sendable was last valid
        broker.connections[self.id] = self
        if client_id is not None:
            broker.client_ids.setdefault(client_id, self.id)

    @property
    def login(self) -> str | None:
        """The user this connection acts for (None: anonymous)."""
        return self.principal.user

    @property
    def owner_name(self) -> str | None:
        """Who owns what this connection makes (durable subscriptions): its user when
        users are configured, else nobody in particular."""
        return None if self.broker.access.allows_all else self.login

    def authorize(self, action: Action, address: str) -> None:
        """Raise AccessDenied unless this connection may do ``action`` on ``address``:
        its user's grants, and ownership (see the module docstring).

        Ownership holds with or without users: a login-name queue is consumed and
        browsed by its user alone, a temporary queue by its connection alone (anyone
        may send to one: it is the usual reply-to address).
        """
        addr = parse(address)
        if addr.is_temporary:
            if action is Action.SEND or address in self.temp_queues:
                return
            if address not in self.broker.queues:
                raise NotFound(f"temporary queue {address} does not exist")
            raise AccessDenied(f"{address} is a temporary queue of another connection")
        login = addr.login
        if login is not None and action in (Action.CONSUME, Action.BROWSE):
            if login != self.login:
                raise AccessDenied(f"{address} is the login-name queue of another user")
            return
        self.broker.access.authorize(self.principal, action, address)

    def authorize_use(self, action: Action, address: str) -> None:
        """:meth:`authorize`, and ``create`` too if ``address`` does not exist yet: using
        it makes it, now, counted as this connection's user's (``Destinations.admit``).

        Raises:
            AccessDenied, InvalidAddress, NotFound; DestinationFull: past a limit on
            destinations made by use.
        """
        self.authorize(action, address)
        broker = self.broker
        if broker.find(canonical(address)) is None and broker.auto_create:
            self.authorize(Action.CREATE, address)
            broker.destination(address, maker=self.owner_name, quota=not self.principal.manages_all)

    def authorize_send(self, address: str) -> None:
        """:meth:`authorize_use` for sending, remembered per address (the per-message
        check, when users are configured, is one set lookup), until a destination is
        removed (sending to it again would make it again)."""
        if address not in self._sendable or self._removed != self.broker.destinations.removed:
            self.authorize_use(Action.SEND, address)
            if len(self._sendable) >= 10_000 or self._removed != self.broker.destinations.removed:
                self._sendable.clear()
                self._removed = self.broker.destinations.removed
            self._sendable.add(address)

    def session(
        self, ack_mode: AckMode = AckMode.AUTO, *, transacted: bool = False
    ) -> BrokerSession:
        session = BrokerSession(self, ack_mode, transacted)
        self.sessions.append(session)
        return session

    def hold_deliveries(self, held: bool) -> None:
        """Stop (``held``) or resume pushing messages to this connection's consumers.

        Credit bounds what a consumer is sent, but a client may grant any amount:
        while its transport cannot write more (its buffer is past the high-water
        mark: a slow reader, a poller that does not poll), the broker stops
        delivering to it rather than buffer without bound; once the transport
        drains, deliveries go on from the credit left.
        """
        for session in self.sessions:
            for consumer in list(session.consumers.values()):
                consumer.held = held
                if not held and not consumer.closed:
                    consumer.queue.deliver()

    def temporary_queue(self) -> str:
        """Create a queue that lives as long as this connection; returns its address."""
        address = f"queue:{TEMP_PREFIX}{secrets.token_hex(12)}"  # unguessable
        settings = self.broker.settings(address)
        queue = QueueChannel(address, address, settings, self.broker, durable=False)
        self.broker.add_queue(queue)
        self.temp_queues[address] = queue
        return address

    # -- looking ----------------------------------------------------------------------

    def browse_steps(
        self,
        address: str,
        *,
        after: int = 0,
        before: int = 0,
        selector: str | None = None,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> Generator[None, None, BrowsePage]:
        """One page of a walk over a queue in sequence order, built a step per ``next()``
        (see ``looking.browse_steps``); nothing is consumed.

        Raises:
            AccessDenied, InvalidAddress, InvalidSelector; a step: StoreError.
        """
        self.authorize(Action.BROWSE, address)
        return looking.browse_steps(
            self.broker,
            address,
            after=after,
            before=before,
            selector=selector,
            max_messages=max_messages,
            max_bytes=max_bytes,
        )

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Entry]:
        """A whole walk at once, in sequence order (see ``looking.browse``).

        Raises:
            AccessDenied, InvalidAddress, InvalidSelector, StoreError.
        """
        self.authorize(Action.BROWSE, address)
        return looking.browse(self.broker, address, selector, limit)

    def stats_page(
        self, *, pattern: str | None = None, after: str = "", limit: int = 0, contains: str = ""
    ) -> dict[str, Any]:
        """One page of the destinations with their counters (see ``looking.stats_page``):
        every one for a user who may manage everything; else those they may browse,
        consume or manage, and of the destinations made by use, only their own count.
        Prepared transactions as :meth:`prepared` shows them.

        Raises:
            InvalidAddress: a bad ``pattern``.
        """
        sees = None if self.principal.manages_all else self._sees
        stats = looking.stats_page(
            self.broker, pattern=pattern, after=after, limit=limit, sees=sees, contains=contains
        )
        stats["prepared"] = self.prepared()
        if sees is not None:  # of the destinations made by use, only their own count
            mine = stats["made"]["by_user"].get(self.login or "anonymous", 0)
            stats["made"]["by_user"] = {self.login or "anonymous": mine}
        return stats

    def stats(self) -> dict[str, Any]:
        """Every page of :meth:`stats_page` joined (for tests and in-process use)."""
        return looking.joined_pages(lambda after: self.stats_page(after=after))

    def _sees(self, address: str) -> bool:
        for action in (Action.BROWSE, Action.CONSUME, Action.MANAGE):
            try:
                self.authorize(action, address)
            except AccessDenied:
                continue
            return True
        return False

    # -- deleting and purging -----------------------------------------------------------

    def delete(self, address: str, *, force: bool = False) -> int:
        """Delete a queue or topic (``Destinations.delete``: its messages go, its
        consumers are closed; a topic's durable subscriptions only with ``force``).
        Needs ``delete`` on the address (and, for another user's durable subscription,
        ``manage = ["*"]``). Returns how many messages went.

        Raises:
            AccessDenied, InvalidAddress, NotFound, ConsumerError, TransactionError.
        """
        target = canonical(address)
        self.authorize(Action.DELETE, target)
        return self.broker.destinations.delete(
            target, force=force, check_owner=self.check_owner, by=str(self.principal)
        )

    def purge(self, address: str) -> int:
        """Remove every waiting message of a queue (in-flight ones stay); how many.
        Needs ``delete`` on the address.

        Raises:
            AccessDenied, InvalidAddress, NotFound.
        """
        target = canonical(address)
        self.authorize(Action.DELETE, target)
        return self.broker.destinations.purge(target, by=str(self.principal))

    # -- prepared transactions and committed batches -----------------------------------

    def xa_key(self, xid: str) -> str:
        """The broker-wide key of this user's transaction ``xid`` (``user/xid``; the xid
        itself without users), so that users never see or settle each other's. A user
        who may manage everything names another user's transaction by its key."""
        if self.login is None or self.broker.access.allows_all:
            return xid
        prefix = f"{self.login}/"
        if self.principal.manages_all and "/" in xid and not xid.startswith(prefix):
            return xid
        return prefix + xid

    def prepared(self) -> list[str]:
        """The xids of this user's prepared transactions waiting for commit or rollback
        (every user's, as keys, for one who may manage everything)."""
        keys = self.broker.xa.xids()
        if self.broker.access.allows_all or self.login is None:
            return keys
        prefix = f"{self.login}/"
        manager = self.principal.manages_all
        return [k.removeprefix(prefix) for k in keys if manager or k.startswith(prefix)]

    def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (raises NotFound for an unknown xid)."""
        self.broker.xa.commit(self.xa_key(xid))

    def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction (raises NotFound for an unknown xid)."""
        self.broker.xa.rollback(self.xa_key(xid))

    def commit_batch(self, sink: str, batch: int, xids: tuple[str, ...], *, keep: bool) -> bool:
        """Commit a sink's batch once (``CommittedBatches.commit``); False for a duplicate.
        A sink's batches, like its transactions, are its user's own."""
        return self.broker.batches.commit(
            self.xa_key(sink), batch, tuple(self.xa_key(x) for x in xids), keep=keep
        )

    # -- cursors (the Spark connector) ---------------------------------------------------

    def cursor_open(
        self, address: str, name: str | None, *, selector: str | None = None, lease_ms: int = 0
    ) -> tuple[int, int]:
        """Open a cursor (or, with no name, look at a queue); ``(earliest, head)``."""
        self.authorize(Action.CONSUME, address)
        self.authorize(Action.BROWSE, address)
        cursors = self.broker.cursors
        if name is None:
            return cursors.info(address)
        self.authorize_use(Action.CONSUME, address)
        return cursors.open(address, name, selector=selector, lease_ms=lease_ms, owner=self.id)

    def cursor_fetch(
        self,
        address: str,
        name: str | None,
        start: int,
        end: int,
        *,
        max_messages: int = 0,
        max_bytes: int = 0,
    ) -> tuple[int, list[Entry]]:
        """One page of a cursor's range (see ``Cursors.fetch``)."""
        self.authorize(Action.BROWSE, address)
        return self.broker.cursors.fetch(
            address, name, start, end, max_messages=max_messages, max_bytes=max_bytes
        )

    def stream_blocks(
        self, address: str, start: int, end: int, *, max_messages: int = 0, max_bytes: int = 0
    ) -> tuple[int, list[StoredBlock]] | None:
        """:meth:`cursor_fetch` without a cursor, of a stream: the page as the store holds
        it (``Stream.read_blocks``), for a driver that sends the blocks on unchanged; None
        if ``address`` is not a stream (read it with :meth:`cursor_fetch`)."""
        self.authorize(Action.BROWSE, address)
        found = self.broker.destination(address, create=False)
        if not isinstance(found, Stream):
            return None
        return found.read_blocks(start, end, max_messages=max_messages, max_bytes=max_bytes)

    def cursor_ack(self, address: str, name: str, end: int) -> int:
        """Consume everything the cursor holds below ``end``; how many."""
        self.authorize(Action.CONSUME, address)
        return self.broker.cursors.ack(address, name, end)

    def cursor_close(self, address: str, name: str, *, delete: bool = False) -> None:
        self.authorize(Action.CONSUME, address)
        if delete:
            self.authorize(Action.DELETE, address)
        self.broker.cursors.close(address, name, delete=delete)

    # -- subscriptions ------------------------------------------------------------------

    def unsubscribe(self, name: str, *, client_id: str | None = None) -> None:
        """Delete a durable subscription (of ``client_id``, default this connection's; a
        shared durable subscription when neither has one) and every message it holds.

        Raises:
            NotFound: no such subscription. ConsumerError: it still has consumers.
        """
        owner = client_id or self.client_id
        subs = self.broker.subscriptions
        sub = (
            (subs.get(durable_key(name, owner)) if owner else None)
            or subs.get(durable_key(name, None))
            or subs.get(callback_key(name))
        )
        if sub is None:
            raise NotFound(
                f"no durable subscription named {name!r}"
                + (f" for client id {owner!r}" if owner else "")
            )
        self.check_owner(sub)
        self.authorize(Action.DELETE, sub.address)
        if sub.router.consumers and sub.kind is not SubscriptionKind.CALLBACK:
            raise ConsumerError(f"subscription {name!r} still has consumers; close them first")
        for consumer in list(sub.router.consumers):
            sub.detach(consumer)
        subs.drop(sub)

    def check_owner(self, sub: Subscription) -> None:
        """Raise AccessDenied unless this connection's user made ``sub`` (or may manage
        everything, or nobody is restricted)."""
        if sub.owner is None or sub.owner == self.login or self.principal.manages_all:
            return
        raise AccessDenied(f"subscription {sub.name!r} belongs to another user")

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        """Create (or replace) a callback queue: a durable subscription of ``topic`` that
        forwards every message to ``forward_to``.

        Raises:
            InvalidAddress: ``topic`` is not a topic, or forwards to itself. InvalidSelector.
        """
        broker = self.broker
        address = canonical(topic)
        target = canonical(forward_to)
        if target == address:
            raise InvalidAddress("a callback cannot forward a topic to itself")
        self.authorize_use(Action.CONSUME, address)
        self.authorize(Action.CREATE, address)
        self.authorize_use(Action.SEND, target)
        dest = broker.destination(address)
        if not isinstance(dest, Topic):
            raise InvalidAddress(f"{topic} is not a topic")
        broker.destination(target)
        if selector:
            compile_selector(selector)
        key = callback_key(name)
        old = broker.subscriptions.get(key)
        if old is not None:
            self.check_owner(old)
            for consumer in list(old.router.consumers):
                old.detach(consumer)
            broker.subscriptions.drop(old)
        sub = broker.subscriptions.create(
            key,
            dest,
            SubscriptionKind.CALLBACK,
            selector=selector,
            forward_to=target,
            owner=self.owner_name,
        )
        attach_forwarder(broker, sub, target)

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Close every session, drop temporary queues and login pipes. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for session in list(self.sessions):
            session.close()
        for queue in self.temp_queues.values():
            self.broker.delete_queue(queue)
        self.temp_queues.clear()
        if self.login is not None:
            login_queue = self.broker.queues.get(user_queue(self.login))
            if isinstance(login_queue, LoginQueue):
                login_queue.drop_pipe(self.id)
        self.broker.connections.pop(self.id, None)
        if self.client_id is not None and self.broker.client_ids.get(self.client_id) == self.id:
            del self.broker.client_ids[self.client_id]

    def session_closed(self, session: BrokerSession) -> None:
        """A session of this connection closed."""
        if session in self.sessions:
            self.sessions.remove(session)

    def __repr__(self) -> str:
        return f"BrokerConnection({self.id}, {self.protocol}, user={self.principal})"
