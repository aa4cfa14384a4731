"""The server's configuration: one TOML file, every key with a default.

```toml
[server]
host = "127.0.0.1"
port = 5445              # native protocol; 0 disables
stomp_port = 61613       # STOMP 1.0-1.2; 0 disables
http_port = 8445         # HTTP: STOMP over WebSocket on /stomp; 0 disables
data_dir = "chute-data"
store = "journal"        # or "memory": nothing survives a restart
sync = "always"          # journal: always | batch | never (docs/durability.md)
auto_create = true       # create destinations on first use
prepared_timeout_ms = 0  # roll back two-phase work no coordinator finished; 0 = never
max_packet_size = "16MiB"
max_memory = "64MiB"     # message data held in memory before durable queues page to disk
flow_backlog = 5000      # pause a queue's producers while its consumers lag this far; 0 = off
inline_sync = true       # an idle journal syncs on the broker's loop (docs/durability.md)
heartbeat_ms = 10000     # the most a client may ask for is honoured; 0 = off

[users]                  # required before binding anything but loopback
alice = "secret"

[destinations."queue:orders"]
max_messages = 100000
overflow = "dead-letter"
```
Command-line flags override the file (see ``chute serve --help``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chute.core.address import canonical
from chute.core.settings import (
    DestinationSettings,
    SettingsResolver,
    parse_size,
    settings_from_mapping,
)
from chute.dropbox.mount import DropboxMount, parse_mounts
from chute.errors import ConfigError, InvalidAddress
from chute.smq import settings as smq_settings
from chute.smq.settings import SmqSettings

DEFAULT_PORT = 5445
DEFAULT_STOMP_PORT = 61613
DEFAULT_HTTP_PORT = 8445  # DESIGN.md's HTTP port: STOMP over WebSocket, later admin and console


@dataclasses.dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    stomp_port: int = DEFAULT_STOMP_PORT  # 0 = off
    http_port: int = DEFAULT_HTTP_PORT  # 0 = off
    data_dir: Path = Path("chute-data")
    auto_create: bool = True
    max_packet_size: int = 16 << 20
    max_properties: int = 1024
    heartbeat_ms: int = 10_000
    expiry_interval_ms: int = 1_000
    prepared_timeout_ms: int = 0  # roll back prepared transactions older than this; 0 = never
    store: str = "journal"  # "journal" (on disk, in data_dir) or "memory" (nothing survives)
    sync: str = "always"  # journal: always | batch | never (see docs/durability.md)
    sync_batch_ms: int = 10
    segment_size: int = 32 << 20
    max_memory: int = 64 << 20  # message data in memory before durable queues page; 0 = never
    flow_backlog: int = 5000  # pause producers of a queue whose consumers fall this far behind
    inline_sync: bool = True  # an idle journal syncs on the broker's loop (docs/durability.md)
    tls_port: int = 0  # the native protocol over TLS (chutes://); 0 = off; needs tls_cert
    tls_cert: str = ""  # PEM certificate chain (may hold the key too)
    tls_key: str = ""  # PEM private key, if not in tls_cert
    users: dict[str, str] = dataclasses.field(default_factory=dict)
    destinations: dict[str, DestinationSettings] = dataclasses.field(default_factory=dict)
    default_destination: DestinationSettings = dataclasses.field(
        default_factory=DestinationSettings
    )
    smq: SmqSettings | None = None  # seed 002's listeners; off unless [smq] (docs/smq.md)
    dropbox: list[DropboxMount] = dataclasses.field(default_factory=list)  # docs/dropbox.md

    def resolver(self) -> SettingsResolver:
        return SettingsResolver(self.destinations, self.default_destination)

    def check(self) -> None:
        """Raises ConfigError for combinations that are unsafe or impossible."""
        for name, port in (
            ("port", self.port),
            ("stomp_port", self.stomp_port),
            ("http_port", self.http_port),
            ("tls_port", self.tls_port),
        ):
            if not 0 <= port <= 65535:
                raise ConfigError(f"server.{name}: {port} is not a TCP port (0-65535)")
        if self.tls_port and not self.tls_cert:
            raise ConfigError(
                "server.tls_port is set but server.tls_cert is not: give the PEM certificate "
                "(and tls_key, unless the key is in the same file)"
            )
        if not self.users and not _is_loopback(self.host):
            raise ConfigError(
                f"server.host = {self.host!r} accepts connections from other machines: "
                "configure [users] first (anonymous access is only allowed on loopback)"
            )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_SERVER_KEYS = {
    "host": str,
    "port": int,
    "stomp_port": int,
    "http_port": int,
    "data_dir": str,
    "auto_create": bool,
    "max_packet_size": "size",
    "max_properties": int,
    "heartbeat_ms": int,
    "expiry_interval_ms": int,
    "prepared_timeout_ms": int,
    "store": ("journal", "memory"),
    "sync": ("always", "batch", "never"),
    "sync_batch_ms": int,
    "segment_size": "size",
    "max_memory": "size",
    "flow_backlog": int,
    "inline_sync": bool,
    "tls_port": int,
    "tls_cert": str,
    "tls_key": str,
}


def load(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Read ``path`` (if given), apply ``overrides`` (command-line flags), validate.

    Raises:
        ConfigError: unreadable file, bad TOML, unknown key or bad value (naming the key).
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    config = ServerConfig()
    unknown = set(raw) - {"server", "users", "destinations", "smq", "dropbox"}
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}: "
            "expected server, users, destinations, smq, dropbox"
        )
    if "smq" in raw:
        config.smq = smq_settings.from_table(raw["smq"])
    config.dropbox = parse_mounts(raw.get("dropbox", []))
    server = dict(raw.get("server", {}))
    server.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for key, value in server.items():
        _set_server_key(config, key, value)
    users = raw.get("users", {})
    if not isinstance(users, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in users.items()
    ):
        raise ConfigError('[users] must map user names to passwords: alice = "secret"')
    config.users = dict(users)
    destinations = raw.get("destinations", {})
    if not isinstance(destinations, dict):
        raise ConfigError("[destinations] must be tables keyed by address")
    for address, table in destinations.items():
        where = f'destinations."{address}"'
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        _check_destination_key(address, where)
        values = settings_from_mapping(table, where=where)
        if address == "*":
            config.default_destination = DestinationSettings(**values)
        else:
            config.destinations[address] = DestinationSettings(**values)
    config.check()
    return config


def _check_destination_key(key: str, where: str) -> None:
    """A key is an address, or an address pattern where ``*`` stands for any characters."""
    if key == "*":
        return
    try:
        canonical(key.replace("*", "x"))
    except InvalidAddress as exc:
        raise ConfigError(f"{where}: {exc.reason}") from None


def _set_server_key(config: ServerConfig, key: str, value: Any) -> None:
    kind = _SERVER_KEYS.get(key)
    if kind is None:
        raise ConfigError(f"server.{key}: unknown setting (known: {', '.join(_SERVER_KEYS)})")
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"server.{key}: must be one of {' | '.join(kind)}, got {value!r}")
        setattr(config, key, value)
    elif kind == "size":
        setattr(config, key, parse_size(value, what=f"server.{key}"))
    elif kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"server.{key}: expected true or false, got {value!r}")
        setattr(config, key, value)
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"server.{key}: expected a non-negative integer, got {value!r}")
        setattr(config, key, value)
    elif key == "data_dir":
        setattr(config, key, Path(str(value)))
    else:
        setattr(config, key, str(value))
