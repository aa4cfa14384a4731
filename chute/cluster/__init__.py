"""A chute cluster's foundation: the coordinator (etcd) and membership.

:mod:`chute.cluster.url` parses ``etcd://HOST:PORT[,HOST:PORT...][/NAME]``;
:mod:`chute.cluster.etcd` is a small asyncio etcd v3 client over etcd's JSON gateway
(bodies built and parsed, sans-IO, in :mod:`chute.cluster.etcd_wire`);
:mod:`chute.cluster.membership` registers a node under a lease and follows the others.
"""

from chute.cluster.errors import (
    ClusterError,
    ClusterUrlError,
    EtcdAuthError,
    EtcdError,
    EtcdUnavailable,
    LeaseNotFound,
    NodeNameTaken,
)
from chute.cluster.etcd import EtcdClient, Snapshot
from chute.cluster.membership import Member, Membership, MembershipEvent, NodeState
from chute.cluster.url import ClusterUrl, Endpoint, parse_cluster_url

__all__ = [
    "ClusterError",
    "ClusterUrl",
    "ClusterUrlError",
    "Endpoint",
    "EtcdAuthError",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailable",
    "LeaseNotFound",
    "Member",
    "Membership",
    "MembershipEvent",
    "NodeNameTaken",
    "NodeState",
    "Snapshot",
    "parse_cluster_url",
]
