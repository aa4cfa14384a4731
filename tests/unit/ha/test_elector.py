"""Fencing matters only while a backup is recorded in sync: without one, a live whose
lease lapsed goes on confirming and takes a new lease and epoch; with one, it stops
confirming and steps down."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from typing import cast

from chute.cluster.errors import EtcdUnavailable, LeaseNotFound
from chute.cluster.etcd import EtcdClient
from chute.cluster.etcd_wire import Compare, Get, KeyValue, Lease, Put, Target, TxnResult
from chute.ha.elector import Elector

LIVE = b"/c/live/a"
RECORD = b"/c/ha/a"


class FakeEtcd:
    """Leases, and the transactions the elector sends, over a dict."""

    def __init__(self) -> None:
        self.keys: dict[bytes, KeyValue] = {}
        self.leases: set[int] = set()
        self.revision = 0
        self.unreachable = False

    def _reach(self) -> None:
        if self.unreachable:
            raise EtcdUnavailable("etcd is unreachable (a test)")

    def expire(self, lease: int) -> None:
        """etcd's reckoning: the lease ran out, its keys go with it."""
        self.leases.discard(lease)
        self.keys = {k: kv for k, kv in self.keys.items() if kv.lease != lease}

    async def lease_grant(self, ttl: int) -> Lease:
        self._reach()
        self.revision += 1
        self.leases.add(self.revision)
        return Lease(self.revision, ttl)

    async def lease_keepalive(self, lease: int) -> int:
        self._reach()
        if lease not in self.leases:
            raise LeaseNotFound("lease not found (a test)")
        return 1  # the TTL the elector asks for

    async def lease_revoke(self, lease: int) -> None:
        self._reach()
        self.expire(lease)

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Put | Get],
        failure: Sequence[Put | Get] = (),
    ) -> TxnResult:
        self._reach()
        held = all(
            (self.keys[c.key].create_revision if c.key in self.keys else 0) == c.value
            for c in compare
            if c.target is Target.CREATE
        )
        got: list[KeyValue] = []
        for op in success if held else failure:
            if isinstance(op, Put):
                self.revision += 1
                known = self.keys.get(op.key)
                created = known.create_revision if known else self.revision
                self.keys[op.key] = KeyValue(op.key, op.value, created, self.revision, 1, op.lease)
            elif op.key in self.keys:
                got.append(self.keys[op.key])
        return TxnResult(held, self.revision, tuple(got))

    def in_sync(self) -> list[str]:
        return list(json.loads(self.keys[RECORD].value)["in_sync"])


async def until(predicate: Callable[[], object]) -> None:
    """Wait, with a deadline, for ``predicate`` (``may_confirm`` turns with the clock:
    no event says so)."""
    async with asyncio.timeout(5):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def elector(etcd: FakeEtcd) -> tuple[Elector, list[str]]:
    lost: list[str] = []
    e = Elector(cast(EtcdClient, etcd), "c", "a", "me", 1)
    e.on_lost = lost.append
    return e, lost


def test_without_a_backup_in_sync_a_lapsed_lease_is_replaced_and_confirming_goes_on() -> None:
    etcd = FakeEtcd()

    async def main() -> None:
        e, lost = elector(etcd)
        assert await e.campaign("127.0.0.1:1")
        first_lease, first_epoch = e.lease, e.epoch
        assert await e.lease_after(0) == first_lease
        etcd.unreachable = True
        await asyncio.sleep(1.2)  # past the lease: a live with a backup would hold now
        assert e.may_confirm()
        etcd.unreachable = False
        etcd.expire(first_lease)
        async with asyncio.timeout(5):
            new_lease = await e.lease_after(first_lease)  # what membership registers under
        assert new_lease != first_lease
        assert e.epoch > first_epoch
        assert lost == []
        assert e.may_confirm()
        assert etcd.keys[LIVE].lease == new_lease
        record = json.loads(etcd.keys[RECORD].value)
        assert record == {"epoch": e.epoch, "live": "me", "in_sync": []}
        await e.resign()

    asyncio.run(main())


def test_with_a_backup_in_sync_a_lapsed_lease_stops_confirming_and_steps_down() -> None:
    etcd = FakeEtcd()

    async def main() -> None:
        e, lost = elector(etcd)
        assert await e.campaign("127.0.0.1:1")
        assert await e.record_in_sync(["backup"])
        assert etcd.in_sync() == ["backup"]
        etcd.unreachable = True
        await until(lambda: not e.may_confirm())  # within the lease, before it ends
        etcd.unreachable = False
        etcd.expire(e.lease)
        await until(lambda: lost)
        assert "recorded in sync" in lost[0]
        assert not e.may_confirm()
        assert LIVE not in etcd.keys  # no campaign again: the backup may take over
        await e.resign()

    asyncio.run(main())


def test_a_record_write_adding_a_backup_counts_from_before_it_is_sent() -> None:
    etcd = FakeEtcd()

    async def main() -> None:
        e, _ = elector(etcd)
        assert await e.campaign("127.0.0.1:1")
        etcd.unreachable = True
        with contextlib.suppress(EtcdUnavailable):
            await e.record_in_sync(["backup"])
        await until(lambda: not e.may_confirm())  # it may be recorded: fenced
        etcd.unreachable = False
        await until(e.may_confirm)  # renewed
        assert await e.record_in_sync([])  # recorded without it: confirm whatever the lease
        etcd.unreachable = True
        await asyncio.sleep(1.2)
        assert e.may_confirm()
        etcd.unreachable = False
        await e.resign()

    asyncio.run(main())
