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

**Several nodes** of a cluster go in one URL, comma-separated:
``chute://h1:5445,h2:5445,[::1]:5445`` (any scheme; a node without a port takes the
scheme's default). The client tries them one after the other, starting from a
random one (so that clients spread over the nodes), or from the first with
``?order=listed``; :meth:`BrokerUrl.nodes` gives them in that order. A node listed
twice is an error.

**Failover**: ``?failover=SECONDS`` is how long a connection that lost its node keeps
trying to reach one of the URL's nodes, going round the list (the same node come back,
a backup that took over, another node), before it gives up: by default
:data:`DEFAULT_FAILOVER` seconds with several nodes, and 0 (no move: the connection
closes) with one. Options join with ``&``.

``dropbox:///path`` URLs name a dropbox root, not a broker: :func:`chute.connect`
hands them to :mod:`chute.dropbox.client`.
"""

from __future__ import annotations

import random
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
RANDOM: Final = "random"
LISTED: Final = "listed"
ORDERS: Final = (RANDOM, LISTED)
"""The orders in which a client tries the nodes of a URL (``?order=``; random first)."""
DEFAULT_FAILOVER: Final = 30.0
"""Seconds a connection to a URL of several nodes keeps trying to reach one once its
node is lost (``?failover=``)."""


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
    others: tuple[tuple[str, int], ...] = ()
    """The further nodes of a cluster, ``(host, port)``, after the first (host, port)."""
    order: str = RANDOM
    """:data:`RANDOM` or :data:`LISTED`: where :meth:`nodes` starts."""
    failover_option: float | None = None
    """``?failover=`` as given; None: not given (see :attr:`failover`)."""

    @property
    def failover(self) -> float:
        """Seconds a lost connection keeps trying to reach a node (0: one try of each,
        or with one node, none: the connection closes)."""
        if self.failover_option is not None:
            return self.failover_option
        return DEFAULT_FAILOVER if self.others else 0.0

    @property
    def node(self) -> str:
        """The first node, ``host:port`` (``[::1]:5445`` for IPv6)."""
        return _node(self.host, self.port)

    def nodes(self) -> tuple[BrokerUrl, ...]:
        """One URL per node, in the order a client tries them: from a random one (then
        round the list) or, with ``order=listed``, from the first."""
        every = ((self.host, self.port), *self.others)
        start = random.randrange(len(every)) if self.order == RANDOM else 0  # noqa: S311 - spreading, not secrecy
        return tuple(
            self._replace(host=host, port=port, others=())
            for host, port in every[start:] + every[:start]
        )

    @property
    def scheme(self) -> str:
        for scheme, (transport, tls) in _SCHEMES.items():
            if (transport, tls) == (self.transport, self.tls):
                return scheme
        raise ValueError(f"no scheme for {self.transport} with tls={self.tls}")

    def __str__(self) -> str:
        nodes = ",".join(_node(host, port) for host, port in ((self.host, self.port), *self.others))
        options = []
        if self.others and self.order != RANDOM:
            options.append(f"order={self.order}")
        if self.failover_option is not None:
            options.append(f"failover={self.failover_option:g}")
        query = "?" + "&".join(options) if options else ""
        return f"{self.scheme}://{nodes}{self.path}{query}"

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
    """Split ``chute://[login[:passcode]@]host[:port][,host[:port]...]`` (default port
    5445; ``[::1]`` for IPv6), ``chutes://...`` (TLS, default port 5446), or ``ws://``,
    ``wss://``, ``http://``, ``https://`` ``[login[:passcode]@]host[:port][,...][/path]``
    (default port 8445, path ``/chute``); each may end with ``?order=listed`` (or
    ``random``, the default) and ``failover=SECONDS``, joined by ``&``.

    Raises:
        ConnectError: not a broker URL.
    """
    try:
        parts = urlsplit(url)
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
    if parts.fragment or (transport == TCP and parts.path not in ("", "/")):
        allowed = "chute://host:port" if transport == TCP else f"{scheme}://host:port/path"
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: only {allowed} is allowed")
    order, failover = _options(url, parts.query)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    login, passcode = _credentials(url, userinfo) if at else (None, None)
    if transport == TCP:
        default, path = (DEFAULT_TLS_PORT if tls else DEFAULT_PORT), ""
    else:
        default, path = DEFAULT_HTTP_PORT, parts.path.rstrip("/") or NATIVE_PATH
    nodes = _nodes(url, hosts, default)
    (host, port), *others = nodes
    return BrokerUrl(
        host, port, tls, login, passcode, transport, path, tuple(others), order, failover
    )


def _nodes(url: str, hosts: str, default: int) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each comma-separated node of ``hosts``."""
    if not hosts:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: no host")
    nodes: list[tuple[str, int]] = []
    for entry in hosts.split(","):
        try:
            parts = urlsplit(f"//{entry}")
            port = parts.port
        except ValueError as exc:
            raise ConnectError(
                f"invalid broker URL {_hidden(url)!r}: node {entry!r}: {exc}"
            ) from None
        if not parts.hostname:
            what = f"node {entry!r} has no host" if entry else "an empty node in the list"
            raise ConnectError(f"invalid broker URL {_hidden(url)!r}: {what}")
        node = (parts.hostname, default if port is None else port)
        if node in nodes:
            raise ConnectError(
                f"invalid broker URL {_hidden(url)!r}: node {_node(*node)} is listed twice"
            )
        nodes.append(node)
    return nodes


def _options(url: str, query: str) -> tuple[str, float | None]:
    """The ``order`` and ``failover`` of a URL's query."""
    order, failover = RANDOM, None
    for option in query.split("&") if query else ():
        name, _, value = option.partition("=")
        if name == "order" and value in ORDERS:
            order = value
        elif name == "failover" and _seconds(value) is not None:
            failover = _seconds(value)
        else:
            raise ConnectError(
                f"invalid broker URL {_hidden(url)!r}: unknown option {option!r} "
                "(the options are order=random, the default, or order=listed; and "
                "failover=SECONDS, 0 or more)"
            )
    return order, failover


def _seconds(value: str) -> float | None:
    """``value`` as a number of seconds (0 or more, finite), or None."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


def _credentials(url: str, userinfo: str) -> tuple[str | None, str | None]:
    """The login and passcode of a URL's ``login[:passcode]``."""
    name, colon, secret = userinfo.partition(":")
    login = unquote(name) if name else None
    passcode = unquote(secret) if colon else None
    if login is None and passcode is not None:
        raise ConnectError(f"invalid broker URL {_hidden(url)!r}: a passcode without a login")
    return login, passcode


def _node(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _hidden(url: str) -> str:
    """``url`` with the passcode in it, if any, replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostport}{slash}{tail}"
