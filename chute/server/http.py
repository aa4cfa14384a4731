"""The HTTP listener (``http_port``): aiohttp on the broker's event loop.

Today it serves STOMP over WebSocket on ``/stomp`` (and ``/ws``, the path
some clients default to); the admin API and the web console will add their
routes to the same :attr:`HttpListener.app`. aiohttp runs on the loop the
broker already runs on, so a handler calls the core directly, as the TCP
drivers do.

The listening socket is the broker's, not aiohttp's (:class:`_Site`): each
connection passes through :mod:`chute.server.tls` as it is accepted, as on the
TCP listeners, so with ``http_tls`` the port serves HTTPS and WSS with the
broker's one TLS context, and a failed handshake is logged. Browsers may open
the WebSocket only from the broker's own origin or one of ``allowed_origins``
(:mod:`chute.origins`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable

from aiohttp import web

from chute.origins import OriginPolicy, own_origins
from chute.server.stream import ServerHost
from chute.server.tls import ProtocolFactory
from chute.server.websocket import stomp_endpoint

log = logging.getLogger("chute.server")

STOMP_PATHS = ("/stomp", "/ws")
SHUTDOWN_TIMEOUT = 2.0


class HttpListener:
    """One aiohttp application on ``host:port``. Not thread-safe: the server's loop only."""

    def __init__(self, server: ServerHost) -> None:
        self.server = server
        self.app = web.Application(client_max_size=1 << 20)
        for path in STOMP_PATHS:
            self.app.router.add_get(path, self._stomp)
        self.origins = OriginPolicy(())  # start() knows the port, so the default origins
        self._runner: web.AppRunner | None = None

    async def _stomp(self, request: web.Request) -> web.StreamResponse:
        return await stomp_endpoint(self.server, self.origins, request)

    async def start(
        self, host: str, port: int, accept: Callable[[ProtocolFactory], ProtocolFactory]
    ) -> tuple[str, int]:
        """Listen; ``accept`` wraps aiohttp's protocol factory (TLS, or the plain-port
        check). Returns the (host, port) bound.

        Raises:
            OSError: the port could not be bound (with the port in the message).
        """
        runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await runner.setup()
        site = _Site(runner, host, port, accept)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            hint = " (is another broker running?)" if exc.errno == errno.EADDRINUSE else ""
            raise OSError(
                exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}{hint}"
            ) from None
        self._runner = runner
        addresses = runner.addresses
        bound = addresses[0] if addresses else (host, port)
        self.origins = OriginPolicy(
            [*own_origins(host, int(bound[1])), *self.server.config.allowed_origins]
        )
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop accepting and close the open WebSockets (their STOMP connections end)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


class _Site(web.BaseSite):
    """aiohttp's TCPSite, with the broker's accepting in front of aiohttp's protocol."""

    __slots__ = ("_accept", "_host", "_port")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        accept: Callable[[ProtocolFactory], ProtocolFactory],
    ) -> None:
        super().__init__(runner, backlog=512)
        self._host = host
        self._port = port
        self._accept = accept

    @property
    def name(self) -> str:
        return f"{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        self._server = await asyncio.get_running_loop().create_server(
            self._accept(server), self._host, self._port, reuse_address=True, backlog=512
        )
