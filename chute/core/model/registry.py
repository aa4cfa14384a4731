"""What the broker holds, as every part of the core sees it: the :class:`Registry`.

The broker (:class:`~chute.core.rules.broker.Broker`) is the one object behind every
host protocol of the core. Each part declares what it needs of it as a host
(``DestinationHost``, ``XaHost``, ``LookingHost`` ...); what they all share, the
destinations by address and the store, the clock and the memory budget
(:class:`~chute.core.model.paging.Resources`), is said once here, read-only: a
part looks things up through the registry and changes them through its host's
methods (``delete_queue``, ``delete_topic`` ...), never by writing the maps.

The model's own hosts (a queue's, a pager's, a stream's) extend only
:class:`~chute.core.model.paging.Resources`: the registry names the queue, topic and
stream types, which lie above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from chute.core.model.paging import Resources
from chute.core.model.queue import QueueChannel
from chute.core.model.stream import Stream
from chute.core.model.topic import Topic

Destination = QueueChannel | Topic | Stream
"""What an address names: a queue (also a login-name or temporary queue), a topic or a
stream."""


class Registry(Resources, Protocol):
    """The destinations the broker holds, and the store, clock and memory around them."""

    @property
    def queues(self) -> Mapping[str, QueueChannel]:
        """Every queue by its canonical address (temporary and login-name ones too)."""
        ...

    @property
    def topics(self) -> Mapping[str, Topic]:
        """Every topic by its canonical address."""
        ...

    @property
    def streams(self) -> Mapping[str, Stream]:
        """Every stream by its canonical address."""
        ...

    def destination(
        self,
        address: str,
        *,
        create: bool | None = None,
        maker: str | None = None,
        quota: bool = True,
    ) -> Destination:
        """The queue, topic or stream at ``address``, made by this use if allowed
        (raises InvalidAddress, NotFound, DestinationFull)."""
        ...

    def find(self, address: str) -> Destination | None:
        """The queue, topic or stream of a canonical address, if it exists (never creates)."""
        ...

    def queue_by_name(self, name: str) -> QueueChannel | None:
        """A queue or a subscription by its store name."""
        ...
