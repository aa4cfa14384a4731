"""What can go wrong between a node and the cluster's coordinator (etcd).

Each error says which etcd it was talking to and, where it helps, what to do. They
all derive from :class:`ClusterError`, itself a :class:`chute.errors.ChuteError`.
"""

from __future__ import annotations

from chute.errors import ChuteError


class ClusterError(ChuteError):
    """Root of the cluster's errors."""

    code = "cluster-error"


class ClusterUrlError(ClusterError, ValueError):
    """A cluster URL (``etcd://HOST:PORT[,HOST:PORT...][/NAME]``) that cannot be used."""

    code = "cluster-url"


class EtcdError(ClusterError):
    """etcd answered with an error that is none of the more precise ones below."""

    code = "etcd-error"

    def __init__(self, message: str, *, grpc_code: int = 0) -> None:
        super().__init__(message)
        self.grpc_code = grpc_code


class EtcdUnavailable(EtcdError):
    """No endpoint of the coordinator could be reached (or none answered in time)."""

    code = "etcd-unavailable"


class EtcdAuthError(EtcdError):
    """etcd refused the credentials, or the user lacks a permission it needs."""

    code = "etcd-auth"


class LeaseNotFound(EtcdError):
    """The lease expired (or was revoked): every key bound to it is gone."""

    code = "etcd-lease-not-found"


class NodeNameTaken(ClusterError):
    """Another live process holds this node name in the cluster."""

    code = "node-name-taken"
