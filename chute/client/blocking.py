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

import contextlib
import functools
import weakref
from collections.abc import (
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

from chute.client import requests
from chute.client.closing import ClosedAtExit
from chute.client.confirm import ConfirmWindow
from chute.client.consumer import BlockingConsumer
from chute.client.cursors import Cursors
from chute.client.link import Link
from chute.client.nodes import Nodes, OnNode, Reached, log
from chute.client.outgoing import SendFields
from chute.client.requests import Pending
from chute.client.sessions import ConsumerOptions
from chute.client.tls import client_context
from chute.client.url import parse_url
from chute.errors import ChuteError, ConnectError, TransactionLost
from chute.message import DEFAULT_PRIORITY, KEY_PROPERTY, BodyKind, Message, new_message_id
from chute.protocol import packets as p

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


class BlockingSession(ClosedAtExit):
    """A session (:class:`chute.client.api.Session`). On a connection that moves,
    it keeps its unconfirmed sends' packets to resend them (:meth:`resume`)."""

    def __init__(
        self,
        connection: BlockingConnection,
        link: Link,
        ack: str,
        transacted: bool,
        confirm_window: int,
    ) -> None:
        self.connection = connection
        self._ack = ack
        self._transacted = transacted
        resumes = connection._resumes
        # the producer the broker knows this session's sends by (duplicate detection)
        self._producer = new_message_id() if resumes and not transacted else None
        self.id = link.open_session(ack, transacted, self._producer)
        self._link = link
        self._window = ConfirmWindow(link, self.id, confirm_window, self if resumes else None)
        self._windowed = confirm_window > 0
        self._keeps = self._producer is not None  # sends are kept until confirmed
        self._resuming = resumes  # sends go on on the node the connection moves to
        self._consumers: weakref.WeakSet[BlockingConsumer] = weakref.WeakSet()
        self._closed = False

    def resume(self, link: Link) -> None:
        """The connection moved to ``link``: open this session there again, send its
        unconfirmed sends again, open its consumers again. A transaction in progress
        is lost: the next call raises a TransactionLost saying to retry it. If
        ``link`` is lost meanwhile, the next move resumes the session again."""
        if self._closed:
            return
        try:
            session_id = link.open_session(self._ack, self._transacted, self._producer)
            # the window first: a send made meanwhile still finds the lost link, and
            # waits for this move
            self._window.moved(link, session_id, resend=not self._transacted)
            if self._transacted:
                self._window.lost = TransactionLost(
                    f"the connection to the broker was lost during a transaction of session "
                    f"{session_id}: it was rolled back (a commit awaiting its answer may or "
                    "may not have been applied); retry the transaction"
                )
            self.id = session_id  # before the link: a send that reads the new link
            self._link = link  # also reads the new id
            for consumer in list(self._consumers):
                consumer.resume(link, session_id)
        except ConnectError as exc:
            self._link = link  # lost too: the next move resumes the session from it
            log.info("session %s not resumed yet: %s", self.id, exc.reason)

    @property
    def resumes(self) -> bool:
        """Whether this session's connection moves when its node goes."""
        return self.connection._resumes

    def resumed(self, lost: Link) -> bool:
        """After ``lost``, this session's link, was lost: wait for the connection's move;
        True if the session lives on the node it moved to."""
        return not self._closed and self.connection._moved() and self._link is not lost

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
        if self._resuming:
            self._send_resuming(address, body, options)
            return
        corr = link.send(self.id, address, body, options, windowed)
        if corr:
            if windowed:
                self._window.add(corr)
            else:
                link.wait(corr)
        if link.congested:
            link.drain()

    def _send_resuming(self, address: str, body: bytes | str, options: SendFields) -> None:
        """A send on a connection that moves: outside a transaction its packet is kept
        until it is confirmed, and sent again on the node moved to if the link is lost
        first; a send that finds the link lost goes to the node moved to."""
        while True:
            link = self._link
            try:
                if self._keeps:
                    corr, packet = link.send_kept(self.id, address, body, options)
                else:  # transacted: one-way, part of the transaction
                    corr, packet = link.send(self.id, address, body, options, True), None
            except ConnectError:
                if self.resumed(link):
                    continue  # not sent: send it on the node moved to
                raise
            if corr:
                self._window.add(corr, packet=packet)
            if link.congested:
                link.drain()
            return

    def send_many(
        self, address: str, messages: Iterable[bytes | str | Message], *, ttl: int = 0
    ) -> None:
        link = self._link
        if self._resuming and link.closed and self.resumed(link):
            link = self._link  # lost before this call: it goes to the node moved to
        try:
            sent = link.send_many(self.id, address, messages, ttl)
        except ConnectError:
            # a transaction lost with the node says to retry it; outside one, requests
            # this call wrote before the loss are not known to be stored: raised
            if self._transacted and self._resuming and self.resumed(link):
                self._raise_lost()
            raise
        self._sent_many(sent)

    def send_many_framed(
        self, address: str, count: int, framed: bytes | memoryview, *, ttl: int = 0
    ) -> None:
        """:meth:`send_many` of ``count`` messages (1 to
        :data:`~chute.protocol.packets.SEND_MANY_MAX`) already encoded as one SendMany
        carries them: each content block behind its length, joined
        (:func:`chute.protocol.splice.encode_send_many_framed`). A columnar producer's
        path (Spark's sink): nothing is checked or encoded per message here.

        Raises:
            InvalidAddress: a bad address. InvalidMessage: a count out of range.
            ConnectError, RequestTimeout: the connection failed or the broker is slow.
        """
        link = self._link
        if self._resuming and link.closed and self.resumed(link):
            link = self._link  # lost before this call: it goes to the node moved to
        try:
            sent = link.send_many_framed(self.id, address, count, framed, ttl)
        except ConnectError:
            if self._transacted and self._resuming and self.resumed(link):
                self._raise_lost()
            raise
        self._sent_many(sent)

    def _sent_many(self, sent: list[tuple[int, bytes]]) -> None:
        """Wait for or window the SendMany requests ``sent`` as the session does."""
        if self._keeps:
            for corr, packet in sent:
                self._window.add(corr, packet=packet)
        elif self._windowed:
            for corr, _packet in sent:
                self._window.add(corr)
        else:
            for corr, _packet in sent:
                self._link.wait(corr)

    def flush(self) -> None:
        self._window.await_down_to(0)
        self._raise_lost()

    def _raise_lost(self) -> None:
        """Raise, once, the transaction the move could not carry over, after rolling back
        what the session did since on the new node (a retry starts afresh)."""
        if self._window.lost is None:
            return
        if self._transacted:
            with contextlib.suppress(ChuteError):
                self._link.wait(self._link.rollback(self.id))
        self._window.raise_lost()

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
        options = ConsumerOptions(
            selector, prefetch, exclusive, subscription, durable, shared, offset
        )
        consumer_id = self._link.open_consumer(self.id, address, options)
        consumer = BlockingConsumer(self, self._link, consumer_id, address, options)
        if self.connection._resumes:
            self._consumers.add(consumer)
        return consumer

    def commit(self) -> None:
        """With a ``confirm_window`` of N, returns as soon as at most N commits await
        the broker's answer (pipelined transactions). A commit the broker then refused
        is raised by a later call; as with any refused commit, its transaction stays
        open, now with whatever was sent since: roll back and send again from the
        last commit :meth:`flush` confirmed."""
        self._raise_lost()
        link = self._link
        try:
            corr = link.commit(self.id)  # raises at once on a link already lost
            if not self._window.size:
                link.wait(corr)
                return
        except ConnectError:
            self._lost_during(link)
            raise
        self._window.add(corr, flush=True)
        self._raise_lost()

    def _lost_during(self, link: Link) -> None:
        """``link`` was lost under a commit or a prepare: on a connection that moves, wait
        for the move and raise the transaction it could not carry over (say to retry it)."""
        if self.connection._resumes and self.resumed(link):
            self._raise_lost()

    def rollback(self) -> None:
        lost, self._window.lost = self._window.lost, None
        link = self._link
        try:
            link.wait(link.rollback(self.id))
        except ConnectError:
            if lost is None and not (self.connection._resumes and self.resumed(link)):
                raise
            self._window.lost = None  # rolled back with the lost node; goes on on the new one

    def prepare(self, xid: str) -> None:
        self._raise_lost()
        link = self._link
        try:
            link.wait(link.prepare(self.id, xid))
        except ConnectError:
            self._lost_during(link)
            raise

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
            self._closed = True
            self._link.close_session(self.id)


__all__ = ["BlockingConnection", "BlockingConsumer", "BlockingSession", "connect"]
