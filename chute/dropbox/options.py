"""A dropbox URL and its options: ``dropbox:///abs/path?option=value&...``.

``dropbox:///abs/path`` or ``dropbox:relative/path``, with options in the
query:

``client_id``
    default ``<host>-<pid>``: the name claimed files carry in ``processing/``,
    and what ``chute dropbox recover --client`` takes back;
``poll_ms``
    300: how often a waiting receive looks again when no inotify event came;
``redelivery_attempts``
    9: a message is delivered at most 10 times, as the broker's default
    ``max_deliveries`` (DropboxMQ's own default is 0);
``sync``
    ``true``: fsync every file; ``false`` is faster and may lose recent
    messages in a power cut;
``delete_processed``, ``delete_expired``
    ``false``: keep them in ``processed/`` and ``expired/``;
``scan_timeout_ms``
    30000, DropboxMQ's target scan timeout;
``consumers``
    none: the client ids (comma-separated) of the consumers that claim from
    the queues this connection sends to; a name must fit once the longest
    claims it. None given: this connection's own ``client_id``. (A topic's
    subscription directories name their consumers: this is for queues.)
``block_timeout_ms``
    30000: how long a send waits while DropboxMQ's ``write-lock.properties``
    holds it back (:mod:`chute.dropbox.flow`) before it fails with
    ``DestinationFull``, as a broker's producer waits on a full destination
    (DropboxMQ's own producers wait as long as the lock says).

Parsing is pure (it touches no file); :func:`chute.dropbox.client.open_root`
opens what it describes.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from chute.dropbox.names import MAX_CLIENT_ID_BYTES, check_client_id
from chute.dropbox.queue import ConsumerOptions
from chute.dropbox.watch import DEFAULT_POLL_INTERVAL
from chute.errors import ConnectError, InvalidAddress

_NUMBERS: Final = ("redelivery_attempts", "scan_timeout_ms", "block_timeout_ms")
_FLAGS: Final = ("sync", "delete_processed", "delete_expired")
_KNOWN: Final = ("client_id", "poll_ms", "consumers", *_NUMBERS, *_FLAGS)
DEFAULT_BLOCK_TIMEOUT_MS: Final = 30_000
"""How long a send waits on DropboxMQ's write lock: a broker's ``block_timeout_ms``."""


@dataclass(frozen=True, slots=True)
class DropboxOptions:
    """A dropbox URL: the root and the options in its query (see the module docstring)."""

    root: Path
    client_id: str
    poll_interval: float = DEFAULT_POLL_INTERVAL
    redelivery_attempts: int = 9
    sync: bool = True
    delete_processed: bool = False
    delete_expired: bool = False
    scan_timeout_ms: int = 30_000
    block_timeout_ms: int = DEFAULT_BLOCK_TIMEOUT_MS
    consumers: tuple[str, ...] = ()

    @property
    def block_timeout(self) -> float:
        """``block_timeout_ms`` in seconds."""
        return self.block_timeout_ms / 1000

    def consumer_options(self) -> ConsumerOptions:
        return ConsumerOptions(
            redelivery_attempts=self.redelivery_attempts,
            delete_processed=self.delete_processed,
            delete_expired=self.delete_expired,
            target_scan_timeout_ms=self.scan_timeout_ms,
        )


def default_client_id() -> str:
    """``<host>-<pid>``, short enough to prefix every claimed filename."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{host[: MAX_CLIENT_ID_BYTES - 12]}-{os.getpid()}"


def parse_dropbox_url(url: str, client_id: str | None = None) -> DropboxOptions:
    """Read ``dropbox:///path?option=value&...``; ``client_id`` is used when the URL
    names none.

    Raises:
        ConnectError: not a dropbox URL, a host other than localhost, no path,
            or an unknown or malformed option.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "dropbox":
        raise ConnectError(f"invalid dropbox URL {url!r}: expected dropbox:///path")
    if parts.netloc not in ("", "localhost"):
        raise ConnectError(
            f"invalid dropbox URL {url!r}: a dropbox is a local directory "
            "(dropbox:///abs/path); mount a remote one and use its local path"
        )
    path = unquote(parts.path)
    if not path:
        raise ConnectError(f"invalid dropbox URL {url!r}: no directory")
    values: dict[str, Any] = {}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        values["poll_interval" if key == "poll_ms" else key] = _option(url, key, raw)
    given = values.pop("client_id", None) or client_id or default_client_id()
    try:
        check_client_id(given)
    except InvalidAddress as exc:
        raise ConnectError(exc.reason) from None
    return DropboxOptions(root=Path(path), client_id=given, **values)


def _option(url: str, key: str, raw: str) -> Any:
    """The value of one query option. Raises ConnectError."""
    if key not in _KNOWN:
        raise ConnectError(
            f"dropbox URL {url!r}: unknown option {key!r} (known: {', '.join(_KNOWN)})"
        )
    try:
        if key == "client_id":
            return raw
        if key == "consumers":
            consumers = tuple(c for c in raw.split(",") if c)
            for consumer in consumers:
                check_client_id(consumer)
            return consumers
        if key == "poll_ms":
            value = int(raw)
            if value <= 0:
                raise ValueError
            return value / 1000
        if key in _NUMBERS:
            number = int(raw)
            if number < 0:
                raise ValueError
            return number
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError
        return raw.lower() in ("true", "1", "yes")
    except (ValueError, InvalidAddress):
        raise ConnectError(f"dropbox URL {url!r}: bad value {raw!r} for {key}") from None
