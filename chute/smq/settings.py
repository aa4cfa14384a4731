"""The ``[smq]`` configuration table: Simple-message-queue's source and sink listeners.

```toml
[smq]                    # the table's presence turns the listeners on
queue = "smq"            # the chute queue they serve (default "smq")
source_port = 6211       # 0 = no source listener
sink_port = 6212         # 0 = no sink listener
user = "legacy"          # who the listeners act as (required once [users] exist)
allowed_clients = ["127.0.0.0/8", "::1"]   # addresses or networks that may connect
```
The protocol has no login, so the listeners act as the configured ``user``
(its roles decide what they may do) and accept connections only from
``allowed_clients`` (default: loopback only; ``["0.0.0.0/0", "::/0"]`` for any).
The same from the command line: ``--smq-queue``, ``--smq-source-port``,
``--smq-sink-port`` (any of them turns the listeners on). Without either,
both are off. The listeners bind the server's ``host``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any, Final

from chute.core.model.address import parse
from chute.errors import ConfigError, InvalidAddress

DEFAULT_SOURCE_PORT: Final = 6211
DEFAULT_SINK_PORT: Final = 6212
DEFAULT_QUEUE: Final = "queue:smq"
LOOPBACK: Final = ("127.0.0.0/8", "::1")
_KEYS: Final = ("queue", "source_port", "sink_port", "user", "allowed_clients")


@dataclasses.dataclass(frozen=True)
class SmqSettings:
    queue: str = DEFAULT_QUEUE  # canonical: queue:NAME
    source_port: int = DEFAULT_SOURCE_PORT
    sink_port: int = DEFAULT_SINK_PORT
    user: str | None = None  # who the listeners act as
    allowed_clients: tuple[str, ...] = LOOPBACK

    def allows(self, host: str) -> bool:
        """A client at ``host`` may connect."""
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in ipaddress.ip_network(n, strict=False) for n in self.allowed_clients)


def from_table(table: object) -> SmqSettings:
    """Read the ``[smq]`` table.

    Raises:
        ConfigError: not a table, an unknown key or a bad value (naming the key).
    """
    if not isinstance(table, Mapping):
        raise ConfigError(f"[smq] must be a table: {', '.join(_KEYS)}")
    unknown = set(table) - set(_KEYS)
    if unknown:
        raise ConfigError(f"smq: unknown setting(s) {sorted(unknown)} (known: {', '.join(_KEYS)})")
    values = dict(table)
    user = values.pop("user", None)
    if user is not None and (not isinstance(user, str) or not user):
        raise ConfigError(f"smq.user: expected a user name, got {user!r}")
    clients = values.pop("allowed_clients", list(LOOPBACK))
    if not isinstance(clients, list) or not all(isinstance(c, str) for c in clients):
        raise ConfigError('smq.allowed_clients: a list of addresses or networks, ["10.0.0.0/8"]')
    for client in clients:
        try:
            ipaddress.ip_network(client, strict=False)
        except ValueError:
            raise ConfigError(
                f"smq.allowed_clients: {client!r} is not an address or network"
            ) from None
    base = dataclasses.replace(SmqSettings(), user=user, allowed_clients=tuple(clients))
    return _apply(base, **values)


def with_overrides(
    settings: SmqSettings | None,
    *,
    queue: Any = None,
    source_port: Any = None,
    sink_port: Any = None,
) -> SmqSettings | None:
    """``settings`` with the values given (None = keep); any value given turns smq on.

    Raises:
        ConfigError: a bad queue name or port (naming the key).
    """
    if queue is None and source_port is None and sink_port is None:
        return settings
    return _apply(
        settings or SmqSettings(), queue=queue, source_port=source_port, sink_port=sink_port
    )


def _apply(
    base: SmqSettings, *, queue: Any = None, source_port: Any = None, sink_port: Any = None
) -> SmqSettings:
    return dataclasses.replace(
        base,
        queue=base.queue if queue is None else _queue(queue),
        source_port=base.source_port if source_port is None else _port("source_port", source_port),
        sink_port=base.sink_port if sink_port is None else _port("sink_port", sink_port),
    )


def _queue(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"smq.queue: expected a queue name, got {value!r}")
    try:
        address = parse(value)
    except InvalidAddress as exc:
        raise ConfigError(f"smq.queue: {exc.reason}") from None
    if not address.is_queue or address.is_temporary or address.login is not None:
        raise ConfigError(f"smq.queue: {value!r} is not a plain queue (queue:NAME)")
    return str(address)


def _port(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"smq.{key}: {value!r} is not a TCP port (0-65535, 0 = off)")
    return value
