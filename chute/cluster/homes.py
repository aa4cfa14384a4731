"""Where each stream of a cluster lives: its **home** node, agreed once and for good.

A stream's offsets are given by one node, its home (:mod:`chute.core.rules.cluster_streams`).
Homes are kept per partition (``home_of(stream, partition)``): each partition of a
stream with several (``partitions = N``) has a home of its own.

Two ways to agree:

* :class:`EtcdHomes`: the first node to need a stream's home claims it for itself
  with one etcd transaction that creates the key ``/CLUSTER/streams/NAME/PARTITION``
  only if it is absent (its value: the node's name) and otherwise reads it; every
  node asks the same way, so all agree on whoever created it. Partition 0 is claimed
  by the node that asks; partition ``i`` is proposed, by whichever node asks, for the
  ``i``-th node after partition 0's home among the live members (sorted by name,
  around), so a stream's partitions spread evenly over the nodes whichever of them
  asks first (given the same members); whatever is created first stands. The key is bound to no
  lease: a home survives its node's restart and its absence. Answers are cached
  (a home never moves). While etcd cannot be reached the question is asked again
  with backoff, for as long as it takes; the stream's sends wait on the node that
  asked (:mod:`chute.core.rules.cluster_streams`).
* :class:`FixedHomes`: a fixed membership and no etcd (``chute serve --nodes N``):
  every node computes the same home from the stream's name and the node names
  (partition 0: CRC-32 of ``NAME/0`` over the sorted names; partition ``i``: the
  ``i``-th node after that one, around). It needs no answer from
  anyone, but the membership must be the same list on every node and never change.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from chute.cluster.errors import EtcdError
from chute.cluster.etcd import Backoff, EtcdClient

log = logging.getLogger("chute.cluster")

STREAM_PREFIX = "stream:"


def stream_name(address: str) -> str:
    """The name of stream ``address`` (``stream:orders`` → ``orders``)."""
    return address[len(STREAM_PREFIX) :] if address.startswith(STREAM_PREFIX) else address


class Homes(Protocol):
    """Where streams live. Used from the loop only."""

    def known(self, address: str, partition: int = 0) -> str | None:
        """The home of ``address``'s ``partition`` if this node knows it already."""

    async def home_of(self, address: str, partition: int = 0) -> str:
        """The home of ``address``'s ``partition``, claimed for this node if it has none."""


class FixedHomes:
    """Homes over a fixed list of nodes, without any agreement to wait for."""

    def __init__(self, nodes: Sequence[str]) -> None:
        if not nodes:
            raise ValueError("a fixed membership needs at least one node")
        self.nodes = sorted(set(nodes))

    def known(self, address: str, partition: int = 0) -> str:
        # partition 0 by the CRC of NAME/0, and partition i the i-th node after it, so a
        # stream's partitions spread evenly
        key = f"{stream_name(address)}/0".encode()
        return self.nodes[(zlib.crc32(key) + partition) % len(self.nodes)]

    async def home_of(self, address: str, partition: int = 0) -> str:
        return self.known(address, partition)


class EtcdHomes:
    """Homes agreed in etcd: see the module docstring."""

    def __init__(
        self,
        client: EtcdClient,
        cluster: str,
        node: str,
        *,
        backoff: Backoff | None = None,
        members: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.node = node
        self.members = members
        """The live members' names (this node's included or not), to spread partitions."""
        self._backoff = backoff or Backoff(0.1, 2.0)
        self._homes: dict[tuple[str, int], str] = {}
        self._asking: dict[tuple[str, int], asyncio.Task[str]] = {}  # one question at a time

    def key(self, address: str, partition: int = 0) -> bytes:
        """The etcd key holding the home of ``address``'s ``partition``."""
        return f"/{self.cluster}/streams/{stream_name(address)}/{partition}".encode()

    def known(self, address: str, partition: int = 0) -> str | None:
        return self._homes.get((address, partition))

    async def proposed(self, address: str, partition: int) -> str:
        """The node this one proposes as the home of ``address``'s ``partition``: itself
        for partition 0, else the ``partition``-th live member after partition 0's home
        (asked first), so that every node proposes the same."""
        if partition == 0 or self.members is None:
            return self.node
        first = await self.home_of(address, 0)
        live = sorted({*self.members(), self.node, first})
        return live[(live.index(first) + partition) % len(live)]

    async def home_of(self, address: str, partition: int = 0) -> str:
        """Raises nothing but cancellation: etcd is asked until it answers (once, for
        however many ask at the same time)."""
        found = self._homes.get((address, partition))
        if found is not None:
            return found
        asking = self._asking.get((address, partition))
        if asking is None:
            asking = asyncio.get_running_loop().create_task(self._ask(address, partition))
            self._asking[address, partition] = asking
            asking.add_done_callback(lambda _: self._asking.pop((address, partition), None))
        return await asyncio.shield(asking)

    async def _ask(self, address: str, partition: int) -> str:
        retry = Backoff(self._backoff.initial, self._backoff.maximum)
        said = False
        proposed = await self.proposed(address, partition)
        while True:
            try:
                result = await self.client.create_if_absent(
                    self.key(address, partition), proposed.encode()
                )
                break
            except EtcdError as exc:
                if not said:
                    log.warning(
                        "stream %s: cannot agree on its home in etcd (%s); sends to it "
                        "wait here until etcd answers",
                        address,
                        exc,
                    )
                    said = True
                await retry.sleep()
        shown = f"{address}#{partition}" if partition else address
        if result.succeeded and proposed == self.node:
            home = self.node
            log.info("stream %s: its home is this node (claimed in etcd)", shown)
        elif result.succeeded:
            home = proposed
            log.info("stream %s: its home is node %s (agreed in etcd)", shown, home)
        elif result.kvs:
            home = result.kvs[0].value.decode("utf-8", "replace")
        else:  # deleted between the comparison and the read: cannot happen in one txn
            raise RuntimeError(f"etcd answered no home for {address}")
        return self._homes.setdefault((address, partition), home)
