# Written by scripts/unasync.py from chute/client/aio_session.py: edit that, then run the script.
"""The blocking client's session: :class:`BlockingSession` (:class:`chute.client.api.Session`),
opened by :meth:`BlockingConnection.session <chute.client.blocking.BlockingConnection.session>`.

It sends (one message, many, many already framed), consumes, browses and runs its
transactions over its connection's link. A session whose connection may move keeps
its unconfirmed persistent sends until the broker confirms them and, once the
connection moved, opens itself again on the new node (naming the same producer, so
the broker drops a resend it already stored), sends them again in order and opens its
consumers again (:meth:`BlockingSession.resume`). Its confirm window
(:class:`~chute.client.confirm.ConfirmWindow`) keeps up to N persistent sends
awaiting the broker's fsync while the producer goes on.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import (
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any, Protocol, TypeVar

from chute.client import requests
from chute.client.closing import ClosedAtExit
from chute.client.confirm import ConfirmWindow
from chute.client.consumer import BlockingConsumer
from chute.client.link import Link
from chute.client.nodes import log
from chute.client.outgoing import SendFields
from chute.client.requests import Pending
from chute.client.sessions import ConsumerOptions
from chute.errors import ChuteError, ConnectError, TransactionLost
from chute.message import DEFAULT_PRIORITY, KEY_PROPERTY, BodyKind, Message, new_message_id
from chute.protocol import packets as p

T = TypeVar("T")


class Opener(Protocol):
    """What a session needs of the connection that opened it
    (:class:`~chute.client.blocking.BlockingConnection`)."""

    _resumes: bool  # the connection moves to another node when its node goes

    def _moved(self) -> bool:
        """After the link was lost: wait for the move to end; whether it reached a node."""
        ...


class BlockingSession(ClosedAtExit):
    """A session (:class:`chute.client.api.Session`). On a connection that moves,
    it keeps its unconfirmed sends' packets to resend them (:meth:`resume`)."""

    def __init__(
        self,
        connection: Opener,
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
