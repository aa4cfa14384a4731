"""The HTTP listener (``http_port``): aiohttp on the broker's event loop.

It serves one :class:`HttpSite`: the application that routes STOMP and the
native protocol over WebSocket (:mod:`chute.server.websocket`), the native
protocol over plain requests (:mod:`chute.server.tunnel`), the admin API,
metrics, health and the web console. That site is assembled above the server,
in :mod:`chute.admin.site` (which answers 503 while the broker recovers), and
handed to the listener, so nothing here imports ``chute.admin``. The listener
opens before the broker recovers. aiohttp runs on the loop the
broker already runs on, so a handler calls the core directly, as the TCP
drivers do.

The listening socket is the broker's, not aiohttp's (:class:`_Site`): each
connection is accepted by the broker's :class:`~chute.server.listener.Listener`
(the connection limits count it, and before login only a small budget of its
bytes is read: aiohttp would buffer a whole WebSocket message) and passes through
:mod:`chute.server.accept`, as on the TCP listeners, so with ``http_tls`` the port
serves HTTPS and WSS with the broker's TLS context (:mod:`chute.server.tls`),
and a failed handshake is logged. Browsers may open
the WebSocket only from the broker's own origin or one of ``allowed_origins``
(:mod:`chute.origins`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from chute.origins import OriginPolicy, own_origins
from chute.server.host import ServerHost
from chute.server.limits import ConnectionLimits
from chute.server.listener import Listener
from chute.server.tls import ProtocolFactory

log = logging.getLogger("chute.server")

SHUTDOWN_TIMEOUT = 2.0
LINGER = 0.5
"""Seconds the rest of a body no handler read (a refused, unknown or too large POST) is
read and dropped after the answer, so that a small one sent after its headers leaves
the connection usable; then it closes. aiohttp's default, 10 s, let a stranger make
the broker read a 16 MiB body it had refused, at full speed."""
MAX_REASON = 100
"""Characters of a malformed request's error logged (it quotes what the client sent)."""
Listen = Callable[[ProtocolFactory], Listener]
"""Opens the broker's listener for aiohttp's protocol factory."""


if TYPE_CHECKING:
    _Adapter = logging.LoggerAdapter[logging.Logger]
else:
    _Adapter = logging.LoggerAdapter


class RequestErrorLog(_Adapter):
    """aiohttp's server logger, but a client's malformed request (a request line or
    header over aiohttp's limit, a bad method or version, ...) is a protocol error
    before login (:meth:`~chute.server.limits.ConnectionLimits.error_before_login`:
    one line per flood, no traceback) rather than an ERROR with a traceback each:
    anyone can send one. A failure of the broker's own handlers is still logged
    with its traceback."""

    def __init__(self, limits: ConnectionLimits) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.limits = limits

    def exception(  # type: ignore[override]  # aiohttp passes exc_info as an exception
        self,
        msg: object,
        *args: object,
        exc_info: object = True,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        if isinstance(exc_info, HttpProcessingError):
            peer = str(args[0]) if args else "?"
            reason = exc_info.message.strip() or type(exc_info).__name__
            if len(reason) > MAX_REASON:
                reason = reason[:MAX_REASON] + "..."
            self.limits.error_before_login(peer, "HTTP", reason, str(exc_info.code))
            return
        self.logger.error(
            msg,
            *args,
            exc_info=exc_info,  # type: ignore[arg-type]
            stack_info=stack_info,
            stacklevel=stacklevel,
            extra=extra,
        )


def http_refusal(code: str, reason: str) -> bytes:
    """A connection refused over a limit, in HTTP (503: the client may try later)."""
    body = f"{reason} ({code})\n".encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class HttpSite(Protocol):
    """What the HTTP listener serves (:class:`chute.admin.site.Site`)."""

    @property
    def app(self) -> web.Application:
        """The application, every route on it."""

    def listening(self, origins: OriginPolicy) -> None:
        """The listener is bound: the web pages that may open a WebSocket or a session."""

    def close(self) -> None:
        """The listener stops: end what the site holds open."""


class HttpListener:
    """One aiohttp application on ``host:port``. Not thread-safe: the server's loop only."""

    def __init__(self, server: ServerHost, site: HttpSite) -> None:
        self.server = server
        self.site = site
        self.app = site.app
        self.origins = OriginPolicy(())  # start() knows the port, so the default origins
        self._runner: web.AppRunner | None = None

    async def start(self, listen: Listen) -> tuple[str, int]:
        """Listen with ``listen`` (the broker's listener, with aiohttp's protocol behind
        its front). Returns the (host, port) bound.

        Raises:
            OSError: the port could not be bound (with the port in the message).
        """
        runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            logger=RequestErrorLog(self.server.limits),
            lingering_time=LINGER,
        )
        await runner.setup()
        site = _Site(runner, listen)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.origins = OriginPolicy(
            [
                *own_origins(self.server.config.listen.host, int(port)),
                *self.server.config.http.allowed_origins,
            ]
        )
        self.site.listening(self.origins)
        return str(host), int(port)

    async def stop(self) -> None:
        """Stop accepting and close the open WebSockets (their STOMP connections end)."""
        runner, self._runner = self._runner, None
        self.site.close()
        if runner is not None:
            await runner.cleanup()


class _Site(web.BaseSite):
    """aiohttp's TCPSite, with the broker's listener and front before aiohttp's protocol."""

    __slots__ = ("_listen", "_name")

    def __init__(self, runner: web.AppRunner, listen: Listen) -> None:
        super().__init__(runner)
        self._listen = listen
        self._name = "?"

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        listener = self._listen(server)
        self._server = listener
        self._name = listener.name
