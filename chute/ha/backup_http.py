"""A backup's HTTP port: health and metrics answered, everything else refused.

While a process is its node's backup (:mod:`chute.ha.backup`) it has no broker, but
whoever watches it still asks: ``GET /healthz`` answers 200 ``{"status": "alive",
"role": "backup"}``; ``GET /readyz`` answers 503 ``{"status": "backup", "live":
…, "in_sync": …}`` (it takes no client work: a load balancer sends none);
``GET /metrics`` gives ``chute_ha_role{role="backup"} 1``, ``chute_ha_epoch`` (the
newest epoch it has seen) and ``chute_ha_in_sync``. Of the admin API it answers what
only reads: ``GET /api/cluster`` (the cluster's name, the node, no ``nodes``: a
backup is linked to none, and :meth:`Backup.view`) and ``GET /api/destinations`` (none:
a backup's journal is not read until it is live). Every other path answers 503
with the refusal that names the live. The listener closes once the process is
elected: the broker's own HTTP listener takes the port.
"""

from __future__ import annotations

from aiohttp import web

from chute.ha.backup import Backup


def backup_site(backup: Backup, cluster: str) -> web.Application:
    """The routes above, over ``backup``'s state; ``cluster``: the cluster's name."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive", "role": "backup"})

    async def readyz(_: web.Request) -> web.Response:
        body = {"status": "backup", "live": backup.live_address, "in_sync": backup.in_sync}
        return web.json_response(body, status=503)

    async def metrics(_: web.Request) -> web.Response:
        text = (
            "# HELP chute_ha_role This process's role in its node (1 for its role).\n"
            "# TYPE chute_ha_role gauge\n"
            'chute_ha_role{role="backup"} 1\n'
            "# HELP chute_ha_epoch The node's newest epoch this process has seen.\n"
            "# TYPE chute_ha_epoch gauge\n"
            f"chute_ha_epoch {backup.epoch_seen}\n"
            "# HELP chute_ha_in_sync 1 if this backup is in sync with the live.\n"
            "# TYPE chute_ha_in_sync gauge\n"
            f"chute_ha_in_sync {int(backup.in_sync)}\n"
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def cluster_document(_: web.Request) -> web.Response:
        node = backup.elector.node
        return web.json_response({"name": cluster, "node": node, "nodes": [], **backup.view()})

    async def destinations(_: web.Request) -> web.Response:
        return web.json_response({"destinations": [], "next": None})

    async def refused(_: web.Request) -> web.Response:
        return web.json_response({"error": backup.refusal()}, status=503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/cluster", cluster_document)
    app.router.add_get("/api/destinations", destinations)
    app.router.add_route("*", "/{tail:.*}", refused)
    return app


async def serve_backup_site(backup: Backup, cluster: str, host: str, port: int) -> web.AppRunner:
    """Listen on ``host:port``; the caller cleans the runner up once elected."""
    runner = web.AppRunner(backup_site(backup, cluster), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner
