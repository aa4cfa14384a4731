# Written by scripts/unasync.py from chute/client/aio_client.py: edit that, then run the script.
"""The blocking client: :mod:`chute.client.api`'s connection, session and consumer over
the link of :mod:`chute.client.link`.

What the methods mean, their arguments and errors, is declared once in
:mod:`chute.client.api`. ``Received.ack()`` and ``nack()`` only queue a packet.
A connection to a URL that lists several nodes (or gives ``failover``) **moves**
when the node it is on goes: to the next node that answers
(:mod:`chute.client.nodes`), at once, in a thread of its own, and **resumes**
its sessions there: each is opened again (naming the same producer), its
unconfirmed persistent sends are sent again in order (the broker drops a resend
it already stored), and its consumers are opened again (what they had received
and not acked comes again, flagged redelivered). A transaction in progress
cannot be carried over: the session's next call raises a
:class:`~chute.errors.TransactionLost` that says to retry it. What waited on the
lost node (a send's confirmation, a receive) waits on the new one; the
connection's own requests wait for the move and go to the new node.
:attr:`BlockingConnection.node` says which node it is on.

A session's **confirm window**
(:class:`~chute.client.confirm.ConfirmWindow`) keeps up to N persistent
sends (transacted: commits) awaiting the broker's fsync while the producer goes
on; one thread at a time awaits them, oldest first, and a failure is raised with a
note that it was for an earlier send.

One source serves both broker clients: the blocking modules are written from the
asyncio ones (``scripts/unasync.py``); only their transports, the links and
channels, are written apart. Whether these objects may be shared between threads
is their link's business (:class:`~chute.client.link.Link`): they use
only its public methods, none of them touches the protocol state.
"""

from __future__ import annotations

import weakref
from collections.abc import (
    Sequence,
)
from typing import Any, TypeVar

from chute.client import requests
from chute.client.blocking_session import BlockingSession
from chute.client.closing import ClosedAtExit
from chute.client.confirm import ConfirmWindow
from chute.client.consumer import BlockingConsumer
from chute.client.cursors import Cursors
from chute.client.link import Link
from chute.client.nodes import Nodes, OnNode, Reached, log
from chute.client.tls import client_context
from chute.client.url import parse_url
from chute.errors import ChuteError, ConnectError

T = TypeVar("T")


def connect(
    url: str = "chute://127.0.0.1:5445",
    *,
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 10.0,
    heartbeat: float = 0.0,
    tls_ca: str | None = None,
    tls_verify: bool = True,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> BlockingConnection:
    """Connect to a broker; the :class:`BlockingConnection` returned is a context manager too.

    Args:
        url: ``chute://host[:port]`` (port 5445 by default), ``chutes://`` for TLS;
            ``chute://h1:5445,h2:5445`` lists the nodes of a cluster: the connection is
            on one (from a random one, or the first with ``?order=listed``) and moves
            to another when it goes;
            ``ws://host[:port]/chute`` (the HTTP port, 8445 by default), ``wss://``,
            ``http://`` and ``https://`` where only HTTP gets through
            (:mod:`chute.client.url`); ``chute://login:passcode@host`` carries
            credentials (percent-encoded).
        client_id: names the client for durable subscriptions.
        login, passcode: credentials, if the broker requires them (these win over the
            URL's).
        timeout: seconds to wait for the connection and for every request's answer.
        heartbeat: seconds; if > 0, ask the broker to check liveness that often.
        tls_ca: for TLS (``chutes://``, ``wss://``, ``https://``): a CA file to trust
            (default: the system's).
        tls_verify: for TLS: False skips the certificate check (testing only).
        tls_cert, tls_key: for TLS: the client's certificate (PEM; the key may
            be in the same file), for a broker that asks for one: its commonName names
            the user, who then needs no passcode.

    Raises:
        ConnectError: cannot reach the broker (of several nodes: any, and the error
            names each node and why), or it refused the connection.
        AuthenticationFailed: the broker rejected the credentials.
        RequestTimeout: the broker did not answer in time.
    """
    target = parse_url(url)
    login, passcode = target.credentials(login, passcode)
    context = None
    if target.tls:
        context = client_context(tls_ca, verify=tls_verify, cert_file=tls_cert, key_file=tls_key)
    nodes = Nodes(target, timeout, context, client_id, login, passcode, heartbeat)
    reached = nodes.connect()
    if nodes.several:
        log.info("connected to node %s", reached.node.node)
    return BlockingConnection(reached, nodes)


class BlockingConnection(Cursors, ClosedAtExit):
    """A connection to a broker (:class:`chute.client.api.Connection`). Use
    :func:`connect` to make one."""

    def __init__(self, reached: Reached, nodes: Nodes) -> None:
        self.connection_id = reached.connected.connection_id
        self._on = OnNode(reached, nodes, self._arrived)
        self._resumes = nodes.moves  # sessions resume on the node moved to
        self._windows: weakref.WeakSet[ConfirmWindow] = weakref.WeakSet()  # close awaits them
        self._sessions: weakref.WeakSet[BlockingSession] = weakref.WeakSet()  # resumed when moving

    @property
    def _link(self) -> Link:
        return self._on.link

    @property
    def timeout(self) -> float:
        return self._link.timeout

    @property
    def node(self) -> str:
        return self._on.node.node

    @property
    def closed(self) -> bool:
        return self._on.closed

    def _arrived(self, reached: Reached) -> None:
        """The connection moved to ``reached``'s node: resume its sessions there."""
        self.connection_id = reached.connected.connection_id
        for session in list(self._sessions):
            session.resume(reached.link)

    def _moved(self) -> bool:
        """After the link was lost: wait for the move to end (its sessions resumed);
        whether it reached a node."""
        try:
            self._on.settled()
        except ChuteError:
            return False
        return True

    def _call(self, request: requests.Request[T]) -> T:
        """``request``'s answer from the node the connection is on. Raises as
        :meth:`Link.call`."""
        link = self._on.current()
        return link.call(request)

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> BlockingSession:
        """Open a session (no round trip: errors surface on its first request)."""
        if confirm_window < 0:
            raise ValueError("confirm_window must not be negative")
        if self._on.moving:
            raise ConnectError(
                f"the connection to node {self.node} was lost and is moving to another "
                "node: a request of the connection (stat, ...) waits for it; then open "
                "the session again"
            )
        session = BlockingSession(self, self._link, ack, transacted, confirm_window)
        if self._resumes:
            self._sessions.add(session)
        if confirm_window:
            self._windows.add(session._window)
        return session

    def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]:
        """Asks page after page and joins them."""
        stats, after = self._call(requests.stat_fetch(pattern, "", page_size))
        while after is not None:
            page, after = self._call(requests.stat_fetch(pattern, after, page_size))
            stats = requests.join_stats(stats, page)
        return stats

    def delete(self, address: str, *, force: bool = False) -> int:
        return self._call(requests.delete(address, force))

    def purge(self, address: str) -> int:
        return self._call(requests.purge(address))

    def create(self, address: str) -> bool:
        return self._call(requests.create(address))

    def move(
        self,
        source: str,
        target: str,
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> int:
        return self._call(requests.move(source, target, selector, seqs, limit))

    def retry_dead_letters(
        self,
        source: str = "queue:__sys__deadLetter",
        *,
        selector: str | None = None,
        seqs: Sequence[int] | None = None,
        limit: int = 0,
    ) -> dict[str, int]:
        return self._call(requests.retry_dead_letters(source, selector, seqs, limit))

    def prepared(self) -> list[str]:
        return self._call(requests.prepared())

    def commit_prepared(self, xid: str) -> None:
        self._call(requests.commit_prepared(xid))

    def rollback_prepared(self, xid: str) -> None:
        self._call(requests.rollback_prepared(xid))

    def commit_batch(
        self, sink: str, batch: int, xids: Sequence[str], *, keep: bool = True
    ) -> bool:
        return self._call(requests.commit_batch(sink, batch, xids, keep))

    def close(self) -> None:
        """Await every session's unconfirmed sends, send the acks and credit owed, then
        DISCONNECT; never raises for a connection that is already gone."""
        self._on.closing()
        failure: ChuteError | None = None
        if not self._link.closed:
            for window in list(self._windows):
                try:
                    window.settle_all()
                except ChuteError as exc:
                    failure = failure or exc
        self._link.close()
        if failure is not None:
            raise failure

    def _described(self) -> str:
        return "the connection"

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<chute.Connection {self.connection_id or '?'} on {self.node} {state}>"


__all__ = ["BlockingConnection", "BlockingConsumer", "BlockingSession", "connect"]
