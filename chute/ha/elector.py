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

Fencing matters only while a backup is recorded in sync: only then may another
process take over. While one is (or may be: a record write that adds one counts from
before it is sent until a write that leaves none succeeded), the live renews its lease
every ``ttl/3`` and may confirm only until ``sent + ttl - margin`` (``sent``: when the
last successful renewal was sent, monotonic time), so it stops confirming before etcd
can let a backup take over; a renewal that comes late holds confirmations until one
succeeds, and a lease etcd no longer knows ends the process's time as live
(``on_lost``). With no backup recorded in sync, nobody else may take over: the live
confirms whatever its lease, and a lease etcd no longer knows is replaced: the
process campaigns again under a new lease and epoch and writes the record again
(:meth:`Elector.lease_after` gives the new lease to whoever registers under it).
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
from chute.cluster.etcd import EtcdClient, revoke_within
from chute.cluster.etcd_wire import Compare, Get, Put, Target
from chute.cluster.membership import LEAVE_S

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
        self._address = ""
        self._backups_recorded = False  # a backup is, or may be, recorded in sync
        self._settled = asyncio.Event()  # set while no new campaign is under way
        self._settled.set()
        self._changed = asyncio.Event()  # set (and replaced) at each lease taken or campaign
        self._keepalive: asyncio.Task[None] | None = None
        self.on_lost: Callable[[str], None] | None = None
        self.on_renewed: Callable[[], None] | None = None  # confirmations held may go now
        self.on_new_epoch: Callable[[], None] | None = None  # live again, under a new epoch

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
        self._address = address
        if not await self._claim():
            return False
        self._keepalive = asyncio.create_task(self._keep_alive(), name="ha-keepalive")
        try:
            recorded = await self._write_record(())
        except BaseException:
            await self.resign()  # not live without the record: a backup must see who is
            raise
        if not recorded:
            await self.resign()
        return recorded

    async def _claim(self) -> bool:
        """Create the live key under a new lease: True (:attr:`epoch`, :attr:`lease` set)
        if this process holds it now."""
        sent = time.monotonic()
        lease = await self.client.lease_grant(self.ttl)
        value = json.dumps({"id": self.node_id, "address": self._address, "pid": os.getpid()})
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
        self._notify()
        return True

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def lease_after(self, gone: int) -> int:
        """The live's lease once it is not ``gone`` (a lease etcd no longer knows, or 0):
        what the node's membership registers under. Waits while the process campaigns
        again; never returns once the process stopped being live (it stops)."""
        while not self._settled.is_set() or self.lease in (0, gone):
            await self._changed.wait()
        return self.lease

    def may_confirm(self) -> bool:
        """May the live confirm (any thread)? Yes while no backup is (or may be) recorded
        in sync, whatever its lease; otherwise only while the lease is safely alive."""
        return not self._backups_recorded or time.monotonic() < self._deadline

    async def record_in_sync(self, in_sync: list[str]) -> bool:
        """Record the in-sync set of this epoch; False if this process is no longer live.

        Raises:
            EtcdError: etcd could not be reached (nothing is known to be recorded).
        """
        while True:
            await self._settled.wait()
            epoch = self.epoch
            if await self._write_record(tuple(in_sync)):
                return True
            if self.epoch == epoch:  # not sent under a lost epoch: no longer live
                return False

    async def _write_record(self, in_sync: tuple[str, ...], *, campaigning: bool = False) -> bool:
        if not campaigning:
            await self._settled.wait()  # a record of the new epoch, not of the lost one
        if in_sync:
            self._backups_recorded = True  # from before it is sent: it may be recorded
        value: dict[str, Any] = {"epoch": self.epoch, "live": self.node_id, "in_sync": in_sync}
        result = await self.client.txn(
            [Compare(self._live_key, Target.CREATE, self.epoch)],
            [Put(self._record_key, json.dumps(value).encode())],
        )
        if result.succeeded and not in_sync and self._backups_recorded:
            self._backups_recorded = False  # nobody else may take over: confirm freely
            if self.on_renewed is not None:
                self.on_renewed()
        return result.succeeded

    async def _keep_alive(self) -> None:
        interval = max(self.ttl / 3, 0.1)
        renewed = True
        while True:
            await asyncio.sleep(interval if renewed else min(interval, 0.1))
            sent = time.monotonic()
            try:
                async with asyncio.timeout(self.ttl):
                    ttl = await self.client.lease_keepalive(self.lease)
            except LeaseNotFound:
                if self._backups_recorded:
                    self._lost(
                        "its lease in etcd expired while a backup was recorded in sync with "
                        "it: that backup may take over"
                    )
                    return
                if not await self._campaign_again():
                    return
                renewed = True
                continue
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

    async def _campaign_again(self) -> bool:
        """The lease expired with no backup recorded in sync: nobody else may take over
        (the record names this process as the live, alone), so take a new lease and
        epoch and write the record again. False if this process is no longer live."""
        old = self.epoch
        retry = min(max(self.ttl / 3, 0.1), 1.0)
        self._settled.clear()
        try:
            while True:  # a new lease and the live key under it
                try:
                    claimed = await self._claim()
                    break
                except EtcdError as exc:
                    log.debug("high availability: campaigning again: %s", exc)
                    await asyncio.sleep(retry)
            if not claimed:
                self._lost("its lease in etcd expired and another process is live now")
                return False
            while True:  # the record of the new epoch
                try:
                    recorded = await self._write_record((), campaigning=True)
                    break
                except EtcdError as exc:
                    log.debug("high availability: recording the new epoch: %s", exc)
                    await asyncio.sleep(retry)
            if not recorded:
                self._lost("its lease in etcd expired and its record was replaced")
                return False
        finally:
            self._settled.set()
            self._notify()
        log.warning(
            "high availability: node %s's lease in etcd expired (etcd out of reach over %d s) "
            "with no backup recorded in sync, so no other process may take over: live again "
            "under a new lease (epoch %d, was %d), confirming as before",
            self.node,
            self.ttl,
            self.epoch,
            old,
        )
        if self.on_new_epoch is not None:
            self.on_new_epoch()
        return True

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
            failed = await revoke_within(self.client, self.lease, LEAVE_S)
            if failed is not None:
                log.warning(
                    "high availability: could not give up the lease (%s); it expires by itself",
                    failed,
                )
