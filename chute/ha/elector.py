"""Who is a node's live process, agreed in etcd, and the live's fencing.

``/<cluster>/live/<node>`` names the live: created by a transaction that succeeds
only while it is absent, bound to the live's lease, its value
``{"id", "address", "pid"}`` (``address``: where backups reach its replication
listener). The key's create revision is the **epoch**: it travels with every
replicated frame and every ack.

``/<cluster>/ha/<node>`` (no lease) records ``{"epoch", "live", "in_sync"}``: the live
of that epoch and the backups in sync with it, written by the live (guarded by its
epoch) whenever that set changes, and before it confirms anything without a backup it
dropped. Only the live of the record or a backup it lists may take over; a process
the record does not name is stale and waits (a node without a record is new: anyone
may start it).

Fencing: the live renews its lease every ``ttl/3`` and may confirm only until
``sent + ttl - margin`` (``sent``: when the last successful renewal was sent,
monotonic time), so it stops confirming before etcd can let a backup take over.
A renewal that comes late holds confirmations until one succeeds; a lease etcd no
longer knows ends the process's time as live (``on_lost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chute.cluster.errors import EtcdError, LeaseNotFound
from chute.cluster.etcd import EtcdClient
from chute.cluster.etcd_wire import Compare, Get, Put, Target

log = logging.getLogger("chute.ha")


@dataclass(frozen=True, slots=True)
class LiveInfo:
    """The node's live as etcd has it."""

    node_id: str
    address: str
    epoch: int
    lease: int


@dataclass(frozen=True, slots=True)
class Record:
    epoch: int
    live: str
    in_sync: tuple[str, ...]

    def may_take_over(self, node_id: str) -> bool:
        return node_id == self.live or node_id in self.in_sync


def margin(ttl: int) -> float:
    """Seconds before the lease's end at which a live stops confirming."""
    return max(0.5, ttl / 4)


class Elector:
    """One process's side of a node's election (module docstring)."""

    def __init__(self, client: EtcdClient, cluster: str, node: str, node_id: str, ttl: int) -> None:
        self.client = client
        self.node_id = node_id
        self.ttl = ttl
        self._live_key = f"/{cluster}/live/{node}".encode()
        self._record_key = f"/{cluster}/ha/{node}".encode()
        self._member_key = f"/{cluster}/nodes/{node}".encode()
        self.node = node
        self.epoch = 0
        self.lease = 0
        self._deadline = 0.0  # monotonic: no confirming from then on
        self._keepalive: asyncio.Task[None] | None = None
        self.on_lost: Callable[[str], None] | None = None
        self.on_renewed: Callable[[], None] | None = None  # confirmations held may go now

    async def live(self) -> LiveInfo | None:
        kv = await self.client.get(self._live_key)
        if kv is None:
            return None
        try:
            value = json.loads(kv.value)
            return LiveInfo(str(value["id"]), str(value["address"]), kv.create_revision, kv.lease)
        except (ValueError, KeyError, TypeError):
            return LiveInfo("?", "", kv.create_revision, kv.lease)

    async def client_address(self) -> str | None:
        """Where clients reach the node's live (its membership's address), if registered."""
        kv = await self.client.get(self._member_key)
        if kv is None:
            return None
        try:
            return str(json.loads(kv.value)["address"])
        except (ValueError, KeyError, TypeError):
            return None

    async def record(self) -> Record | None:
        kv = await self.client.get(self._record_key)
        if kv is None:
            return None
        try:
            value = json.loads(kv.value)
            return Record(int(value["epoch"]), str(value["live"]), tuple(value["in_sync"]))
        except (ValueError, KeyError, TypeError):
            return None

    async def campaign(self, address: str) -> bool:
        """Try to become live (the caller checked it may); True once it is, with
        :attr:`epoch` and :attr:`lease` set and the lease kept alive."""
        sent = time.monotonic()
        lease = await self.client.lease_grant(self.ttl)
        value = json.dumps({"id": self.node_id, "address": address, "pid": os.getpid()})
        result = await self.client.txn(
            [Compare(self._live_key, Target.CREATE, 0)],
            [Put(self._live_key, value.encode(), lease.id), Get(self._live_key)],
            [Get(self._live_key)],
        )
        mine = result.kvs[0] if result.kvs else None
        if mine is None or mine.lease != lease.id:
            with contextlib.suppress(EtcdError):
                await self.client.lease_revoke(lease.id)
            return False
        self.lease = lease.id
        self.epoch = mine.create_revision
        self._deadline = sent + lease.ttl - margin(lease.ttl)
        self._keepalive = asyncio.create_task(self._keep_alive(), name="ha-keepalive")
        try:
            recorded = await self._write_record(())
        except BaseException:
            await self.resign()  # not live without the record: a backup must see who is
            raise
        if not recorded:
            await self.resign()
        return recorded

    def may_confirm(self) -> bool:
        """Is the lease safely alive (any thread)?"""
        return time.monotonic() < self._deadline

    async def record_in_sync(self, in_sync: list[str]) -> bool:
        """Record the in-sync set of this epoch; False if this process is no longer live.

        Raises:
            EtcdError: etcd could not be reached (nothing is known to be recorded).
        """
        return await self._write_record(tuple(in_sync))

    async def _write_record(self, in_sync: tuple[str, ...]) -> bool:
        value: dict[str, Any] = {"epoch": self.epoch, "live": self.node_id, "in_sync": in_sync}
        result = await self.client.txn(
            [Compare(self._live_key, Target.CREATE, self.epoch)],
            [Put(self._record_key, json.dumps(value).encode())],
        )
        return result.succeeded

    async def _keep_alive(self) -> None:
        interval = max(self.ttl / 3, 0.1)
        renewed = True
        while True:
            await asyncio.sleep(interval if renewed else min(interval, 0.1))
            sent = time.monotonic()
            try:
                ttl = await asyncio.wait_for(self.client.lease_keepalive(self.lease), self.ttl)
            except LeaseNotFound:
                self._lost("its lease in etcd expired")
                return
            except (EtcdError, TimeoutError) as exc:
                if renewed and not self.may_confirm():
                    log.warning(
                        "high availability: cannot renew the lease in etcd (%s): confirming "
                        "nothing until it is",
                        exc or "timed out",
                    )
                    renewed = False
                continue
            self._deadline = sent + ttl - margin(ttl)
            if not renewed:
                log.warning("high availability: lease renewed: confirming again")
                renewed = True
            if self.on_renewed is not None:
                self.on_renewed()

    def _lost(self, why: str) -> None:
        self._deadline = 0.0
        if self.on_lost is not None:
            self.on_lost(why)

    async def resign(self) -> None:
        """Stop being live at once (a clean stop): the key goes with the lease."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
        self._deadline = 0.0
        if self.lease:
            try:
                await self.client.lease_revoke(self.lease)
            except EtcdError as exc:
                log.warning("high availability: could not give up the lease: %s", exc)
