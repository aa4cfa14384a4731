"""A process that registers one cluster node and then does nothing, for a test to kill.

    python -m tests.integration.cluster_node ETCD_HOST:PORT CLUSTER NODE TTL

Prints ``registered`` once the node is a member, and holds its lease until killed.
"""

from __future__ import annotations

import asyncio
import sys

from chute.cluster.etcd import EtcdClient
from chute.cluster.membership import Membership
from chute.cluster.url import parse_cluster_url


async def main(endpoint: str, cluster: str, node: str, ttl: int) -> None:
    url = parse_cluster_url(f"etcd://{endpoint}/{cluster}")
    async with EtcdClient.from_url(url, request_timeout=2.0) as client:
        membership = Membership(client, cluster, node, address=f"{node}:5445", ttl=ttl)
        await membership.start()
        print("registered", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
