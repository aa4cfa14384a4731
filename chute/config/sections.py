"""The sections of the server's ``[server]`` table: one dataclass each, a field per key.

A key is written in its section's table (``[server.tls]`` ``cert``) or directly in
``[server]`` under its flat name (``tls_cert``): the field's name, or the one its
metadata gives. A key's kind, what its value must be, comes from the field's type
(int: a non-negative integer; bool; str; Path) unless the metadata says more: a
size ("16MiB"), one of a few words, or a list of origins. :mod:`chute.config`
derives its key table from these fields, so a new field is a new key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Final, TypeVar

DEFAULT_PORT = 5445
DEFAULT_STOMP_PORT = 61613
DEFAULT_HTTP_PORT = 8445  # chute's HTTP port: STOMP over WebSocket, later admin and console

KIND: Final = "chute.config.kind"
FLAT: Final = "chute.config.flat"
SIZE: Final = "size"
ORIGINS: Final = "origins"

Kind = type | str | tuple[str, ...]
"""What a [server] key's value must be: a type, ``"size"``, ``"origins"`` or the words allowed."""
_T = TypeVar("_T")


def _flat(default: _T, flat: str) -> _T:
    """A key whose flat name (directly in [server]) is not its name in its section."""
    return dataclasses.field(default=default, metadata={FLAT: flat})


def _size(default: int, *, flat: str | None = None) -> int:
    """A byte count, written as a number or with a unit (``"16MiB"``)."""
    return dataclasses.field(default=default, metadata=_meta(SIZE, flat))


def _one_of(default: str, *others: str, flat: str | None = None) -> str:
    """One of a few words, ``default`` the first."""
    return dataclasses.field(default=default, metadata=_meta((default, *others), flat))


def _origins_key() -> tuple[str, ...]:
    """``allowed_origins``: a list of web origins (read by ``chute.config._origins``)."""
    return dataclasses.field(default=(), metadata={KIND: ORIGINS})


def _meta(kind: Kind, flat: str | None) -> dict[str, Any]:
    return {KIND: kind} if flat is None else {KIND: kind, FLAT: flat}


@dataclasses.dataclass
class ListenSettings:
    """``[server.listen]``: the address and the ports the broker listens on (0 = off)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # the native protocol
    stomp_port: int = DEFAULT_STOMP_PORT  # STOMP 1.0-1.2
    http_port: int = DEFAULT_HTTP_PORT  # console, admin API, metrics, WebSocket, native on /chute
    tls_port: int = 0  # the native protocol over TLS (chutes://); needs tls.cert
    stomp_tls_port: int = 0  # STOMP over TLS (conventionally 61614); needs tls.cert
    amqp_port: int = 0  # AMQP 0-9-1 (conventionally 5672); off unless set
    amqp_tls_port: int = 0  # AMQP 0-9-1 over TLS (conventionally 5671); needs tls.cert


@dataclasses.dataclass
class TlsSettings:
    """``[server.tls]``: the certificate of every TLS listener, and clients' certificates."""

    cert: str = _flat("", "tls_cert")  # PEM certificate chain (may hold the key too)
    key: str = _flat("", "tls_key")  # PEM private key, if not in cert
    ca: str = _flat("", "tls_ca")  # PEM CA file that client certificates must chain to
    client_certs: str = _one_of(  # docs/security.md
        "none", "optional", "required", flat="tls_client_certs"
    )


@dataclasses.dataclass
class HttpSettings:
    """``[server.http]``: the HTTP port's TLS, browsers' origins, native-over-HTTP sessions."""

    tls: bool = _flat(False, "http_tls")  # http_port serves HTTPS and WSS; needs tls.cert
    # "same" as tls.client_certs, or its own mode; a browser cancels a WebSocket that is
    # asked for a certificate, so browsers need "none"
    tls_client_certs: str = _one_of(
        "same", "none", "optional", "required", flat="http_tls_client_certs"
    )
    allowed_origins: tuple[str, ...] = _origins_key()  # WebSocket origins besides the broker's
    poll_ms: int = _flat(20_000, "http_poll_ms")  # native over plain HTTP: the longest poll
    session_timeout_ms: int = _flat(60_000, "http_session_timeout_ms")  # no request this long


@dataclasses.dataclass
class StorageSettings:
    """``[server.storage]``: where and how messages are kept (docs/durability.md)."""

    data_dir: Path = Path("chute-data")
    store: str = _one_of("journal", "memory")  # memory: nothing survives a restart
    sync: str = _one_of("always", "batch", "never")
    sync_batch_ms: int = 10
    segment_size: int = _size(32 << 20)
    inline_sync: bool = True  # an idle journal syncs on the broker's loop
    # under this much free on the journal's disk, producers wait; 0 = off
    disk_free_limit: int = _size(64 << 20)


@dataclasses.dataclass
class MemorySettings:
    """``[server.memory]``: message data held in memory; when producers wait (docs/limits.md)."""

    max_memory: int = _size(64 << 20)  # before durable queues page to disk; 0 = never
    high_watermark: int = _size(256 << 20, flat="memory_high_watermark")  # producers wait
    # producers held at high_watermark go on under this; 0 = 90% of high_watermark
    low_watermark: int = _size(0, flat="memory_low_watermark")
    block_timeout_ms: int = 30_000  # a producer waiting for memory or disk fails after this
    max_subscription_bytes: int = _size(16 << 20)  # a non-durable subscription of a topic
    flow_backlog: int = 5000  # pause producers of a queue whose consumers lag this far; 0 = off


@dataclasses.dataclass
class ByUseSettings:
    """``[server.by_use]``: destinations clients make by using them (docs/security.md)."""

    auto_create: bool = True
    max_destinations: int = 10_000  # all clients together; 0 = no limit
    max_destinations_per_user: int = 1000  # 0 = no limit
    auto_delete_after_ms: int = 0  # idle this long: removed; 0 = never


@dataclasses.dataclass
class LimitSettings:
    """``[server.limits]``: what one client may cost the broker (docs/security.md)."""

    max_packet_size: int = _size(16 << 20)  # the largest packet or frame
    max_properties: int = 1024  # a message's properties
    max_connections: int = 10_000  # open at once, from accept on; 0 = no limit
    max_connections_per_host: int = 1000  # from one client address; 0 = no limit
    login_timeout_ms: int = 10_000  # from accept to a completed login; 0 = no deadline
    # largest packet/frame before login; 0 = max_packet_size
    max_login_frame_size: int = _size(64 << 10)
    max_login_failures: int = 10  # per client address and window; 0 = no limit
    login_failure_window_ms: int = 60_000
    # unfinished frames of one user's connections together
    max_partial_bytes_per_user: int = _size(64 << 20)
    partial_frame_timeout_ms: int = 30_000  # a frame whose bytes stop this long closes; 0 = never

    @property
    def login_frame_size(self) -> int:
        """The largest packet or frame a client may send before it logs in."""
        return min(self.max_login_frame_size or self.max_packet_size, self.max_packet_size)


@dataclasses.dataclass
class SessionSettings:
    """``[server.sessions]``: heart-beats, and how long what clients leave behind lasts."""

    heartbeat_ms: int = 10_000  # the most a client may ask for is honoured; 0 = off
    idle_timeout_ms: int = 0  # close a logged-in client without heart-beats silent this long
    prepared_timeout_ms: int = 0  # roll back prepared transactions older than this; 0 = never
    max_cursor_lease_ms: int = 300_000  # the longest lease a cursor may ask for
    expiry_interval_ms: int = 1_000  # how often expired messages and idle destinations go
    dedup_window: int = 256  # duplicate detection: request ids remembered per producer
    dedup_producers: int = 1024  # duplicate detection: producers remembered


@dataclasses.dataclass
class ClusterSettings:
    """``[server.cluster]`` (or a top-level ``[cluster]``): this node's cluster (docs/cluster.md).

    Off unless ``coordinator`` is set."""

    coordinator: str = _flat("", "cluster_coordinator")  # etcd://HOST:PORT[,HOST:PORT...][/NAME]
    node: str = _flat("", "cluster_node")  # this node's name in the cluster
    advertise: str = _flat("", "cluster_advertise")  # HOST:PORT the others dial; "": the native
    user: str = _flat("", "cluster_user")  # the user a node logs in as on the others
    password: str = _flat("", "cluster_password")  # that user's password (in plain text)
    ttl: int = _flat(10, "cluster_ttl")  # seconds: how long a dead node stays a member
    tls: bool = _flat(False, "cluster_tls")  # links over TLS, to the others' native TLS port
    # high availability (docs/ha.md): copies that must hold a record before it is confirmed
    min_in_sync: int = _flat(1, "cluster_min_in_sync")  # 1: the live alone may go on
    drop_after_ms: int = _flat(5000, "cluster_drop_after_ms")  # a backup this late is dropped
    replication_port: int = _flat(0, "cluster_replication_port")  # backups connect here; 0: any
    # HOST:PORT the backups dial for the live's replication port; "": where it listens
    replication_advertise: str = _flat("", "cluster_replication_advertise")


SECTION_TYPES: Final = (
    ListenSettings,
    TlsSettings,
    HttpSettings,
    StorageSettings,
    MemorySettings,
    ByUseSettings,
    LimitSettings,
    SessionSettings,
    ClusterSettings,
)
"""The [server] table's sections: ServerConfig's fields of these types."""
