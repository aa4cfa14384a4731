# Written by scripts/unasync.py from chute/client/aio_nodes.py: edit that, then run the script.
"""Reaching one node of several: the nodes of a URL tried in turn.

A broker URL may list the nodes of a cluster (``chute://h1:5445,h2:5445``,
:mod:`chute.client.url`). :meth:`Nodes.connect` tries them one after the other,
each with the connect timeout: a node that cannot be reached, does not answer the
Connect in time, or speaks another protocol, gives way to the next; a refusal a
node answered with (bad credentials, a client id in use) is raised at once, since
the next node would say the same. When every node failed, one
:class:`~chute.errors.ConnectError` names each node and why.

A connection (:mod:`chute.client.blocking`) holds its link through an
:class:`OnNode`, which moves it to another node when the one it is on goes, at
once (the link runs :meth:`OnNode.moved` when it is lost) or at the next request
of the connection, whichever comes first: :meth:`Nodes.connect` with ``after``
tries the nodes listed after the lost one first, the lost one last; and again,
round the list, pausing a little longer each time (up to a second), until the
URL's ``failover`` seconds have passed since the loss (a backup taking over its
node needs a few seconds). A connection moves if its URL lists several nodes, or
gives ``failover`` for its one node (which then is tried until it comes back).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from chute.client.link import Link, open_link, pause
from chute.client.tls import unanswered
from chute.client.url import BrokerUrl
from chute.errors import ChuteError, ConnectError, NotLive, RequestTimeout, WrongProtocol
from chute.protocol.packets import Connected

log = logging.getLogger("chute.client")

FIRST_PAUSE: Final = 0.1
"""Seconds between the first two rounds of a move's connect attempts (then doubling)."""
LONGEST_PAUSE: Final = 1.0
"""The longest pause between two rounds of a move's connect attempts."""


class Reached(NamedTuple):
    """A node connected to and logged in: its link, the broker's answer, its URL."""

    link: Link
    connected: Connected
    node: BrokerUrl


class Nodes(NamedTuple):
    """The nodes of a URL and what a connection to any of them takes."""

    url: BrokerUrl
    timeout: float
    context: ssl.SSLContext | None
    client_id: str | None
    login: str | None
    passcode: str | None
    heartbeat: float

    @property
    def several(self) -> bool:
        """The URL lists more than one node."""
        return bool(self.url.others)

    @property
    def moves(self) -> bool:
        """A lost connection moves (to another node, or to its one node come back)."""
        return self.several or self.url.failover > 0

    def connect(self, after: BrokerUrl | None = None) -> Reached:
        """Connect to the first node that answers: in the URL's order
        (:meth:`BrokerUrl.nodes`), or, ``after`` a node was lost, from the one listed
        after it round the list (the lost one last).

        Raises:
            ConnectError: no node could be reached (the one node's own error, or one
                naming each node and why).
            AuthenticationFailed, ChuteError: a node refused the connection.
            RequestTimeout: the one node did not answer in time.
        """
        nodes = self.url.nodes() if after is None else self._after(after)
        failures: list[tuple[BrokerUrl, ChuteError]] = []
        for node in nodes:
            try:
                return self._reach(node)
            except (ConnectError, RequestTimeout) as exc:
                if type(exc) not in {ConnectError, RequestTimeout, WrongProtocol, NotLive}:
                    raise
                if len(nodes) == 1:
                    raise
                log.info("cannot connect to node %s: %s", node.node, exc.reason)
                failures.append((node, exc))
        raise ConnectError(
            "cannot connect to any node: "
            + "; ".join(f"{node.node}: {exc.reason}" for node, exc in failures)
        )

    def _after(self, lost: BrokerUrl) -> tuple[BrokerUrl, ...]:
        listed = self.url._replace(order="listed").nodes()
        at = next((i for i, node in enumerate(listed) if node.node == lost.node), -1)
        return listed[at + 1 :] + listed[: at + 1]

    def _reach(self, node: BrokerUrl) -> Reached:
        link = open_link(node, self.timeout, self.context)
        try:
            connected = link.handshake(self.client_id, self.login, self.passcode, self.heartbeat)
        except ConnectError as exc:  # never the broker's answer: the connection failed
            link.abort()
            raise unanswered(node.tls, exc) from None
        except BaseException:
            link.abort()
            raise
        return Reached(link, connected, node)


class OnNode:
    """The link of a connection and the node it is on; if the URL lists several nodes,
    moving to another when that one is lost. Its threads share it: a lock lets one of
    them move, the others wait for the move."""

    def __init__(
        self,
        reached: Reached,
        nodes: Nodes,
        arrived: Callable[[Reached], None],
    ) -> None:
        self.link = reached.link
        self.node = reached.node
        self._nodes = nodes
        self._arrived = arrived  # told of each move
        self._closing = False
        self._gone: str | None = None  # why no node took over a lost connection
        self._moving = threading.Lock()
        if nodes.moves:
            self.link.when_lost(self.moved)

    @property
    def closed(self) -> bool:
        """Closed, or lost with nowhere to move (moving is not closed)."""
        return self.link.closed and not self.moving

    @property
    def moving(self) -> bool:
        """Lost, and moving (or about to move) to another node."""
        return self.link.closed and self._nodes.moves and not self._closing and self._gone is None

    def current(self) -> Link:
        """The link to the node the connection is on; if that node was lost, to the one
        it moved to (moving now if no one has yet).

        Raises:
            ConnectError: lost with no node to move to.
        """
        if self.moving:
            with self._moving:
                if self.moving:
                    self._move()
        if self._gone is not None:
            raise ConnectError(self._gone)
        return self.link

    def settled(self) -> Link:
        """:meth:`current`, once a move under way (resuming the sessions) has ended.

        Raises:
            ConnectError: lost with no node to move to.
        """
        with self._moving:
            pass
        return self.current()

    def moved(self) -> None:
        """What the link runs when it is lost: move at once, not at the next request."""
        try:
            self.current()
        except ChuteError:
            return  # logged by _move, and raised to whoever calls next

    def closing(self) -> None:
        """The connection is closing: no more moves; one under way ends first (and
        closes what it reached)."""
        self._closing = True
        with self._moving:
            pass

    def _move(self) -> None:
        lost = self.node
        deadline = time.monotonic() + self._nodes.url.failover
        wait = FIRST_PAUSE
        while True:
            try:
                reached = self._nodes.connect(after=lost)
                break
            except (ConnectError, RequestTimeout) as exc:
                if self._closing or time.monotonic() + wait > deadline:
                    self._give_up(lost, exc)
                    return
            except ChuteError as exc:  # refused: every node would say the same
                self._give_up(lost, exc)
                return
            pause(wait)
            wait = min(2 * wait, LONGEST_PAUSE)
        self.link, self.node = reached.link, reached.node
        if not self._closing:
            reached.link.when_lost(self.moved)  # lost again while resuming: moves again
        log.warning("the connection to node %s was lost; now on node %s", lost.node, self.node.node)
        self._arrived(reached)
        if self._closing:  # closed while moving
            reached.link.close()

    def _give_up(self, lost: BrokerUrl, exc: ChuteError) -> None:
        self._gone = f"the connection to node {lost.node} was lost, and then: {exc.reason}"
        log.warning("%s", self._gone)


__all__ = ["Nodes", "OnNode", "Reached"]
