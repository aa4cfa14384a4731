"""A process's roles as one of its node's replicas: backup until elected, then live.

:func:`become_live` is what ``chute serve`` awaits before it opens its journal when
``[cluster]`` names a coordinator and messages are kept in the journal: it opens
the replication listener, then runs as a backup (:class:`~chute.ha.backup.Backup`)
until this process wins the node's election, and returns the :class:`Live` that
then taps the journal (:class:`~chute.ha.live.Replication`). A live whose lease
lapsed with a backup recorded in sync stops confirming at once and stops the process
(``step_down``): restarted, it comes back as a backup. With none recorded it stays
live under a new lease and epoch (:mod:`chute.ha.elector`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from chute.cluster.etcd import EtcdClient
from chute.cluster.url import parse_cluster_url
from chute.config import ServerConfig
from chute.ha.backup import Backup, node_id
from chute.ha.backup_http import serve_backup_site
from chute.ha.backup_native import IDLE_S, serve_backup_native
from chute.ha.elector import Elector
from chute.ha.live import Replication
from chute.refuse import refuse

log = logging.getLogger("chute.ha")


class Live:
    """This process as its node's live: the elector, the replication, the etcd client."""

    def __init__(self, client: EtcdClient, elector: Elector, replication: Replication) -> None:
        self.client = client
        self.elector = elector
        self.replication = replication
        self.deposed: str | None = None  # why this process stopped being live, if it did

    def view(self) -> dict[str, Any]:
        """``role``, ``epoch`` and ``backups``, for ``chute stat``'s ``cluster`` object."""
        return {
            "role": "live",
            "epoch": self.elector.epoch,
            "backups": [
                {"address": address, "state": state}
                for address, state in sorted(self.replication.backups.items())
            ],
        }

    async def close(self) -> None:
        """Stop replicating and give the node up (a clean stop: a backup takes over)."""
        await self.replication.close()
        await self.elector.resign()
        await self.client.close()


Refusal = Callable[[str, str], bytes]
"""A protocol's refusal before any handshake: ``(code, reason)`` to its bytes."""


async def become_live(
    config: ServerConfig,
    step_down: Callable[[str], None],
    refusals: Sequence[tuple[int, Refusal]] = (),
) -> Live:
    """Run as a backup of the node until this process is its live (module docstring).
    Meanwhile the native port answers statistics and refuses the rest, naming the live
    (:mod:`chute.ha.backup_native`), each ``(port, refusal)`` (STOMP's) refuses every
    client, naming the live, and the HTTP port answers health, metrics and the admin
    API's statistics (:mod:`chute.ha.backup_http`)."""
    settings = config.cluster
    url = parse_cluster_url(settings.coordinator)
    client = EtcdClient.from_url(url, request_timeout=max(1.0, settings.ttl / 3))
    me = node_id(config.storage.data_dir)
    elector = Elector(client, url.name, settings.node, me, settings.ttl)
    replication = Replication(
        elector,
        min_in_sync=settings.min_in_sync,
        drop_after_ms=settings.drop_after_ms,
        step_down=step_down,
    )
    host = settings.advertise.rpartition(":")[0] if settings.advertise else config.listen.host
    try:
        bound = await replication.listen(host, settings.replication_port)
        address = settings.replication_advertise or f"{host}:{bound[1]}"
        backup = Backup(elector, config.storage.data_dir, address)
        refusing = [
            await _refuse(config.listen.host, port, make, backup) for port, make in refusals
        ]
        if config.listen.port:
            refusing.append(
                await serve_backup_native(backup, url.name, config.listen.host, config.listen.port)
            )
        http = (
            await serve_backup_site(backup, url.name, config.listen.host, config.listen.http_port)
            if config.listen.http_port
            else None
        )
        try:
            await backup.run()
        finally:
            for server in refusing:
                server.close()
                await server.wait_closed()
            if http is not None:
                await http.cleanup()
    except BaseException:
        await replication.close()
        await client.close()
        raise
    elector.on_lost = step_down
    log.warning(
        "high availability: node %s is live here (epoch %d), replication on %s",
        settings.node,
        elector.epoch,
        address,
    )
    return Live(client, elector, replication)


async def _refuse(host: str, port: int, make: Refusal, backup: Backup) -> asyncio.Server:
    """A listener on a client port that refuses each connection, naming the live, once
    the client spoke (:func:`~chute.refuse.refuse`); a connection silent for
    ``IDLE_S`` seconds is answered then."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await refuse(reader, writer, make("connect-error", backup.refusal()), IDLE_S)

    return await asyncio.start_server(answer, host, port, reuse_address=True)
