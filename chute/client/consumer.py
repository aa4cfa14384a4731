# Written by scripts/unasync.py from chute/client/aio_consumer.py: edit that, then run the script.
"""The blocking client's consumer: :class:`BlockingConsumer` (its session and connection:
:mod:`chute.client.blocking`). On a connection that moves, a receive that lost its
link waits for the move and goes on with the consumer opened again on the node moved
to (:meth:`BlockingConsumer.resume`, called by its session)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from chute.client.closing import ClosedAtExit
from chute.client.link import Link
from chute.client.nodes import log
from chute.client.received import Received
from chute.client.sessions import ConsumerOptions
from chute.errors import ChuteError, ConnectError, ConsumerError


class ConsumerSession(Protocol):
    """What a consumer needs of its session (named here: the session's module imports
    this one)."""

    @property
    def resumes(self) -> bool:
        """Whether its connection moves when its node goes."""

    def resumed(self, lost: Link) -> bool:
        """Wait for the connection's move after ``lost``; True if the session lives on."""


class BlockingConsumer(ClosedAtExit):
    """A consumer (:class:`chute.client.api.Consumer`); iterate it to receive
    until it closes."""

    def __init__(
        self,
        session: ConsumerSession,
        link: Link,
        consumer_id: int,
        address: str,
        options: ConsumerOptions,
    ) -> None:
        self.session = session
        self.id = consumer_id
        self._link = link
        self._address = address
        self._options = options
        self._resumes = session.resumes
        self._failed: ChuteError | None = None  # why it could not be opened again
        self._closed = False

    @property
    def closed(self) -> bool:
        return not self._link.consumer_open(self.id)

    def resume(self, link: Link, session_id: int) -> None:
        """The session was opened again on ``link``: open this consumer there too, unless
        it was closed.

        Raises:
            ConnectError: ``link`` was lost too (the next move opens it again).
        """
        if self._closed:
            return
        self._link = link
        try:
            self.id = link.open_consumer(session_id, self._address, self._options)
        except ConnectError:
            raise
        except ChuteError as exc:  # refused by the new node: raised by the next receive
            self._failed = exc
            log.warning("consumer of %s not opened again after the move: %s", self._address, exc)

    def receive(self, timeout: float | None = None) -> Received | None:
        """The link's own ``receive`` (no frame of this method's own while it waits),
        or, on a connection that moves, one that goes on on the node moved to."""
        if self._resumes:
            return self._receive_resuming(timeout)
        return self._link.receive(self.id, timeout)

    def _receive_resuming(self, timeout: float | None) -> Received | None:
        while True:
            link = self._link
            if self._failed is not None:
                raise self._failed
            try:
                return link.receive(self.id, timeout)
            except ConnectError:
                if not self.session.resumed(link) or self._link is link:
                    raise

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
        self._closed = True
        self._link.close_consumer(self.id)


__all__ = ["BlockingConsumer", "ConsumerSession"]
