"""The etcd client against a real etcd: keys, transactions, leases, watches that survive
a restart and a compaction, failover between endpoints, and its errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from aiohttp import web

from chute.cluster.errors import EtcdAuthError, EtcdError, EtcdUnavailable, LeaseNotFound
from chute.cluster.etcd import Backoff, EtcdClient, Snapshot, WatchItem
from chute.cluster.etcd_wire import EventType, WatchEvent
from chute.cluster.url import Endpoint
from tests.integration.conftest import free_port
from tests.integration.etcd_fixture import EtcdProcess, start_etcd_cluster

T = TypeVar("T")
WAIT = 20.0


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[list[EtcdProcess]]:
    members = start_etcd_cluster(tmp_path)
    yield members
    for member in members:
        member.kill()


def run(test: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(WAIT * 2):
            return await test()

    return asyncio.run(bounded())


def client(
    *endpoints: Endpoint, user: str | None = None, password: str | None = None
) -> EtcdClient:
    return EtcdClient(
        endpoints, user=user, password=password, request_timeout=2.0, connect_timeout=1.0
    )


async def collect(watch: AsyncIterator[WatchItem], count: int) -> list[WatchItem]:
    items: list[WatchItem] = []
    async with asyncio.timeout(WAIT):
        async for item in watch:
            items.append(item)
            if len(items) == count:
                break
    return items


def test_keys_prefixes_and_transactions(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as c:
            await c.put(b"/t/a", b"1")
            await c.put(b"/t/b", b"2")
            await c.put(b"/u/c", b"3")
            assert (await c.get(b"/t/a")) is not None
            assert await c.get(b"/t/none") is None
            listing = await c.get_prefix(b"/t/")
            assert [(kv.key, kv.value) for kv in listing.kvs] == [(b"/t/a", b"1"), (b"/t/b", b"2")]
            # create if absent: once only; the loser learns the holder's value
            first = await c.create_if_absent(b"/t/x", b"mine")
            second = await c.create_if_absent(b"/t/x", b"theirs")
            assert first.succeeded
            assert not second.succeeded
            assert [kv.value for kv in second.kvs] == [b"mine"]
            # compare and swap on the mod revision
            current = await c.get(b"/t/x")
            assert current is not None
            swapped = await c.compare_and_swap(b"/t/x", current.mod_revision, b"v2")
            stale = await c.compare_and_swap(b"/t/x", current.mod_revision, b"v3")
            assert swapped.succeeded
            assert not stale.succeeded
            assert [kv.value for kv in stale.kvs] == [b"v2"]
            await c.delete(b"/t/", prefix=True)
            assert (await c.get_prefix(b"/t/")).kvs == ()
            assert await c.get(b"/u/c") is not None

    run(body)


def test_a_key_under_a_lease_goes_with_it(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as c:
            lease = await c.lease_grant(30)
            assert lease.ttl == 30
            await c.put(b"/l/k", b"v", lease=lease.id)
            kv = await c.get(b"/l/k")
            assert kv is not None
            assert kv.lease == lease.id
            assert await c.lease_keepalive(lease.id) == 30
            await c.lease_revoke(lease.id)
            assert await c.get(b"/l/k") is None
            with pytest.raises(LeaseNotFound):
                await c.lease_keepalive(lease.id)
            with pytest.raises(LeaseNotFound):
                await c.lease_revoke(lease.id)

    run(body)


def test_a_watch_sees_every_change_from_its_start_revision(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as c:
            start = await c.put(b"/w/a", b"1")
            await c.put(b"/w/b", b"2")
            await c.delete(b"/w/a")
            await c.put(b"/other", b"x")
            items = await collect(c.watch(b"/w/", start), 3)
            events = [i for i in items if isinstance(i, WatchEvent)]
            assert [(e.type, e.kv.key) for e in events] == [
                (EventType.PUT, b"/w/a"),
                (EventType.PUT, b"/w/b"),
                (EventType.DELETE, b"/w/a"),
            ]

    run(body)


def test_a_watch_resumes_across_an_etcd_restart_without_losing_an_event(
    etcd: EtcdProcess,
) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as watcher, client(etcd.endpoint) as writer:
            start = await writer.put(b"/r/0", b"before")
            watch = watcher.watch(b"/r/", start, backoff=Backoff(0.05, 0.2))
            first = await collect(watch, 1)
            assert [i.kv.key for i in first if isinstance(i, WatchEvent)] == [b"/r/0"]
            await asyncio.to_thread(etcd.kill)
            await asyncio.to_thread(etcd.start)
            for n in range(1, 6):
                await writer.put(f"/r/{n}".encode(), b"after")
            rest = await collect(watch, 5)
            keys = [i.kv.key for i in rest if isinstance(i, WatchEvent)]
            assert keys == [f"/r/{n}".encode() for n in range(1, 6)]  # none lost, none twice
            await watch.aclose()

    run(body)


def test_a_watch_from_a_compacted_revision_gets_a_snapshot(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as c:
            start = await c.put(b"/s/a", b"1")
            await c.put(b"/s/b", b"2")
            await c.delete(b"/s/a")
            revision = await c.put(b"/s/c", b"3")
            await c.call(("/v3/kv/compaction", {"revision": str(revision)}))
            watch = c.watch(b"/s/", start)
            (snapshot,) = await collect(watch, 1)
            assert isinstance(snapshot, Snapshot)
            assert [kv.key for kv in snapshot.kvs] == [b"/s/b", b"/s/c"]
            assert snapshot.revision == revision
            await c.put(b"/s/d", b"4")
            (event,) = await collect(watch, 1)
            assert isinstance(event, WatchEvent)
            assert event.kv.key == b"/s/d"
            await watch.aclose()

    run(body)


def test_a_dead_first_endpoint_fails_over_to_the_next(etcd: EtcdProcess) -> None:
    dead = Endpoint("127.0.0.1", free_port())

    async def body() -> None:
        async with client(dead, etcd.endpoint) as c:
            await c.put(b"/f/k", b"v")
            assert c.endpoint == etcd.endpoint
            start = await c.put(b"/f/k", b"w")
            watch = c.watch(b"/f/", start)
            (event,) = await collect(watch, 1)
            assert isinstance(event, WatchEvent)
            assert event.kv.value == b"w"
            await watch.aclose()

    run(body)


def test_a_killed_member_of_an_etcd_cluster_fails_over_to_the_others(
    etcd_cluster: list[EtcdProcess],
) -> None:
    first, *others = etcd_cluster

    async def body() -> None:
        endpoints = [m.endpoint for m in etcd_cluster]
        async with client(*endpoints) as c, client(others[0].endpoint) as writer:
            start = await c.put(b"/k/0", b"v")
            assert c.endpoint == first.endpoint
            watch = c.watch(b"/k/", start, backoff=Backoff(0.05, 0.2))
            assert len(await collect(watch, 1)) == 1
            await asyncio.to_thread(first.kill)
            for member in others:  # until they have (perhaps elected) a leader
                await asyncio.to_thread(member.wait_ready)
            for n in range(1, 4):
                await writer.put(f"/k/{n}".encode(), b"v")
            rest = await collect(watch, 3)
            assert [i.kv.key for i in rest if isinstance(i, WatchEvent)] == [
                b"/k/1",
                b"/k/2",
                b"/k/3",
            ]
            assert (await c.get(b"/k/3")) is not None
            assert c.endpoint in {m.endpoint for m in others}
            await watch.aclose()

    run(body)


def test_no_endpoint_answering_is_etcd_unavailable_naming_each() -> None:
    first, second = Endpoint("127.0.0.1", free_port()), Endpoint("127.0.0.1", free_port())

    async def body() -> None:
        async with client(first, second) as c:
            with pytest.raises(EtcdUnavailable, match="etcd is unreachable") as caught:
                await c.get(b"/k")
            assert str(first) in str(caught.value)
            assert str(second) in str(caught.value)

    run(body)


def test_a_stopped_etcd_is_unavailable_after_the_request_timeout(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with client(etcd.endpoint) as c:
            await c.put(b"/p/k", b"v")
            etcd.pause()
            try:
                with pytest.raises(EtcdUnavailable, match="no answer in time"):
                    await c.get(b"/p/k")
            finally:
                etcd.resume()
            kv = await c.get(b"/p/k")
            assert kv is not None
            assert kv.value == b"v"

    run(body)


def test_credentials_are_used_and_refused_ones_are_an_auth_error(etcd: EtcdProcess) -> None:
    secret, wrong = "pw", "wrong"  # a throw-away etcd's root password

    async def body() -> None:
        async with client(etcd.endpoint, user="root", password=secret) as early:
            await early.put(b"/a/k", b"0")  # credentials for an etcd without auth: unused
            await early.put(b"/a/k", b"1")
        async with client(etcd.endpoint) as admin:
            await admin.call(("/v3/auth/user/add", {"name": "root", "password": secret}))
            await admin.call(("/v3/auth/role/add", {"name": "root"}))
            await admin.call(("/v3/auth/user/grant", {"user": "root", "role": "root"}))
            await admin.call(("/v3/auth/enable", {}))
            with pytest.raises(EtcdAuthError, match="user name is empty"):
                await admin.get(b"/a/k")
        async with client(etcd.endpoint, user="root", password=secret) as good:
            await good.put(b"/a/k", b"v")
            assert await good.get(b"/a/k") is not None
        async with client(etcd.endpoint, user="root", password=wrong) as bad:
            with pytest.raises(EtcdAuthError, match="refused user 'root'"):
                await bad.get(b"/a/k")

    run(body)


def test_something_else_on_the_port_is_a_clear_etcd_error() -> None:
    """An HTTP server that is not etcd: a refusal naming what answered, not a crash."""

    async def body() -> None:
        async def not_found(request: web.Request) -> web.Response:
            return web.Response(status=404, text="<html>no such page</html>")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", not_found)
        runner = web.AppRunner(app)
        await runner.setup()
        endpoint = Endpoint("127.0.0.1", free_port())
        await web.TCPSite(runner, endpoint.host, endpoint.port).start()
        try:
            async with client(endpoint) as c:
                with pytest.raises(EtcdError, match="answered HTTP 404 with no JSON"):
                    await c.get(b"/k")
        finally:
            await runner.cleanup()

    run(body)
