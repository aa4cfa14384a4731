"""What the HTTP port (``http_port``) serves: one aiohttp application, :class:`Site`.

STOMP over WebSocket on ``/stomp`` (and ``/ws``, the path some clients
default to); the native protocol on ``/chute``, over a WebSocket
(:mod:`chute.server.websocket`) or plain requests where nothing else gets
through (:mod:`chute.server.tunnel`); the admin API, ``/metrics``, ``/healthz``,
``/readyz`` and the web console. Until the broker is ready it answers only
:data:`~chute.admin.health.OPEN_WHILE_RECOVERING` and 503 to everything else
(:func:`recovering_gate`). Browsers may open the WebSocket or a native HTTP
session only from the broker's own origin or one of ``allowed_origins``
(:mod:`chute.origins`), which the listener tells the site once it knows its port.

The site is assembled here, above the server: the CLI hands this class to
:class:`~chute.server.app.BrokerServer`, whose
:class:`~chute.server.http.HttpListener` serves it on the broker's own listening
socket, so nothing in ``chute/server/`` imports ``chute/admin/``.
Not thread-safe: the server's loop only.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from chute.admin.api import add_api_routes
from chute.admin.console import add_console_routes
from chute.admin.health import OPEN_WHILE_RECOVERING, ReadyHost
from chute.admin.metrics import add_metrics_routes
from chute.origins import OriginPolicy
from chute.server.tunnel import Tunnels
from chute.server.websocket import native_endpoint, stomp_endpoint
from chute.store.progress import Phase

STOMP_PATHS = ("/stomp", "/ws")
NATIVE_PATH = "/chute"
"""The native protocol: a WebSocket (GET with an upgrade) or plain requests (POST)."""


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


class Site:
    """The HTTP port's application (an :class:`~chute.server.http.HttpSite`)."""

    def __init__(self, server: ReadyHost) -> None:
        self.server = server
        self.app = web.Application(client_max_size=1 << 20)
        self.app.middlewares.append(recovering_gate(server))
        for path in STOMP_PATHS:
            self.app.router.add_get(path, self._stomp)
        self.origins = OriginPolicy(())  # the listener knows the port, so the default origins
        self.tunnels = Tunnels(server, self.origins)
        self.app.router.add_get(NATIVE_PATH, self._native)
        self.app.router.add_post(NATIVE_PATH, self.tunnels.open)
        self.app.router.add_post(NATIVE_PATH + "/{sid}", self.tunnels.post)
        self.app.router.add_get(NATIVE_PATH + "/{sid}", self.tunnels.poll)
        self.app.router.add_delete(NATIVE_PATH + "/{sid}", self.tunnels.delete)
        add_api_routes(self.app, server)
        add_console_routes(self.app)
        add_metrics_routes(self.app, server)

    def listening(self, origins: OriginPolicy) -> None:
        """The listener is bound: the web pages that may open a WebSocket or a session."""
        self.origins = self.tunnels.origins = origins

    def close(self) -> None:
        """The listener stops: end the native HTTP sessions (the WebSockets end with it)."""
        self.tunnels.close()

    async def _stomp(self, request: web.Request) -> web.StreamResponse:
        return await stomp_endpoint(self.server, self.origins, request)

    async def _native(self, request: web.Request) -> web.StreamResponse:
        return await native_endpoint(self.server, self.origins, request)
