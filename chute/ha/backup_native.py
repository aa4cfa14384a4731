"""A backup's native port: its statistics answered, every other request refused.

While a process is its node's backup (:mod:`chute.ha.backup`) it has no broker. A
connection whose first packet is ``Connect`` is refused at once with an ``Error`` of
code ``not-live`` that names the node's live (:meth:`Backup.refusal`): a client given
several addresses moves on to the next (:class:`~chute.errors.NotLive`). A connection
that opens with ``Stat`` or ``StatFetch`` instead (what ``chute stat`` sends after
such a refusal) gets the backup's statistics (:func:`backup_stats`: its role, epoch,
live, whether it is in sync, its journal position, and no destinations), as many
times as it asks, and ``Ping`` its ``Pong``; any other packet is refused like a
``Connect``. What it tells holds no messages and no destination, so no login is asked.
A connection silent for ``IDLE_S`` seconds is closed.

The listener closes once the process is elected: the broker's own takes the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from chute.errors import NotLive, RemoteProtocolError
from chute.ha.backup import Backup
from chute.protocol import PacketCodec, Ping, Pong, Stat, StatFetch, StatPage, StatResult
from chute.protocol.packets import PROTOCOL_VERSION, Error, Packet
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData

READ = 1 << 16
IDLE_S = 60.0  # a connection that sends nothing for this long is closed


def backup_stats(backup: Backup, cluster: str) -> dict[str, Any]:
    """``chute stat``'s document on a backup: ``cluster`` (the cluster's ``name``, the
    ``node``, and :meth:`Backup.view`), no destinations, no connections."""
    return {
        "cluster": {"name": cluster, "node": backup.elector.node, **backup.view()},
        "destinations": [],
        "connections": [],
    }


async def serve_backup_native(backup: Backup, cluster: str, host: str, port: int) -> asyncio.Server:
    """Listen on ``host:port`` as the module docstring says; the caller closes it."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _serve(backup, cluster, reader, writer)
        except (OSError, RemoteProtocolError, TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, host, port, reuse_address=True)


async def _serve(
    backup: Backup, cluster: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    codec = PacketCodec()
    while True:
        async with asyncio.timeout(IDLE_S):
            data = await reader.read(READ)
        codec.receive_data(data)
        if not data:
            return
        while not isinstance(got := codec.next_packet(), NeedData):
            header, packet = got
            answer = _answer(backup, cluster, packet)
            if answer is None:
                refusal = Error(NotLive.code, backup.refusal())
                writer.write(encode_packet(refusal, header.correlation_id, 0, 0, PROTOCOL_VERSION))
                with contextlib.suppress(OSError):
                    await writer.drain()
                return
            writer.write(encode_packet(answer, header.correlation_id, 0, 0, header.version))
        await writer.drain()


def _answer(backup: Backup, cluster: str, packet: Packet) -> Packet | None:
    """What a backup answers to ``packet`` (None: a refusal)."""
    if isinstance(packet, Stat | StatFetch):
        text = json.dumps(backup_stats(backup, cluster))
        return StatResult(text) if isinstance(packet, Stat) else StatPage(text, None)
    if isinstance(packet, Ping):
        return Pong()
    return None
