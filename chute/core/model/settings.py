"""Per-destination settings and how they are found for an address.

Settings are keyed by address in the configuration; a ``*`` in a key is a
wildcard and the most specific match wins (the key with the most literal
characters; an exact key beats every pattern). A topic's settings also bound
each of its subscriptions, which are queues of their own.

A *sink* is a queue that some destination's settings name as its ``dead_letter``
or ``expiry`` address (``queue:__sys__deadLetter`` and ``queue:__sys__expired``
by default). What arrives there was sent to somewhere else, at the rate of a
flood when a subscriber falls behind, and nobody may ever consume it. So a sink
is bounded (:data:`SINK_MAX_BYTES`, ``drop-oldest``: the newest dead letters stay)
unless the configuration has a table of its own for that address (which replaces
the default, bound or none) or a pattern matching it sets a bound; and
whatever its settings, it keeps non-persistent messages in memory only, in a
share of ``max_memory`` (``transient_in_memory``, :data:`SINK_MEMORY_SHARE`): a
message its producer did not want written is not written for having been
dead-lettered.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import re
from collections.abc import Mapping
from typing import Any

from chute.core.model.address import (
    DEAD_LETTER,
    EXPIRED,
    MAX_PARTITIONS,
    PARTITION_MARK,
    canonical,
    pattern_address,
    split_partition,
)
from chute.errors import ConfigError


class Overflow(enum.Enum):
    """What a bounded destination does with a message it has no room for."""

    REJECT = "reject"  # the producer gets DestinationFull
    DEAD_LETTER = "dead-letter"  # the new message goes to the dead-letter queue
    DROP_OLDEST = "drop-oldest"  # the oldest waiting message goes to the dead-letter queue
    BLOCK = "block"  # the producer waits for room, up to block_timeout_ms


class Cleanup(enum.Enum):
    """How a stream lets messages go (its ``cleanup`` setting)."""

    DELETE = "delete"  # retention only: the oldest go past the limits
    COMPACT = "compact"  # retention, and only the newest message of each key is kept


TOMBSTONES_MS = 86_400_000
"""How long a compacted stream keeps a tombstone (a keyed message with an empty body) by
default: one day, as Kafka's ``delete.retention.ms``."""


@dataclasses.dataclass(frozen=True, slots=True)
class DestinationSettings:
    max_messages: int = 0  # 0 = unbounded
    max_bytes: int = 0  # 0 = unbounded
    overflow: Overflow = Overflow.REJECT
    max_deliveries: int = 10  # 0 = unlimited
    dead_letter: str = DEAD_LETTER
    expiry: str = EXPIRED
    block_timeout_ms: int = 30_000
    max_age_ms: int = 0
    """Streams: messages older than this are removed (0: kept whatever their age). On a
    stream ``max_messages`` and ``max_bytes`` are retention too: the oldest go."""
    cleanup: Cleanup = Cleanup.DELETE
    """Streams: ``compact`` keeps only the newest message of each key besides retention
    (:mod:`chute.core.rules.compaction`)."""
    compact_tombstones_ms: int = TOMBSTONES_MS
    """Compacted streams: how long a tombstone is kept after it was accepted."""
    partitions: int = 1
    """Streams: how many partitions it has (``stream:NAME#N``, N from 0; partition 0 is the
    stream itself). See :mod:`chute.core.rules.partitions`."""
    auto_delete_after_ms: int | None = None
    """A destination made by use and left unused this long goes (0: never; None: the
    server's ``auto_delete_after_ms``). See :mod:`chute.core.rules.destinations`."""
    transient_in_memory: bool = False
    """Non-persistent messages are never written to the store, not even to page: past
    the queue's share of ``max_memory`` (:data:`SINK_MEMORY_SHARE`) the oldest of them
    make room (sinks; not a configuration key). See ``QueueChannel.place``."""

    bounded: bool = dataclasses.field(init=False, repr=False, compare=False)
    """Whether ``max_messages`` or ``max_bytes`` bounds it: derived from them when made, an
    attribute rather than a property since every message sent asks it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounded", self.max_messages > 0 or self.max_bytes > 0)


SINK_MAX_BYTES = 64 << 20
"""The default bound of a sink (a dead-letter or expiry queue; see the module docstring)."""
SINK_MEMORY_SHARE = 4
"""A sink holds its messages in at most ``max_memory // SINK_MEMORY_SHARE`` of memory
before its oldest non-persistent ones make room (the persistent ones page): a flood's
dead letters never pin the memory every durable queue pages at."""


_SIZE_RE = re.compile(r"^\s*(\d+)\s*(B|KB|KIB|MB|MIB|GB|GIB|K|M|G)?\s*$", re.IGNORECASE)
_UNITS = {
    None: 1,
    "B": 1,
    "K": 1024,
    "KB": 1000,
    "KIB": 1024,
    "M": 1 << 20,
    "MB": 1000**2,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1000**3,
    "GIB": 1 << 30,
}


def parse_size(value: int | str, *, what: str = "size") -> int:
    """``512MiB`` / ``64KB`` / ``1000`` -> bytes.

    Raises:
        ConfigError: not a size.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size such as 512MiB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{what}: must not be negative")
        return value
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ConfigError(f"{what}: expected a size such as 512MiB or 64KB, got {value!r}")
    unit = match.group(2).upper() if match.group(2) else None
    return int(match.group(1)) * _UNITS[unit]


_DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: int | str, *, what: str = "duration") -> int:
    """``7d`` / ``12h`` / ``30m`` / ``10s`` / ``500ms`` -> milliseconds (0 is 0).

    Raises:
        ConfigError: not a duration with its unit.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return 0
    match = _DURATION_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise ConfigError(
            f"{what}: expected a duration with its unit such as 7d, 12h, 30m, 10s or 500ms, "
            f"got {value!r}"
        )
    return int(match.group(1)) * _DURATION_MS[match.group(2).lower()]


def settings_from_mapping(raw: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Validate one ``[destinations."..."]`` table into DestinationSettings keyword arguments.

    Raises:
        ConfigError: an unknown key or a bad value, naming ``where``.
    """
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        try:
            if name in (
                "max_messages",
                "max_deliveries",
                "block_timeout_ms",
                "auto_delete_after_ms",
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"must be a non-negative integer, got {value!r}")
                out[name] = value
            elif name == "partitions":
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or not 1 <= value <= MAX_PARTITIONS
                ):
                    raise ConfigError(f"must be an integer 1-{MAX_PARTITIONS}, got {value!r}")
                out[name] = value
            elif name == "max_bytes":
                out[name] = parse_size(value, what=key)
            elif name == "max_age":
                out["max_age_ms"] = parse_duration_ms(value, what=key)
            elif name == "compact_tombstones":
                out["compact_tombstones_ms"] = parse_duration_ms(value, what=key)
            elif name == "cleanup":
                try:
                    out[name] = Cleanup(value)
                except ValueError:
                    choices = " | ".join(c.value for c in Cleanup)
                    raise ConfigError(f"must be one of {choices}, got {value!r}") from None
            elif name == "overflow":
                try:
                    out[name] = Overflow(value)
                except ValueError:
                    choices = " | ".join(o.value for o in Overflow)
                    raise ConfigError(f"must be one of {choices}, got {value!r}") from None
            elif name in ("dead_letter", "expiry"):
                out[name] = canonical(str(value))
            else:
                raise ConfigError("unknown setting")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {key}: {exc.reason}") from None
        except ValueError as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from None
    return out


class SettingsResolver:
    """Finds the settings of an address: exact key, else the most specific wildcard."""

    def __init__(
        self,
        patterns: Mapping[str, DestinationSettings] | None = None,
        default: DestinationSettings | None = None,
    ) -> None:
        self.default = default or DestinationSettings()
        self._exact: dict[str, DestinationSettings] = {}
        self._wild: list[tuple[int, re.Pattern[str], DestinationSettings]] = []
        for key, settings in (patterns or {}).items():
            if "*" in key:
                text = pattern_address(key)
                specificity = len(text.replace("*", ""))
                self._wild.append((specificity, re.compile(fnmatch.translate(text)), settings))
            else:
                self._exact[canonical(key)] = settings
        self._wild.sort(key=lambda item: -item[0])
        self._cache: dict[str, DestinationSettings] = {}
        every = (self.default, *(patterns or {}).values())
        self.sinks = frozenset(
            address
            for s in every
            for address in map(canonical, (s.dead_letter, s.expiry))
            if address.startswith("queue:")
        )
        """The dead-letter and expiry addresses some destination names (see the module
        docstring)."""
        self.auto_deletes = any(s.auto_delete_after_ms for s in every)
        """Some destination's settings remove it once idle (``auto_delete_after_ms``)."""

    def __call__(self, address: str) -> DestinationSettings:
        found = self._cache.get(address)
        if found is not None:
            return found
        if PARTITION_MARK in address:  # a stream's partition has the stream's settings
            found = self._cache[address] = self(split_partition(address)[0])
            return found
        found = self._exact.get(address)
        if found is None:
            found = next((s for _, pat, s in self._wild if pat.match(address)), self.default)
            if address in self.sinks and not found.bounded:
                found = dataclasses.replace(
                    found, max_bytes=SINK_MAX_BYTES, overflow=Overflow.DROP_OLDEST
                )
        if address in self.sinks:
            found = dataclasses.replace(found, transient_in_memory=True)
        self._cache[address] = found
        return found
