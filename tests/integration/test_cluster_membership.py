"""Membership against a real etcd: nodes see each other, a killed node leaves within its
lease, a taken name is refused, and a node rides out etcd stopping, restarting and
being out of reach for longer than its lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from chute.cluster.errors import EtcdUnavailable, NodeNameTaken
from chute.cluster.etcd import Backoff, EtcdClient
from chute.cluster.membership import (
    LEAVE_S,
    EventKind,
    Membership,
    MembershipEvent,
    NodeState,
)
from chute.cluster.url import Endpoint
from tests.integration.conftest import free_port
from tests.integration.etcd_fixture import EtcdProcess, start_etcd_cluster

T = TypeVar("T")
WAIT = 20.0
TTL = 2


def run(test: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(WAIT * 3):
            return await test()

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def node(
    endpoint: Endpoint | Sequence[Endpoint],
    name: str,
    *,
    cluster: str = "c",
    ttl: int = TTL,
    request_timeout: float = 1.0,
) -> AsyncIterator[Membership]:
    endpoints = [endpoint] if isinstance(endpoint, Endpoint) else list(endpoint)
    async with EtcdClient(
        endpoints, request_timeout=request_timeout, connect_timeout=0.5
    ) as client:
        membership = Membership(
            client, cluster, name, address=f"{name}:5445", ttl=ttl, backoff=Backoff(0.05, 0.3)
        )
        await membership.start()
        try:
            yield membership
        finally:
            await membership.stop()


async def writable(endpoints: Sequence[Endpoint]) -> None:
    """Return once etcd takes a write through ``endpoints`` (it answers "unavailable"
    while its members elect a new leader)."""
    async with asyncio.timeout(WAIT), EtcdClient(endpoints, request_timeout=1.0) as client:
        while True:
            try:
                await client.put(b"/probe", b"")
                return
            except EtcdUnavailable:
                continue


async def until(membership: Membership, predicate: Callable[[Membership], bool]) -> None:
    async with asyncio.timeout(WAIT):
        await membership.wait_for(predicate)


def test_nodes_see_each_other_join_and_leave_once(etcd: EtcdProcess) -> None:
    async def body() -> None:
        events: list[MembershipEvent] = []
        async with node(etcd.endpoint, "a") as a:
            a.add_listener(events.append)
            assert set(a.members) == {"a"}
            assert a.members["a"].address == "a:5445"
            async with node(etcd.endpoint, "b") as b:
                assert set(b.members) == {"a", "b"}
                await until(a, lambda m: "b" in m.members)
            await until(a, lambda m: "b" not in m.members)
            assert [(e.kind, e.member.name) for e in events] == [
                (EventKind.JOIN, "b"),
                (EventKind.LEAVE, "b"),
            ]
            async with node(etcd.endpoint, "b", cluster="other") as elsewhere:
                assert set(elsewhere.members) == {"b"}  # clusters sharing one etcd stay apart
            assert set(a.members) == {"a"}

    run(body)


def test_a_killed_node_leaves_when_its_lease_expires(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with node(etcd.endpoint, "a") as a:
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.integration.cluster_node",
                etcd.address,
                "c",
                "doomed",
                str(TTL),
                stdout=subprocess.PIPE,
            )
            try:
                assert child.stdout is not None
                async with asyncio.timeout(WAIT):
                    assert await child.stdout.readline() == b"registered\n"
                await until(a, lambda m: "doomed" in m.members)
            finally:
                child.kill()  # SIGKILL: no revoke, the lease just stops being kept alive
                await child.wait()
            await until(a, lambda m: "doomed" not in m.members)

    run(body)


def test_a_taken_node_name_is_refused(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with node(etcd.endpoint, "a") as a:
            with pytest.raises(NodeNameTaken, match=r"node name 'a' is taken .* a:5445"):
                async with node(etcd.endpoint, "a"):
                    pass
            assert a.state is NodeState.REGISTERED
            async with EtcdClient([etcd.endpoint]) as c:
                kv = await c.get(b"/c/nodes/a")
                assert kv is not None
                assert kv.lease == a.lease  # the first holder keeps its registration

    run(body)


def test_an_unreachable_etcd_refuses_the_start() -> None:
    async def body() -> None:
        with pytest.raises(EtcdUnavailable, match="etcd is unreachable"):
            async with node(Endpoint("127.0.0.1", free_port()), "a"):
                pass

    run(body)


def test_a_node_keeps_its_members_while_etcd_is_stopped_and_carries_on(
    etcd: EtcdProcess,
) -> None:
    async def body() -> None:
        # a lease long enough to outlive the pause: etcd counts a lease's time while
        # stopped too, and expires it on SIGCONT if it ran out (the next test's case)
        async with node(etcd.endpoint, "a", ttl=5) as a, node(etcd.endpoint, "b", ttl=5):
            await until(a, lambda m: set(m.members) == {"a", "b"})
            lease = a.lease
            etcd.pause()
            try:
                await until(a, lambda m: m.state is NodeState.UNREACHABLE)
                assert set(a.members) == {"a", "b"}  # the last known member set
            finally:
                etcd.resume()
            await until(a, lambda m: m.state is NodeState.REGISTERED)
            assert a.lease == lease
            async with node(etcd.endpoint, "c"):
                await until(a, lambda m: "c" in m.members)

    run(body)


def test_a_node_stopping_while_etcd_is_stopped_gives_up_its_lease_after_a_bound(
    etcd: EtcdProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean stop tries to revoke the lease for ``LEAVE_S`` at most, not for the
    client's request timeout (10 s here): the lease expires by itself."""

    async def body() -> None:
        async with EtcdClient([etcd.endpoint], request_timeout=10.0) as client:
            membership = Membership(client, "c", "a", address="a:5445", ttl=TTL)
            await membership.start()
            etcd.pause()
            try:
                await membership.stop()
            finally:
                etcd.resume()
            assert membership.state is NodeState.STOPPED

    with caplog.at_level(logging.WARNING, logger="chute.cluster"):
        run(body)
    assert f"could not leave cleanly (no answer within {LEAVE_S:g} s)" in caplog.text


def test_a_node_registers_again_after_etcd_was_stopped_past_its_lease(
    etcd: EtcdProcess,
) -> None:
    async def body() -> None:
        async with node(etcd.endpoint, "a") as a, node(etcd.endpoint, "b") as b:
            await until(a, lambda m: set(m.members) == {"a", "b"})
            leases = a.lease, b.lease
            etcd.pause()
            try:
                await until(a, lambda m: m.state is NodeState.UNREACHABLE)
                # the fault's length is the point: etcd stopped for longer than the TTL
                # (etcd counts a stopped lease's time and expires it on SIGCONT)
                await asyncio.sleep(TTL + 0.5)
                assert set(a.members) == {"a", "b"}
            finally:
                etcd.resume()
            await until(a, lambda m: m.state is NodeState.REGISTERED and m.lease not in leases)
            await until(b, lambda m: m.state is NodeState.REGISTERED and m.lease not in leases)
            await until(a, lambda m: set(m.members) == {"a", "b"})
            async with EtcdClient([etcd.endpoint]) as c:
                kv = await c.get(b"/c/nodes/a")
                assert kv is not None
                assert kv.lease == a.lease

    run(body)


def test_a_node_follows_joins_and_leaves_across_an_etcd_restart(etcd: EtcdProcess) -> None:
    async def body() -> None:
        async with node(etcd.endpoint, "a") as a:
            async with node(etcd.endpoint, "b"):
                await until(a, lambda m: "b" in m.members)
                await asyncio.to_thread(etcd.kill)
                await until(a, lambda m: m.state is NodeState.UNREACHABLE)
                assert set(a.members) == {"a", "b"}
                await asyncio.to_thread(etcd.start)
                await until(a, lambda m: m.state is NodeState.REGISTERED)
            # b revoked its lease on leaving, c joins: a's watch, resumed, sees both
            async with node(etcd.endpoint, "c"):
                await until(a, lambda m: set(m.members) == {"a", "c"})

    run(body)


def test_a_node_watching_through_a_stopped_member_watches_through_another(
    tmp_path: Path,
) -> None:
    members = start_etcd_cluster(tmp_path)
    stopped, *others = members

    async def body() -> None:
        everyone = [m.endpoint for m in members]
        async with node(everyone, "a", ttl=5) as a:
            assert a.client.endpoint == stopped.endpoint
            async with node(others[0].endpoint, "x", ttl=5):  # a's watch is set up
                await until(a, lambda m: "x" in m.members)
            await until(a, lambda m: "x" not in m.members)
            stopped.pause()  # no word to the node: its watch just goes quiet
            await writable([m.endpoint for m in others])  # a leader, if the stopped one led
            async with node(others[1].endpoint, "b", ttl=5):
                await until(a, lambda m: "b" in m.members)
            await until(a, lambda m: "b" not in m.members)
            assert a.client.endpoint != stopped.endpoint
            assert a.state is NodeState.REGISTERED

    try:
        run(body)
    finally:
        for member in members:
            member.kill()


class Relay:
    """A TCP relay to etcd that can be cut: a node behind it loses etcd while etcd
    (and time for its leases) goes on."""

    def __init__(self, target: Endpoint) -> None:
        self.target = target
        self.endpoint = Endpoint("127.0.0.1", free_port())
        self.cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.endpoint.host, self.endpoint.port
        )

    async def close(self) -> None:
        self.sever()
        if self._server is not None:
            self._server.close()

    def sever(self) -> None:
        self.cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._writers.difference_update((writer, up_writer))


def test_a_node_cut_off_past_its_lease_registers_again(etcd: EtcdProcess) -> None:
    async def body() -> None:
        relay = Relay(etcd.endpoint)
        await relay.start()
        try:
            async with node(etcd.endpoint, "a") as a, node(relay.endpoint, "b") as b:
                await until(a, lambda m: "b" in m.members)
                old_lease = b.lease
                relay.sever()
                await until(b, lambda m: m.state is NodeState.UNREACHABLE)
                await until(a, lambda m: "b" not in m.members)  # b's lease expired
                assert set(b.members) == {"a", "b"}  # b still serves what it knew
                relay.cut = False
                await until(b, lambda m: m.state is NodeState.REGISTERED)
                assert b.lease != old_lease
                await until(a, lambda m: "b" in m.members)
        finally:
            await relay.close()

    run(body)


def test_a_node_whose_name_was_taken_while_cut_off_is_refused(etcd: EtcdProcess) -> None:
    async def body() -> None:
        relay = Relay(etcd.endpoint)
        await relay.start()
        try:
            async with node(relay.endpoint, "b") as b, node(etcd.endpoint, "a") as a:
                relay.sever()
                await until(a, lambda m: "b" not in m.members)
                async with node(etcd.endpoint, "b") as usurper:
                    await until(a, lambda m: "b" in m.members)
                    relay.cut = False
                    await until(b, lambda m: m.state is NodeState.REFUSED)
                    assert a.members["b"].revision == usurper.members["b"].revision
        finally:
            await relay.close()

    run(body)


def test_a_node_cut_off_while_etcd_compacted_reads_the_members_anew(etcd: EtcdProcess) -> None:
    async def body() -> None:
        relay = Relay(etcd.endpoint)
        await relay.start()
        events: list[MembershipEvent] = []
        try:
            async with node(relay.endpoint, "a", ttl=10) as a:
                a.add_listener(events.append)
                async with node(etcd.endpoint, "b"):
                    await until(a, lambda m: "b" in m.members)
                    relay.sever()
                # while a is cut off: b leaves, c joins, and etcd forgets the history
                async with node(etcd.endpoint, "c"), EtcdClient([etcd.endpoint]) as c:
                    revision = await c.put(b"/unrelated", b"")
                    await c.call(("/v3/kv/compaction", {"revision": str(revision)}))
                    relay.cut = False
                    await until(a, lambda m: set(m.members) == {"a", "c"})
                    assert [(e.kind, e.member.name) for e in events] == [
                        (EventKind.JOIN, "b"),
                        (EventKind.LEAVE, "b"),
                        (EventKind.JOIN, "c"),
                    ]
        finally:
            await relay.close()

    run(body)
