"""Producer flow control of one connection: a client whose sends made a backlog its
queue's consumers cannot keep up with is not read for a while.

After each turn (:meth:`chute.server.stream.StreamConnection._act`) the connection
asks :meth:`ProducerFlow.check`: if a queue this client just sent to holds a backlog
past ``flow_backlog`` although it has consumers (the core lists them in
``Broker.pressure``), reading pauses (``Hold.FLOW_CONTROL``) until every such queue
is relieved or :data:`FLOW_MAX_PAUSE` passes. The client's sends then wait in TCP
buffers instead of in the broker's memory and journal, and the consumers get the
CPU. Never for a queue this connection itself consumes from (its acks must still be
read). Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Final

from chute.core.model.queue import QueueChannel
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker

FLOW_MAX_PAUSE: Final = 0.5
"""The longest a flow-control pause lasts (seconds)."""


class ProducerFlow:
    """Whether one connection is paused for its queues' consumers, and until when."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, pause: Callable[[], None], resume: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._pause = pause
        self._resume = resume
        self._timer: asyncio.TimerHandle | None = None
        self.paused = False

    def check(self, broker: Broker, core: BrokerConnection | None) -> None:
        """After a turn: take the broker's pressure list, and pause if a queue on it is
        one ``core`` sent to and does not consume from (None: the connection is not
        logged in or is closing, so it only takes the list)."""
        pressure = broker.pressure
        if not pressure:
            return
        queues = list(dict.fromkeys(pressure))
        pressure.clear()
        if self.paused or core is None:
            return
        own = {id(c) for s in core.sessions for c in s.consumers.values()}
        queues = [q for q in queues if not any(id(c) in own for c in q.router.consumers)]
        if not queues:
            return
        self.paused = True
        self._pause()
        waiting = set(queues)

        def relieved(queue: QueueChannel) -> None:
            waiting.discard(queue)
            if not waiting:
                self.end()

        for queue in queues:
            queue.flow_waiters.append(functools.partial(relieved, queue))
        self._timer = self._loop.call_later(FLOW_MAX_PAUSE, self.end)

    def end(self) -> None:
        """The pause is over (its queues were relieved, or it lasted long enough)."""
        if not self.paused:
            return
        self.stop()
        self._resume()

    def stop(self) -> None:
        """Forget the pause without resuming (the connection is gone)."""
        self.paused = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
