"""What a protocol driver needs of the server around it: :class:`ServerHost`.

:class:`~chute.server.app.BrokerServer` is one; tests give a driver their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from chute.config import ServerConfig
from chute.core.rules.access import PasswordCheck
from chute.core.rules.broker import Broker
from chute.errors import ChuteError
from chute.server.limits import ConnectionLimits
from chute.server.turns import Contenders

if TYPE_CHECKING:
    from chute.ha.role import Live
    from chute.server.peers import PeerLinks

SyncedCallback = Callable[[BaseException | None], None]
Retry = Callable[[ChuteError | None], None]
"""Called when a blocked send may go again (None) or gave up (the error to report)."""


class ServerHost(Protocol):
    """What a connection driver needs of the server around it."""

    @property
    def broker(self) -> Broker: ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def loop_thread(self) -> int:
        """The thread the loop runs on (a store callback may come from another)."""

    @property
    def started(self) -> float:
        """When the server started (``time.time()``)."""

    @property
    def connections(self) -> set[Any]:
        """Every open driver connection (a :class:`~chute.server.stream.StreamConnection`;
        for a graceful stop)."""

    @property
    def peers(self) -> PeerLinks | None:
        """The links to the other nodes of the cluster (None: not in a cluster)."""

    @property
    def ha(self) -> Live | None:
        """This process as its node's live (None: no backups, chute.ha)."""

    @property
    def limits(self) -> ConnectionLimits:
        """The connection limits (a driver's ticket, and what it reports)."""

    @property
    def contenders(self) -> Contenders:
        """Who else wants the loop (when a turn ends early)."""

    def request_sync(
        self,
        callback: Callable[[BaseException | None], None],
        seal: Callable[[], None] | None = None,
    ) -> None:
        """``callback(error)`` once everything recorded so far is durable."""

    def verify_password(self, check: PasswordCheck, done: Callable[[], None]) -> None:
        """Run ``check`` off the loop (it takes ~0.1 s of CPU), then ``done()`` on it."""
