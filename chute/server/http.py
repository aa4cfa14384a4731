"""The HTTP listener (``http_port``): aiohttp on the broker's event loop.

Today it serves STOMP over WebSocket on ``/stomp`` (and ``/ws``, the path
some clients default to); the admin API and the web console will add their
routes to the same :attr:`HttpListener.app`. aiohttp runs on the loop the
broker already runs on, so a handler calls the core directly, as the TCP
drivers do.
"""

from __future__ import annotations

import errno
import functools
import logging

from aiohttp import web

from chute.server.stream import ServerHost
from chute.server.websocket import stomp_endpoint

log = logging.getLogger("chute.server")

STOMP_PATHS = ("/stomp", "/ws")
SHUTDOWN_TIMEOUT = 2.0


class HttpListener:
    """One aiohttp application on ``host:port``. Not thread-safe: the server's loop only."""

    def __init__(self, server: ServerHost) -> None:
        self.server = server
        self.app = web.Application(client_max_size=1 << 20)
        handler = functools.partial(stomp_endpoint, server)
        for path in STOMP_PATHS:
            self.app.router.add_get(path, handler)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the (host, port) bound.

        Raises:
            OSError: the port could not be bound (with the port in the message).
        """
        runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=512)
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
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        """Stop accepting and close the open WebSockets (their STOMP connections end)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
