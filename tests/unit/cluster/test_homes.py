"""Where streams live (chute.cluster.homes): a fixed rule over a fixed membership, and a
claim in etcd that every node reads the same way (here over a stand-in for etcd's one
transaction; the real etcd is in tests/integration/test_cluster_streams.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, cast

import pytest

from chute.cluster.errors import EtcdUnavailable
from chute.cluster.etcd import Backoff, EtcdClient
from chute.cluster.etcd_wire import KeyValue, TxnResult
from chute.cluster.homes import EtcdHomes, FixedHomes


def test_fixed_homes_are_the_same_whatever_order_the_nodes_are_listed_in() -> None:
    names = ["n1", "n2", "n3", "n4"]
    rules = [FixedHomes(list(order)) for order in itertools.permutations(names)]
    for i in range(200):
        address = f"stream:s{i}"
        assert len({rule.known(address) for rule in rules}) == 1


def test_fixed_homes_spread_streams_over_every_node() -> None:
    rule = FixedHomes(["a", "b", "c"])
    homes = [rule.known(f"stream:s{i}") for i in range(300)]
    assert {name: homes.count(name) for name in "abc"} == {
        name: pytest.approx(100, abs=30) for name in "abc"
    }
    assert rule.known("stream:s1", 0) == asyncio.run(rule.home_of("stream:s1"))


def test_fixed_homes_need_a_node() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        FixedHomes([])


class FakeEtcd:
    """etcd's create-if-absent transaction over a dict; fails ``unreachable`` times first."""

    def __init__(self, unreachable: int = 0) -> None:
        self.keys: dict[bytes, bytes] = {}
        self.unreachable = unreachable
        self.calls = 0

    async def create_if_absent(self, key: bytes, value: bytes, *, lease: int = 0) -> TxnResult:
        self.calls += 1
        await asyncio.sleep(0)  # an answer comes in a later turn, as etcd's does
        if self.unreachable:
            self.unreachable -= 1
            raise EtcdUnavailable("etcd is unreachable (a test)")
        assert lease == 0  # a home is bound to no lease: it survives its node
        if key in self.keys:
            kv = KeyValue(key, self.keys[key], 1, 1, 1, 0)
            return TxnResult(succeeded=False, revision=2, kvs=(kv,))
        self.keys[key] = value
        return TxnResult(succeeded=True, revision=2, kvs=())


def homes(etcd: FakeEtcd, node: str) -> EtcdHomes:
    return EtcdHomes(cast(EtcdClient, etcd), "c", node, backoff=Backoff(0.001, 0.002))


def test_the_first_node_to_ask_claims_the_home_and_the_others_read_it() -> None:
    etcd = FakeEtcd()

    async def main() -> list[str]:
        a, b = homes(etcd, "a"), homes(etcd, "b")
        first = await b.home_of("stream:orders")
        then = await a.home_of("stream:orders")
        return [first, then, await a.home_of("stream:other")]

    assert asyncio.run(main()) == ["b", "b", "a"]
    assert etcd.keys == {b"/c/streams/orders/0": b"b", b"/c/streams/other/0": b"a"}


def test_a_home_once_known_is_not_asked_again() -> None:
    etcd = FakeEtcd()
    a = homes(etcd, "a")
    assert a.known("stream:orders") is None
    assert asyncio.run(a.home_of("stream:orders")) == "a"
    assert a.known("stream:orders") == "a"
    assert asyncio.run(a.home_of("stream:orders")) == "a"
    assert etcd.calls == 1


def test_an_unreachable_etcd_is_asked_again_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    etcd = FakeEtcd(unreachable=3)
    with caplog.at_level("WARNING", logger="chute.cluster"):
        assert asyncio.run(homes(etcd, "a").home_of("stream:orders")) == "a"
    assert etcd.calls == 4
    warnings: list[Any] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "cannot agree on its home" in warnings[0].getMessage()


def test_fixed_homes_spread_a_streams_partitions_over_the_nodes() -> None:
    rule = FixedHomes(["a", "b", "c"])
    for i in range(20):
        address = f"stream:s{i}"
        first = rule.known(address)
        partitions = [rule.known(address, p) for p in range(6)]
        assert partitions[0] == first  # partition 0's home is the stream's as before
        assert sorted(partitions) == ["a", "a", "b", "b", "c", "c"]


def test_etcd_homes_propose_a_streams_partitions_around_the_live_members() -> None:
    etcd = FakeEtcd()
    members = ["a", "b", "c"]

    async def main() -> list[str]:
        b = EtcdHomes(cast(EtcdClient, etcd), "c", "b", members=lambda: members)
        found = [await b.home_of("stream:orders", p) for p in range(5)]
        a = EtcdHomes(cast(EtcdClient, etcd), "c", "a", members=lambda: members)
        assert [await a.home_of("stream:orders", p) for p in range(5)] == found  # agreed
        return found

    assert asyncio.run(main()) == ["b", "c", "a", "b", "c"]
    assert etcd.keys[b"/c/streams/orders/1"] == b"c"


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_a_streams_partitions_spread_the_same_way_whichever_node_asks_first(
    order: tuple[int, ...],
) -> None:
    """Two nodes ask for a stream's partitions at once, in any order: partition 0 goes
    to whoever asked first and partition ``i`` to the ``i``-th node after it, so the
    stream is spread evenly (it once came out a, b, b, a, or a, b, b, b: each node
    proposed counting from itself)."""
    etcd = FakeEtcd()
    members = ["a", "b"]

    async def main() -> tuple[list[str], list[str]]:
        a = EtcdHomes(cast(EtcdClient, etcd), "c", "a", members=lambda: members)
        b = EtcdHomes(cast(EtcdClient, etcd), "c", "b", members=lambda: members)
        first = await a.home_of("stream:orders", order[0])
        rest = [b.home_of("stream:orders", p) for p in order[1:]]
        rest += [a.home_of("stream:orders", p) for p in reversed(order[1:])]
        await asyncio.gather(*rest)
        assert first in "ab"
        return (
            [await a.home_of("stream:orders", p) for p in range(4)],
            [await b.home_of("stream:orders", p) for p in range(4)],
        )

    on_a, on_b = asyncio.run(main())
    assert on_a == on_b == ["a", "b", "a", "b"]  # a asked first
    assert etcd.calls == 8  # each node asks each partition once, however many asked


def test_many_asking_at_once_ask_etcd_once() -> None:
    etcd = FakeEtcd()

    async def main() -> list[str]:
        a = homes(etcd, "a")
        return list(await asyncio.gather(*(a.home_of("stream:orders") for _ in range(50))))

    assert asyncio.run(main()) == ["a"] * 50
    assert etcd.calls == 1
