"""How long one node takes to gather another's figures (``chute stat`` and the admin API
on a node of a cluster), for a node holding many destinations: two nodes' links in one
process over in-memory wires (each packet encoded and decoded as on a real link), no
sockets. Prints JSON: per destination count, the seconds one view took (the median of
``--runs``) and the pages asked for, beside the time a node has for all its pages
(``chute.server.cluster_stats.GATHER_TIMEOUT``, 10 s; 2 s for each page).

    python -m bench.cluster_view [--counts 1000,10000,100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from chute.config import ServerConfig
from chute.config.sections import ClusterSettings
from chute.core.model.settings import SettingsResolver
from chute.core.rules.broker import Broker
from chute.core.rules.cluster import Cluster
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.sansio import NeedData
from chute.server.cluster_stats import GATHER_TIMEOUT
from chute.server.peers import PeerLink, PeerLinks
from chute.store.memory import MemoryStore


class _Host:
    def __init__(self) -> None:
        self.config = ServerConfig()
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    def request_sync(
        self, callback: Callable[[BaseException | None], None], seal: Any = None
    ) -> None:
        callback(None)


def _node(name: str) -> PeerLinks:
    links = PeerLinks(_Host(), ClusterSettings(node=name), "bench")
    broker = Broker(MemoryStore(), SettingsResolver({}))
    broker.recover()
    links.cluster = Cluster(broker, links, node=name, run=name)
    links.stats.timeout = links.stats.gather_timeout = 600.0  # measure, never give up
    return links


def _wire(
    receiver: PeerLinks, link: Callable[[], PeerLink], fetches: list[int]
) -> Callable[[bytes], None]:
    codec = PacketCodec()
    codec.version = p.PEER_VERSION
    loop = asyncio.get_running_loop()

    def deliver(packet: object) -> None:
        receiver.received(link(), packet)

    def write(data: bytes) -> None:
        codec.receive_data(data)
        while not isinstance(item := codec.next_packet(), NeedData):
            if isinstance(item[1], p.PeerStatsFetch):
                fetches.append(1)
            loop.call_soon(deliver, item[1])

    return write


async def _measure(count: int, runs: int) -> dict[str, Any]:
    a, b = _node("a"), _node("b")
    a.members["b"], b.members["a"] = "b:1", "a:1"
    fetches: list[int] = []
    ups: dict[str, PeerLink] = {}
    ups["a"] = a.up("b", _wire(b, lambda: ups["b"], fetches), lambda: None)
    ups["b"] = b.up("a", _wire(a, lambda: ups["a"], []), lambda: None)
    for i in range(count):
        b.cluster.host.destination(f"queue:bench.{i:07d}", create=True)
    took = []
    for _ in range(runs):
        fetches.clear()
        started = time.perf_counter()
        view = await a.stats.view()
        took.append(time.perf_counter() - started)
        assert len(view.nodes[1].figures) >= count
    return {
        "destinations": count,
        "seconds": round(statistics.median(took), 3),
        "pages": len(fetches),
        "deadline_s": GATHER_TIMEOUT,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [asyncio.run(_measure(int(count), args.runs)) for count in args.counts.split(",")]
    print(json.dumps({"gather": results}, indent=2))


if __name__ == "__main__":
    main()
