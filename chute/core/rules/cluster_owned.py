"""Queues that belong to one connection or one user, across the nodes of a cluster:
temporary queues and login-name queues (the rest: :mod:`chute.core.rules.cluster`).

**Temporary queues** live on the node of the connection that made them. That node
announces one (a :class:`~chute.core.model.cluster.Demand` taking everything) as soon as
it is made and for as long as it lives, consumers or not: a reply may come before the
requester consumes. Every other node then holds a *stand-in* of it: a queue of the same
address, as little durable as the queue itself, whose one consumer is the peer consumer
standing for the owner's node. No client of that node may consume or browse it (it
belongs to none of that node's connections: the answer is the one a client gets on one
node for another connection's temporary queue), but anyone may send to it, and what is
sent there is handed over to the owner (store-and-forward, as any hand-over). When the
owner's connection closes, its node announces the queue no more and every stand-in
goes, with what it held, as the queue's own messages go with it; a send to it then gets
"does not exist", as on one node. A hand-over that reaches the owner after that is
refused there and dropped (its stand-in is gone).

**Login-name queues**: the sessions of the user consume from one pipe per connection,
not from the queue itself; a node announces a login-name queue while one of its pipes
has a consumer. A message stays on the node it was sent to while the user consumes
there (each of the user's sessions on that node gets a copy); else it goes to one node
where the user consumes (round robin), and each session there gets a copy. Only the
user may consume it: each node checks its own sessions.

**Callback queues** need nothing of their own: a callback is a subscription of its topic,
announced like any other, and what it forwards is routed on its node like any send.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import Protocol

from chute.core.model.address import parse
from chute.core.model.consumer import Entry
from chute.core.model.queue import QueueChannel, QueueHost
from chute.core.model.queuetypes import LoginQueue, Pipe
from chute.core.model.registry import Registry
from chute.core.model.settings import DestinationSettings

log = logging.getLogger("chute.cluster")

TAKES_ALL: tuple[str | None, ...] = (None,)
"""The demand of a temporary queue or a consumed login-name queue: every message."""


def queue_demand(
    host: Registry, queue: QueueChannel, standins: Container[str]
) -> tuple[str | None, ...] | None:
    """What this node announces of ``queue`` (the selectors of its consumers, empty for
    none), or None when it announces nothing of it: a queue the broker does not hold (a
    pipe aside), or another node's temporary queue (an address in ``standins``)."""
    if isinstance(queue, Pipe):
        login = host.queues.get(queue.address)
        return login_demand(login) if isinstance(login, LoginQueue) else None
    if parse(queue.address).is_temporary:
        if queue.address in standins:
            return None
        return TAKES_ALL if host.queues.get(queue.name) is queue else ()
    if host.queues.get(queue.name) is not queue:
        return () if queue.deleted else None  # deleted with its consumers: none now
    if isinstance(queue, LoginQueue):
        return login_demand(queue)
    texts = [c.selector.text if c.selector is not None else None for c in queue.router.local]
    return tuple(sorted(texts, key=lambda t: (t is not None, t or "")))


def login_demand(queue: LoginQueue) -> tuple[str | None, ...]:
    """A login-name queue takes everything while one of its pipes here has a consumer."""
    return TAKES_ALL if any(pipe.router.local for pipe in queue.pipes.values()) else ()


class StandInHost(Registry, QueueHost, Protocol):
    """What the stand-ins need of the broker."""

    def settings(self, address: str) -> DestinationSettings: ...

    def add_queue(self, queue: QueueChannel) -> None: ...

    def delete_queue(self, queue: QueueChannel) -> list[Entry]: ...


class StandIns:
    """The stand-ins this node holds of other nodes' temporary queues (see the module
    docstring). Used from the broker's loop only."""

    def __init__(self, host: StandInHost) -> None:
        self.host = host
        self.owners: dict[str, str] = {}  # a stand-in's address -> the node it stands for

    def __contains__(self, address: object) -> bool:
        return address in self.owners

    def of(self, owner: str) -> list[str]:
        """The addresses of ``owner``'s temporary queues that have a stand-in here."""
        return [address for address, node in self.owners.items() if node == owner]

    def make(self, owner: str, address: str) -> QueueChannel | None:
        """The stand-in of ``owner``'s temporary queue ``address`` (made now if new); None
        if this node holds a queue of that address of its own or another node's."""
        host = self.host
        queue = host.queues.get(address)
        if queue is None:
            queue = QueueChannel(address, address, host.settings(address), host, durable=False)
            self.owners[address] = owner  # before add_queue: never announced as this node's
            host.add_queue(queue)
        elif self.owners.get(address) != owner:
            log.warning(
                "node %s announced the temporary queue %s, which is another's here", owner, address
            )
            return None
        return queue

    def drop(self, owner: str, address: str) -> bool:
        """``owner``'s temporary queue ``address`` is gone there: its stand-in goes, with
        what it held (what it handed over and is in doubt is settled when the owner
        answers: a refusal, the queue being gone there too). False if there was none."""
        if self.owners.get(address) != owner:
            return False
        queue = self.host.queues.get(address)
        if queue is not None:
            queue.evict_consumers()
            self.host.delete_queue(queue)
        del self.owners[address]
        return True
