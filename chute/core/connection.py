"""Connections: one logged-in client each, and the one face of the broker adapters drive.

A :class:`Connection` is one logged-in client (seed 001's *session*), made by
:func:`connect`, which authenticates it (:mod:`chute.core.access`). Every
adapter drives the broker through it: it owns
:class:`~chute.core.session.Session` objects (seed 003/JMS sessions: an ack
mode and maybe a local transaction), its temporary queues and, for a named
user, its pipe from the user's login-name queue; and it carries out what a
client asks for the connection as a whole (browse, prepared transactions,
cursors, subscriptions, stats). Every such operation asks the broker's
:class:`~chute.core.access.Access` first, so no protocol decides on its own
what a client may do.

Closing a connection undoes all of it: consumers' in-flight messages go back
in their place, an open transaction rolls back, temporary queues and
non-durable subscriptions disappear.

Temporary (session) queues from seed 001 live here too —
``queue:__tmp__.<connection>.<n>``: anyone may send to one (it is the usual
reply-to), only its connection may consume, and it dies with the connection.
Login-name and callback queues are in :mod:`chute.core.queuetypes`.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from chute.core.access import ANONYMOUS, Action, Principal
from chute.core.address import TEMP_PREFIX, canonical, user_queue
from chute.core.broker import Broker
from chute.core.consumer import AckMode, Entry
from chute.core.queue import QueueChannel
from chute.core.queuetypes import LoginQueue, attach_forwarder
from chute.core.selector import compile_selector
from chute.core.session import Session
from chute.core.subscriptions import callback_key, durable_key
from chute.core.topic import SubscriptionKind, Topic
from chute.errors import AuthenticationFailed, ConsumerError, InvalidAddress, NotFound

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
) -> Connection:
    """Authenticate a client and make its core connection (every protocol comes here).

    ``certificate_user`` is the user a TLS client certificate names, once the server
    verified the certificate against its CA.

    Raises:
        AuthenticationFailed: the login and passcode do not match (logged).
    """
    try:
        principal = broker.access.authenticate(
            login, passcode, peer=peer, certificate_user=certificate_user
        )
    except AuthenticationFailed:
        log.warning("%s authentication failed for %r from %s", protocol, login, peer or "?")
        raise
    connection = Connection(broker, principal, client_id=client_id, protocol=protocol, peer=peer)
    log.info(
        "%s client %s connected from %s (user=%s, client_id=%s)",
        protocol,
        connection.id,
        peer or "?",
        principal,
        client_id,
    )
    return connection


_connection_ids = itertools.count(1)


class Connection:
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
        self.sessions: list[Session] = []
        self.temp_queues: dict[str, QueueChannel] = {}
        self._temp_ids = itertools.count(1)
        self.closed = False
        broker.connections[self.id] = self

    @property
    def login(self) -> str | None:
        """The user this connection acts for (None: anonymous)."""
        return self.principal.user

    def authorize(self, action: Action, address: str) -> None:
        """Raise AccessDenied unless this connection's user may do ``action`` on ``address``."""
        self.broker.access.authorize(self.principal, action, address)

    def session(self, ack_mode: AckMode = AckMode.AUTO, *, transacted: bool = False) -> Session:
        session = Session(self, ack_mode, transacted)
        self.sessions.append(session)
        return session

    def temporary_queue(self) -> str:
        """Create a queue that lives as long as this connection; returns its address."""
        address = f"queue:{TEMP_PREFIX}{self.id}.{next(self._temp_ids)}"
        settings = self.broker.settings(address)
        queue = QueueChannel(address, address, settings, self.broker, durable=False)
        self.broker.add_queue(queue)
        self.temp_queues[address] = queue
        return address

    # -- looking ----------------------------------------------------------------------

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Entry]:
        """A snapshot of a queue in delivery order; nothing is consumed.

        Raises:
            AccessDenied, InvalidAddress, InvalidSelector, NotFound.
        """
        self.authorize(Action.BROWSE, address)
        return self.broker.browse(address, selector, limit)

    def stats(self) -> dict[str, Any]:
        """Every destination with its counters (see ``Broker.stats``)."""
        self.authorize(Action.MANAGE, "*")
        return self.broker.stats()

    # -- prepared transactions and committed batches -----------------------------------

    def prepared(self) -> list[str]:
        """The xids of the prepared transactions waiting for commit or rollback."""
        self.authorize(Action.MANAGE, "*")
        return self.broker.xa.xids()

    def commit_prepared(self, xid: str) -> None:
        """Commit a prepared transaction (raises NotFound for an unknown xid)."""
        self.authorize(Action.MANAGE, "*")
        self.broker.xa.commit(xid)

    def rollback_prepared(self, xid: str) -> None:
        """Roll back a prepared transaction (raises NotFound for an unknown xid)."""
        self.authorize(Action.MANAGE, "*")
        self.broker.xa.rollback(xid)

    def commit_batch(self, sink: str, batch: int, xids: tuple[str, ...], *, keep: bool) -> bool:
        """Commit a sink's batch once (``CommittedBatches.commit``); False for a duplicate."""
        return self.broker.batches.commit(sink, batch, xids, keep=keep)

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

    def cursor_ack(self, address: str, name: str, end: int) -> int:
        """Consume everything the cursor holds below ``end``; how many."""
        self.authorize(Action.CONSUME, address)
        return self.broker.cursors.ack(address, name, end)

    def cursor_close(self, address: str, name: str, *, delete: bool = False) -> None:
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
        self.authorize(Action.DELETE, sub.address)
        if sub.router.consumers and sub.kind is not SubscriptionKind.CALLBACK:
            raise ConsumerError(f"subscription {name!r} still has consumers; close them first")
        for consumer in list(sub.router.consumers):
            sub.detach(consumer)
        subs.drop(sub)

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
        self.authorize(Action.CONSUME, address)
        self.authorize(Action.SEND, target)
        dest = broker.destination(address)
        if not isinstance(dest, Topic):
            raise InvalidAddress(f"{topic} is not a topic")
        broker.destination(target)
        if selector:
            compile_selector(selector)
        key = callback_key(name)
        old = broker.subscriptions.get(key)
        if old is not None:
            for consumer in list(old.router.consumers):
                old.detach(consumer)
            broker.subscriptions.drop(old)
        sub = broker.subscriptions.create(
            key, dest, SubscriptionKind.CALLBACK, selector=selector, forward_to=target
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

    def session_closed(self, session: Session) -> None:
        """A session of this connection closed."""
        if session in self.sessions:
            self.sessions.remove(session)

    def __repr__(self) -> str:
        return f"Connection({self.id}, {self.protocol}, user={self.principal})"
