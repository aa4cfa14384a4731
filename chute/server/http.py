"""The HTTP listener (``http_port``): aiohttp on the broker's event loop.

It serves STOMP over WebSocket on ``/stomp`` (and ``/ws``, the path
some clients default to), and the native protocol on ``/chute``, over a
WebSocket (:mod:`chute.server.websocket`) or plain requests where nothing else
gets through (:mod:`chute.server.tunnel`); the admin API, metrics, health and the web console
add their routes to the same :attr:`HttpListener.app` (:mod:`chute.admin`).
It opens before the broker recovers: until the broker is ready it answers
only ``/healthz``, ``/readyz`` and ``/metrics``, and 503 to everything else
(:func:`recovering_gate`). aiohttp runs on the loop the
broker already runs on, so a handler calls the core directly, as the TCP
drivers do.

The listening socket is the broker's, not aiohttp's (:class:`_Site`): each
connection is accepted by the broker's :class:`~chute.server.listener.Listener`
(the connection limits count it, and before login only a small budget of its
bytes is read: aiohttp would buffer a whole WebSocket message) and passes through
:mod:`chute.server.tls`, as on the TCP listeners, so with ``http_tls`` the port
serves HTTPS and WSS with the broker's one TLS context, and a failed handshake
is logged. Browsers may open
the WebSocket only from the broker's own origin or one of ``allowed_origins``
(:mod:`chute.origins`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from chute.admin.api import add_api_routes
from chute.admin.console import add_console_routes
from chute.admin.health import OPEN_WHILE_RECOVERING, ReadyHost
from chute.admin.metrics import add_metrics_routes
from chute.origins import OriginPolicy, own_origins
from chute.server.limits import ConnectionLimits
from chute.server.listener import Listener
from chute.server.tls import ProtocolFactory
from chute.server.tunnel import Tunnels
from chute.server.websocket import native_endpoint, stomp_endpoint
from chute.store.progress import Phase

log = logging.getLogger("chute.server")

STOMP_PATHS = ("/stomp", "/ws")
NATIVE_PATH = "/chute"
"""The native protocol: a WebSocket (GET with an upgrade) or plain requests (POST)."""
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


def recovering_gate(server: ReadyHost) -> Middleware:
    """Until ``server`` is ready, answer 503 to every path but those of
    :data:`~chute.admin.health.OPEN_WHILE_RECOVERING` (the STOMP WebSocket too)."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if server.ready or request.path in OPEN_WHILE_RECOVERING:
            return await handler(request)
        recovering = server.recovery.phase is not Phase.DONE  # else: a stop began
        reason = "recovering, try again shortly" if recovering else "the broker is stopping"
        headers = {"Retry-After": "5"} if recovering else {}
        if request.path.startswith("/api/"):
            code = "recovering" if recovering else "stopping"
            return web.json_response(
                {"error": code, "message": reason}, status=503, headers=headers
            )
        return web.Response(status=503, text=reason + "\n", headers=headers)

    return gate


class HttpListener:
    """One aiohttp application on ``host:port``. Not thread-safe: the server's loop only."""

    def __init__(self, server: ReadyHost) -> None:
        self.server = server
        self.app = web.Application(client_max_size=1 << 20)
        self.app.middlewares.append(recovering_gate(server))
        for path in STOMP_PATHS:
            self.app.router.add_get(path, self._stomp)
        self.tunnels = Tunnels(server, OriginPolicy(()))
        self.app.router.add_get(NATIVE_PATH, self._native)
        self.app.router.add_post(NATIVE_PATH, self.tunnels.open)
        self.app.router.add_post(NATIVE_PATH + "/{sid}", self.tunnels.post)
        self.app.router.add_get(NATIVE_PATH + "/{sid}", self.tunnels.poll)
        self.app.router.add_delete(NATIVE_PATH + "/{sid}", self.tunnels.delete)
        add_api_routes(self.app, server)
        add_console_routes(self.app)
        add_metrics_routes(self.app, server)
        self.origins = OriginPolicy(())  # start() knows the port, so the default origins
        self._runner: web.AppRunner | None = None

    async def _stomp(self, request: web.Request) -> web.StreamResponse:
        return await stomp_endpoint(self.server, self.origins, request)

    async def _native(self, request: web.Request) -> web.StreamResponse:
        return await native_endpoint(self.server, self.origins, request)

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
            [*own_origins(self.server.config.host, int(port)), *self.server.config.allowed_origins]
        )
        self.tunnels.origins = self.origins
        return str(host), int(port)

    async def stop(self) -> None:
        """Stop accepting and close the open WebSockets (their STOMP connections end)."""
        runner, self._runner = self._runner, None
        self.tunnels.close()
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
