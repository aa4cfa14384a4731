"""Health endpoints for whoever watches the broker (a load balancer, Kubernetes, a script).

``GET /healthz`` answers 200 ``{"status": "alive"}`` whenever the process serves
HTTP at all: it checks nothing else, so a liveness probe does not restart a
broker that is busy recovering a large journal.

``GET /readyz`` answers 200 ``{"status": "ready"}`` once the broker recovered
its messages and opened every listener; before that 503 with
``{"status": "recovering", ...}`` and how far the recovery is (its phase,
segments and bytes read of the total, records replayed, messages so far,
seconds), and 503 ``{"status": "stopping"}`` once a graceful stop began.

The HTTP listener opens before the recovery starts, and until the broker is
ready it serves only these paths and ``/metrics`` (:data:`OPEN_WHILE_RECOVERING`;
:mod:`chute.admin.site` answers every other one 503). The handlers here read
only plain fields (:class:`~chute.store.progress.RecoveryProgress`), never the
broker, which a recovery thread is building meanwhile. Neither endpoint needs
credentials, and neither says anything about the messages.

Lives on the server's event loop only.
"""

from __future__ import annotations

from typing import Final, Protocol

from aiohttp import web

from chute.server.host import ServerHost
from chute.server.watchdog import LoopWatchdog
from chute.store.progress import Phase, RecoveryProgress

OPEN_WHILE_RECOVERING: Final = frozenset({"/healthz", "/readyz", "/metrics"})
"""The HTTP paths served while the broker recovers (everything else: 503)."""


class ReadyHost(ServerHost, Protocol):
    """What the HTTP listener needs beyond a driver's host: whether the broker is
    ready, and how far its recovery is while it is not."""

    @property
    def ready(self) -> bool:
        """Recovered, every listener open, not stopping."""

    @property
    def recovery(self) -> RecoveryProgress:
        """The recovery's figures (final once it is done)."""

    @property
    def watchdog(self) -> LoopWatchdog | None:
        """The event loop's watchdog (None before the server starts)."""


def add_health_routes(app: web.Application, server: ReadyHost) -> None:
    """``/healthz`` and ``/readyz`` (see the module docstring)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_: web.Request) -> web.Response:
        return readiness(server)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def readiness(server: ReadyHost) -> web.Response:
    """``/readyz``'s answer now."""
    if server.ready:
        return web.json_response({"status": "ready"})
    progress = server.recovery
    if progress.phase is Phase.DONE:  # recovered, then stopped being ready: a stop began
        return web.json_response({"status": "stopping"}, status=503)
    return web.json_response({"status": "recovering", **progress.as_dict()}, status=503)
