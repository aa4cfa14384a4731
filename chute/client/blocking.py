# Written by scripts/unasync.py from chute/client/aio_client.py: edit that, then run the script.
"""The blocking client: :mod:`chute.client.api`'s connection, session and consumer over
the link of :mod:`chute.client.link`.

What the methods mean, their arguments and errors, is declared once in
:mod:`chute.client.api`. ``Received.ack()`` and ``nack()`` only queue a packet.
A connection to a URL that lists several nodes **moves** when the node it is on
goes: to the next node that answers (:mod:`chute.client.nodes`), at once, in
a thread of its own. What the lost node had is not carried over: what waited on
it (a send not yet confirmed, a receive, a commit) raises
:class:`~chute.errors.ConnectError`, and so does every later call of its
sessions and consumers; the connection's own requests wait for the move and go
to the new node, and sessions opened after it are there.
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

import functools
import weakref
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final, TypeVar

from chute.client import requests
from chute.client.api import Page
from chute.client.closing import ClosedAtExit
from chute.client.confirm import ConfirmWindow
from chute.client.link import Link
from chute.client.nodes import Nodes, OnNode, Reached, log
from chute.client.outgoing import SendFields
from chute.client.received import Received
from chute.client.requests import CursorPage, Pending
from chute.client.sessions import ConsumerOptions
from chute.client.tls import client_context
from chute.client.url import parse_url
from chute.errors import ChuteError, ConnectError, ConsumerError
from chute.message import DEFAULT_PRIORITY, KEY_PROPERTY, BodyKind, Message
from chute.protocol import packets as p

T = TypeVar("T")

_NO_ENTRIES: Final = bytes(4)  # a CursorPage body's entry count when it has none


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


class BlockingConnection(ClosedAtExit):
    """A connection to a broker (:class:`chute.client.api.Connection`). Use
    :func:`connect` to make one."""

    def __init__(self, reached: Reached, nodes: Nodes) -> None:
        self.connection_id = reached.connected.connection_id
        self._on = OnNode(reached, nodes, self._arrived)
        self._windows: weakref.WeakSet[ConfirmWindow] = weakref.WeakSet()  # close awaits them

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
        """The connection moved to ``reached``'s node."""
        self.connection_id = reached.connected.connection_id
        self._windows = weakref.WeakSet()  # those of the lost node's sessions: gone with it

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
        session_id = self._link.open_session(ack, transacted)
        window = ConfirmWindow(self._link, session_id, confirm_window)
        if confirm_window:
            self._windows.add(window)
        return BlockingSession(self, self._link, session_id, window)

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

    # -- cursors: reading a destination by sequence number (docs/spark.md) -------------

    def cursor_open(
        self,
        address: str,
        cursor: str | None = None,
        *,
        selector: str | None = None,
        lease_ms: int = 0,
    ) -> tuple[int, int]:
        return self._call(requests.cursor_open(address, cursor, selector, lease_ms))

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
        return self._call(
            requests.cursor_fetch(address, cursor, start, end, max_messages, max_bytes)
        )

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
        """Pages of ``[start, end)``; the request for the next page goes out while the
        caller works on this one."""
        for page in self._pages(
            requests.cursor_fetch, address, cursor, start, end, page_messages, page_bytes
        ):
            if page:
                yield page

    def cursor_read_raw(
        self,
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        *,
        page_messages: int = 4096,
        page_bytes: int = 4 << 20,
    ) -> Iterator[bytes]:
        """As :meth:`cursor_read`, but each page is the CursorPage's body, its entries
        undecoded (for :func:`chute.protocol.columns.page_columns`; Spark's source reads
        them so). Pages without messages are skipped."""
        for body in self._pages(
            requests.cursor_fetch_raw, address, cursor, start, end, page_messages, page_bytes
        ):
            if body[8:12] != _NO_ENTRIES:
                yield body

    def _pages(  # noqa: PLR0917 - the arguments of a cursor fetch
        self,
        fetch: Callable[[str, str | None, int, int, int, int], requests.Request[tuple[int, T]]],
        address: str,
        cursor: str | None,
        start: int,
        end: int,
        page_messages: int,
        page_bytes: int,
    ) -> Iterator[T]:
        """Each page's answer (what follows ``next`` in it) for ``[start, end)``,
        requesting the next page before handing out this one."""
        link = self._on.current()
        if start >= end:
            return
        pending = link.start(fetch(address, cursor, start, end, page_messages, page_bytes))
        while True:
            next_start, page = link.result(pending)
            more = start < next_start < end
            if more:
                pending = link.start(
                    fetch(address, cursor, next_start, end, page_messages, page_bytes)
                )
            yield page
            if not more:
                return
            start = next_start

    def cursor_ack(self, address: str, cursor: str, end: int) -> None:
        self._call(requests.cursor_ack(address, cursor, end))

    def cursor_close(self, address: str, cursor: str, *, delete: bool = False) -> None:
        self._call(requests.cursor_close(address, cursor, delete))

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


class BlockingSession(ClosedAtExit):
    """A session (:class:`chute.client.api.Session`)."""

    def __init__(
        self,
        connection: BlockingConnection,
        link: Link,
        session_id: int,
        window: ConfirmWindow,
    ) -> None:
        self.connection = connection
        self.id = session_id
        self._link = link
        self._window = window
        self._windowed = window.size > 0

    @property
    def confirm_window(self) -> int:
        return self._window.size

    @property
    def unconfirmed(self) -> int:
        return len(self._window)

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
        if key is not None:  # the key travels as the string property "key"
            properties = {**(properties or {}), KEY_PROPERTY: key}
        link = self._link
        windowed = self._windowed
        options: SendFields = (
            priority,
            ttl,
            properties,
            persistent,
            correlation_id,
            reply_to,
            type,
            id,
            kind,
        )
        corr = link.send(self.id, address, body, options, windowed)
        if corr:
            if windowed:
                self._window.add(corr)
            else:
                link.wait(corr)
        if link.congested:
            link.drain()

    def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None:
        corrs = self._link.send_many(self.id, address, messages, ttl)
        if self._windowed:
            for corr in corrs:
                self._window.add(corr)
        else:
            for corr in corrs:
                self._link.wait(corr)

    def flush(self) -> None:
        self._window.await_down_to(0)

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
    ) -> BlockingConsumer:
        consumer_id = self._link.open_consumer(
            self.id,
            address,
            ConsumerOptions(selector, prefetch, exclusive, subscription, durable, shared, offset),
        )
        return BlockingConsumer(self, self._link, consumer_id)

    def commit(self) -> None:
        """With a ``confirm_window`` of N, returns as soon as at most N commits await
        the broker's answer (pipelined transactions). A commit the broker then refused
        is raised by a later call; as with any refused commit, its transaction stays
        open, now with whatever was sent since: roll back and send again from the
        last commit :meth:`flush` confirmed."""
        corr = self._link.commit(self.id)
        if self._window.size:
            self._window.add(corr, flush=True)
        else:
            self._link.wait(corr)

    def rollback(self) -> None:
        self._link.wait(self._link.rollback(self.id))

    def prepare(self, xid: str) -> None:
        self._link.wait(self._link.prepare(self.id, xid))

    def browse(self, address: str, selector: str | None = None, limit: int = 0) -> list[Message]:
        if limit <= 0:
            return [message for message in self.iter_browse(address, selector)]
        found: list[Message] = []
        after = before = 0
        while len(found) < limit:  # page by page, each no larger than what is still missing
            page = self._link.call(
                requests.browse_fetch(
                    address, selector, after, before, 0 if selector else limit - len(found)
                ),
                session=self.id,
            )
            found += (message for _seq, message in page.messages)
            if page.done:
                break
            after, before = page.after, page.before
        return found[:limit]

    def iter_browse(
        self,
        address: str,
        selector: str | None = None,
        *,
        page_messages: int = 0,
        page_bytes: int = 0,
    ) -> Iterator[Message]:
        """The request for the next page goes out while the caller works on this one;
        a walk given up forgets its last request."""
        link = self._link
        fetch = functools.partial(
            requests.browse_fetch,
            address,
            selector,
            max_messages=page_messages,
            max_bytes=page_bytes,
        )
        page = link.call(fetch(), session=self.id)
        pending: Pending[p.BrowsePage] | None = None
        try:
            while True:
                if not page.done:
                    pending = link.start(fetch(after=page.after, before=page.before))
                for _seq, message in page.messages:
                    yield message
                if pending is None:
                    return
                page = link.result(pending)
                pending = None
        finally:
            if pending is not None:
                link.forget(pending)

    def temporary_queue(self) -> str:
        return self._link.call(requests.temporary_queue(), session=self.id)

    def unsubscribe(self, name: str) -> None:
        self._link.call(requests.unsubscribe(name), session=self.id)

    def callback(self, topic: str, name: str, forward_to: str, selector: str | None = None) -> None:
        self._link.call(requests.callback(topic, name, forward_to, selector), session=self.id)

    def _described(self) -> str:
        return f"session {self.id}"

    def close(self) -> None:
        try:
            self._window.settle_all()
        finally:
            self._link.close_session(self.id)


class BlockingConsumer(ClosedAtExit):
    """A consumer (:class:`chute.client.api.Consumer`); iterate it to receive
    until it closes."""

    def __init__(self, session: BlockingSession, link: Link, consumer_id: int) -> None:
        self.session = session
        self.id = consumer_id
        self._link = link

    @property
    def closed(self) -> bool:
        return not self._link.consumer_open(self.id)

    def receive(self, timeout: float | None = None) -> Received | None:
        """The link's own ``receive`` (no frame of this method's own while it waits)."""
        return self._link.receive(self.id, timeout)

    def __iter__(self) -> Iterator[Received]:
        return self._iterate()

    def _iterate(self) -> Iterator[Received]:
        while True:
            try:
                message = self.receive()
            except ConsumerError:
                if self.closed:
                    return
                raise
            if message is not None:
                yield message

    def _described(self) -> str:
        return f"consumer {self.id}"

    def close(self) -> None:
        self._link.close_consumer(self.id)


__all__ = ["BlockingConnection", "BlockingConsumer", "BlockingSession", "connect"]
