"""Broker URLs: how a client reaches the broker's native protocol.

=====================================  ==========================================
``chute://host:port``                  TCP (default port 5445)
``chutes://host:port``                 TLS (default port 5446)
``ws://host:port/chute``               a WebSocket on the HTTP port (default 8445)
``wss://host:port/chute``              the same over TLS (the broker's ``http_tls``)
``http://host:port/chute``             plain requests, where only they get through
``https://host:port/chute``            the same over TLS
=====================================  ==========================================

The path of the last four defaults to ``/chute`` (another one is for a reverse
proxy that mounts the broker elsewhere). Whatever the way in, the session is the
same: the packets, the login, the permissions and limits.

A URL may carry a login and passcode, ``chute://alice:s%40cret@host:port``
(percent-encoded, as in any URL); a login or passcode given as an argument wins
over the URL's (:meth:`BrokerUrl.credentials`). A URL printed back never shows
the passcode.

``dropbox:///path`` URLs name a dropbox root, not a broker: :func:`chute.connect`
hands them to :mod:`chute.dropbox.client`.
"""

from __future__ import annotations

from typing import Final, NamedTuple
from urllib.parse import unquote, urlsplit

from chute.errors import ConnectError

DEFAULT_PORT: Final = 5445
DEFAULT_TLS_PORT: Final = 5446
DEFAULT_HTTP_PORT: Final = 8445
NATIVE_PATH: Final = "/chute"
TCP: Final = "tcp"
WEBSOCKET: Final = "websocket"
HTTP: Final = "http"
_SCHEMES: Final = {  # scheme: (transport, TLS)
    "chute": (TCP, False),
    "chutes": (TCP, True),
    "ws": (WEBSOCKET, False),
    "wss": (WEBSOCKET, True),
    "http": (HTTP, False),
    "https": (HTTP, True),
}


class BrokerUrl(NamedTuple):
    host: str
    port: int
    tls: bool = False
    login: str | None = None
    passcode: str | None = None
    transport: str = TCP
    """:data:`TCP`, :data:`WEBSOCKET` or :data:`HTTP`."""
    path: str = ""
    """The HTTP path (``/chute``) for a WebSocket or plain requests; "" over TCP."""

    @property
    def scheme(self) -> str:
        for scheme, (transport, tls) in _SCHEMES.items():
            if (transport, tls) == (self.transport, self.tls):
                return scheme
        raise ValueError(f"no scheme for {self.transport} with tls={self.tls}")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"

    def http_url(self, path: str = "") -> str:
        """The ``http(s)://`` (or ``ws(s)://``) URL of ``path`` under this one's path."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}{path}"

    def credentials(self, login: str | None, passcode: str | None) -> tuple[str | None, str | None]:
        """The login and passcode to use: those given win over the URL's, and the URL's
        passcode goes only with the URL's login."""
        if login is None:
            login = self.login
            if passcode is None:
                passcode = self.passcode
        elif passcode is None and login == self.login:
            passcode = self.passcode
        return login, passcode


def parse_url(url: str) -> BrokerUrl:
    """Split ``chute://[login[:passcode]@]host[:port]`` (default port 5445; ``[::1]`` for
    IPv6), ``chutes://...`` (TLS, default port 5446), or ``ws://``, ``wss://``,
    ``http://``, ``https://`` ``[login[:passcode]@]host[:port][/path]`` (default port
    8445, path ``/chute``).

    Raises:
        ConnectError: not a broker URL.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme == "dropbox":
        raise ConnectError(
            f"{_hidden(url)!r} is a dropbox (no broker): open it with chute.connect(), "
            "which hands dropbox: URLs to chute.dropbox.client"
        )
    if scheme not in _SCHEMES:
        raise ConnectError(
            f"invalid broker URL {_hidden(url)!r}: expected chute://host:port (or chutes://, "
            "ws://, wss://, http://, https://)"
        )
    transport, tls = _SCHEMES[scheme]
    if not parts.hostname:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: no host")
    if parts.query or parts.fragment or (transport == TCP and parts.path not in ("", "/")):
        allowed = "chute://host:port" if transport == TCP else f"{scheme}://host:port/path"
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: only {allowed} is allowed")
    login = unquote(parts.username) if parts.username else None
    passcode = unquote(parts.password) if parts.password is not None else None
    if login is None and passcode is not None:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: a passcode without a login")
    if transport == TCP:
        default, path = (DEFAULT_TLS_PORT if tls else DEFAULT_PORT), ""
    else:
        default, path = DEFAULT_HTTP_PORT, parts.path.rstrip("/") or NATIVE_PATH
    return BrokerUrl(
        parts.hostname, default if port is None else port, tls, login, passcode, transport, path
    )


def _hidden(url: str) -> str:
    """``url`` with the passcode in it, if any, replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostport}{slash}{tail}"
