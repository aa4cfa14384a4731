"""Broker URLs: ``chute://host:port``, and ``chutes://host:port`` for TLS; ``ws(s)://`` later.

``dropbox:///path`` URLs name a dropbox root, not a broker: :func:`chute.connect`
hands them to :mod:`chute.dropbox.client`.
"""

from __future__ import annotations

from typing import Final, NamedTuple
from urllib.parse import urlsplit

from chute.errors import ConnectError

DEFAULT_PORT: Final = 5445
DEFAULT_TLS_PORT: Final = 5446
_LATER: Final = frozenset({"ws", "wss"})


class BrokerUrl(NamedTuple):
    host: str
    port: int
    tls: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'chutes' if self.tls else 'chute'}://{host}:{self.port}"


def parse_url(url: str) -> BrokerUrl:
    """Split ``chute://host[:port]`` (default port 5445; ``[::1]`` for IPv6) or
    ``chutes://host[:port]`` (TLS, default port 5446).

    Raises:
        ConnectError: not a ``chute://`` URL, or a transport not supported yet.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConnectError(f"invalid broker URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme == "dropbox":
        raise ConnectError(
            f"{url!r} is a dropbox (no broker): open it with chute.connect(), "
            "which hands dropbox: URLs to chute.dropbox.client"
        )
    if scheme in _LATER:
        raise ConnectError(f"{scheme}: URLs are not supported yet; use chute://host:port")
    if scheme not in ("chute", "chutes"):
        raise ConnectError(f"invalid broker URL {url!r}: expected chute://host:port")
    if not parts.hostname:
        raise ConnectError(f"invalid broker URL {url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConnectError(f"invalid broker URL {url!r}: only chute://host:port is allowed")
    tls = scheme == "chutes"
    default = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    return BrokerUrl(parts.hostname, default if port is None else port, tls)
