"""Broker URLs: ``chute://host:port``, and ``chutes://host:port`` for TLS; ``ws(s)://`` later.

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
_LATER: Final = frozenset({"ws", "wss"})


class BrokerUrl(NamedTuple):
    host: str
    port: int
    tls: bool = False
    login: str | None = None
    passcode: str | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'chutes' if self.tls else 'chute'}://{host}:{self.port}"

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
    IPv6) or ``chutes://...`` (TLS, default port 5446).

    Raises:
        ConnectError: not a ``chute://`` URL, or a transport not supported yet.
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
    if scheme in _LATER:
        raise ConnectError(f"{scheme}: URLs are not supported yet; use chute://host:port")
    if scheme not in ("chute", "chutes"):
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: expected chute://host:port")
    if not parts.hostname:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConnectError(
            f"invalid broker URL {_hidden(url)!r}: only chute://host:port is allowed"
        )
    login = unquote(parts.username) if parts.username else None
    passcode = unquote(parts.password) if parts.password is not None else None
    if login is None and passcode is not None:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: a passcode without a login")
    tls = scheme == "chutes"
    default = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    return BrokerUrl(parts.hostname, default if port is None else port, tls, login, passcode)


def _hidden(url: str) -> str:
    """``url`` with the passcode in it, if any, replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostport}{slash}{tail}"
