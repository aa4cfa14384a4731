"""The ``[smq]`` configuration table: seed 002's source and sink listeners.

```toml
[smq]                    # the table's presence turns the listeners on
queue = "smq"            # the chute queue they serve (default "smq")
source_port = 6211       # 0 = no source listener
sink_port = 6212         # 0 = no sink listener
```
The same from the command line: ``--smq-queue``, ``--smq-source-port``,
``--smq-sink-port`` (any of them turns the listeners on). Without either,
both are off. The listeners bind the server's ``host``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from chute.core.address import parse
from chute.errors import ConfigError, InvalidAddress

DEFAULT_SOURCE_PORT: Final = 6211
DEFAULT_SINK_PORT: Final = 6212
DEFAULT_QUEUE: Final = "queue:smq"


@dataclasses.dataclass(frozen=True)
class SmqSettings:
    queue: str = DEFAULT_QUEUE  # canonical: queue:NAME
    source_port: int = DEFAULT_SOURCE_PORT
    sink_port: int = DEFAULT_SINK_PORT


def from_table(table: object) -> SmqSettings:
    """Read the ``[smq]`` table.

    Raises:
        ConfigError: not a table, an unknown key or a bad value (naming the key).
    """
    if not isinstance(table, Mapping):
        raise ConfigError("[smq] must be a table: queue, source_port, sink_port")
    unknown = set(table) - {"queue", "source_port", "sink_port"}
    if unknown:
        raise ConfigError(
            f"smq: unknown setting(s) {sorted(unknown)} (known: queue, source_port, sink_port)"
        )
    return _apply(SmqSettings(), **dict(table))


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
    return SmqSettings(
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
