"""Web origins: which pages a browser may let open the broker's WebSocket.

A browser opens a WebSocket to any host a page asks for, sends the user's
cookies and, on loopback, reaches a broker that trusts loopback. What it also
sends is the page's origin (``Origin: https://app.example.com``), which the page
cannot forge; so the WebSocket endpoint accepts a browser only from the
broker's own HTTP origins (:func:`own_origins`: a page the broker served) and
those in ``[server] allowed_origins``. A client that is not a browser sends no
``Origin`` (or, as websocket-client does, the broker's own) and is not
concerned. ``"*"`` allows every origin (unsafe: any web page the user visits
may then talk to the broker as they can).

An origin is compared in one spelling (:func:`normalize`): the scheme and host
in lower case, the port only when it is not the scheme's default.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

ANY: Final = "*"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def normalize(text: str) -> str | None:
    """``scheme://host[:port]`` (http or https) in one spelling, or None if ``text`` is
    not such an origin (``null``, a path, user info, another scheme)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path or parts.query or parts.fragment or "@" in parts.netloc:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default = _DEFAULT_PORTS[scheme]
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def own_origins(host: str, port: int) -> list[str]:
    """The origins of the broker's own HTTP port: http and https, on 127.0.0.1,
    localhost and [::1], and on ``host`` when it names one address."""
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host and host not in hosts:
            hosts.append(host.lower())
    else:
        if not address.is_unspecified:
            hosts.append(f"[{address}]" if address.version == 6 else str(address))
    out: list[str] = []
    for scheme in ("http", "https"):
        for name in hosts:
            origin = normalize(f"{scheme}://{name}:{port}")
            if origin is not None and origin not in out:
                out.append(origin)
    return out


class OriginPolicy:
    """Which ``Origin`` headers the WebSocket endpoint accepts. Immutable."""

    def __init__(self, allowed: Iterable[str]) -> None:
        texts = list(allowed)
        self.any = ANY in texts
        self.allowed = frozenset(o for o in (normalize(t) for t in texts if t != ANY) if o)

    def allows(self, origin: str | None) -> bool:
        """No ``Origin`` (not a browser) is allowed; a browser's only from an allowed one."""
        if origin is None or self.any:
            return True
        return normalize(origin) in self.allowed
