"""The broker's ``[[dropbox]]`` configuration: which dropbox roots the bridge mounts.

```toml
[[dropbox]]
root = "/srv/mq"                   # the dropbox root (created if missing)
destinations = ["orders", "topic:news"]
direction = "import"               # import: files -> broker; export: broker -> files
poll_interval_ms = 300             # rescan at least this often (inotify wakes sooner)
client = "chute-bridge"            # the client id its claimed files carry
delete_processed = false           # import: delete a taken file instead of processed/
batch = 256                        # import: files taken per store sync
consumers = ["javaC"]              # export: client ids of the queues' readers
```
Import takes ``NAME`` (queue dropbox ``NAME`` -> ``queue:NAME``) and
``topic:NAME`` (-> ``topic:NAME``): read, as a DropboxMQ subscriber reads it,
from the durable subscription ``<client>.<client>`` the bridge makes in the
topic dropbox, after fanning out the topic's ``.incoming`` as DropboxMQ's
distributor does. Export takes broker addresses: a queue is written to the
queue dropbox of the same name, a topic to every subscription of the topic
dropbox of the same name and of the topics above it (through a durable broker
subscription named after ``client``). An exported name must fit once claimed:
``consumers`` lists the client ids that read the exported queues, and a name
leaves room for the longest one's claim prefix (none listed: room for
DropboxMQ's generated client ids, 27 characters); a topic's subscription
directories name their clients, so a topic needs no list.
Pure: parsing only; :mod:`chute.dropbox.bridge` does the I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from chute.core.model.address import Kind, parse
from chute.dropbox.names import MAX_CLIENT_ID_BYTES, check_client_id, check_destination_name
from chute.errors import ChuteError, ConfigError, InvalidAddress

__all__ = ["DEFAULT_BRIDGE_CLIENT", "Direction", "DropboxMount", "parse_mounts"]

DEFAULT_BRIDGE_CLIENT: Final = "chute-bridge"
_KEYS: Final = (
    "root",
    "destinations",
    "direction",
    "poll_interval_ms",
    "client",
    "delete_processed",
    "batch",
    "user",
    "consumers",
)


class Direction(enum.Enum):
    IMPORT = "import"
    EXPORT = "export"


@dataclass(frozen=True, slots=True)
class DropboxMount:
    """One ``[[dropbox]]`` table: a root, its destinations and which way they flow."""

    root: Path
    destinations: tuple[str, ...]  # canonical addresses: queue:NAME / topic:NAME
    direction: Direction = Direction.IMPORT
    poll_interval_ms: int = 300
    client: str = DEFAULT_BRIDGE_CLIENT
    delete_processed: bool = False
    batch: int = 256
    user: str | None = None  # who the bridge acts as (required once [users] exist)
    consumers: tuple[str, ...] = ()  # export: the client ids that claim from its queues


def parse_mounts(value: Any) -> list[DropboxMount]:
    """The ``[[dropbox]]`` array of tables, checked.

    Raises:
        ConfigError: naming the table and key that is wrong.
    """
    if not isinstance(value, list):
        raise ConfigError("dropbox must be an array of tables: [[dropbox]]")
    mounts = [_mount(i, table) for i, table in enumerate(value)]
    seen: dict[tuple[Path, str], int] = {}
    for i, mount in enumerate(mounts):
        for address in mount.destinations:
            key = (mount.root, address)
            if key in seen:
                raise ConfigError(
                    f"dropbox[{i}]: {address} in {mount.root} is already mounted by "
                    f"dropbox[{seen[key]}]"
                )
            seen[key] = i
    return mounts


def _mount(index: int, table: Any) -> DropboxMount:
    where = f"dropbox[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(table) - set(_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} (known: {', '.join(_KEYS)})")
    root = table.get("root")
    if not isinstance(root, str) or not root:
        raise ConfigError(f'{where}.root: the dropbox directory is required, e.g. root = "/srv/mq"')
    try:
        direction = Direction(table.get("direction", "import"))
    except ValueError:
        raise ConfigError(
            f"{where}.direction: must be import or export, got {table.get('direction')!r}"
        ) from None
    names = table.get("destinations")
    if names is None:
        raise ConfigError(
            f"{where}.destinations is required: the queues and topics this mount carries, "
            'e.g. destinations = ["orders", "topic:news"]'
        )
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f'{where}.destinations: a list of names, e.g. ["orders"]')
    destinations: list[str] = []
    for name in names:
        try:
            addr = parse(name)
            if addr.kind is Kind.STREAM:
                raise ConfigError(
                    f"{where}.destinations: {addr} is a stream; DropboxMQ has queues and "
                    "topics only (a mount carries those)"
                )
            check_destination_name(addr.name, topic=addr.kind is Kind.TOPIC)
        except ChuteError as exc:
            raise ConfigError(f"{where}.destinations: {exc.reason}") from None
        destinations.append(str(addr))
    poll = _int(table, "poll_interval_ms", 300, where, low=1)
    batch = _int(table, "batch", 256, where, low=1)
    client = table.get("client", DEFAULT_BRIDGE_CLIENT)
    bad_client = ConfigError(f"{where}.client: 1-{MAX_CLIENT_ID_BYTES} bytes of client id")
    if not isinstance(client, str):
        raise bad_client
    try:
        check_client_id(client)
    except InvalidAddress:
        raise bad_client from None
    user = table.get("user")
    if user is not None and (not isinstance(user, str) or not user):
        raise ConfigError(f"{where}.user: expected a user name, got {user!r}")
    consumers = _consumers(table, where, direction)
    delete = table.get("delete_processed", False)
    if not isinstance(delete, bool):
        raise ConfigError(f"{where}.delete_processed: expected true or false")
    return DropboxMount(
        root=Path(root),
        destinations=tuple(destinations),
        direction=direction,
        poll_interval_ms=poll,
        client=client,
        delete_processed=delete,
        batch=batch,
        user=user,
        consumers=consumers,
    )


def _consumers(table: dict[str, Any], where: str, direction: Direction) -> tuple[str, ...]:
    value = table.get("consumers", [])
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise ConfigError(f'{where}.consumers: a list of client ids, e.g. ["javaC"]')
    if value and direction is not Direction.EXPORT:
        raise ConfigError(
            f"{where}.consumers: only an export writes names for other consumers to claim"
        )
    for client in value:
        try:
            check_client_id(client)
        except InvalidAddress:
            raise ConfigError(
                f"{where}.consumers: {client[:60]!r} is not 1-{MAX_CLIENT_ID_BYTES} bytes "
                "of client id"
            ) from None
    return tuple(value)


def _int(table: dict[str, Any], key: str, default: int, where: str, *, low: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}.{key}: expected an integer >= {low}, got {value!r}")
    return value
