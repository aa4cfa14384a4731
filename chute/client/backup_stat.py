"""The statistics of a backup (high availability): what ``chute stat`` shows when the
node it asked refused it as a backup (:class:`~chute.errors.NotLive`).

A backup refuses a ``Connect`` but answers a ``StatFetch`` sent as the first packet
of a connection (no login: it tells no message and no destination) with its role,
epoch, live, whether it is in sync and its journal position, under ``cluster``.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from chute.client.url import BrokerUrl
from chute.errors import ConnectError, error_for_code
from chute.protocol import PacketCodec, StatFetch, StatPage
from chute.protocol.packets import Error
from chute.protocol.wire import encode_packet
from chute.sansio import NeedData

READ = 1 << 16


def backup_stats(node: BrokerUrl, timeout: float) -> dict[str, Any]:
    """Ask the backup at ``node`` (plain TCP) for its statistics.

    Raises:
        ConnectError: it cannot be reached, closed the connection, or refused (the
            error its answer names).
    """
    codec = PacketCodec()
    try:
        with socket.create_connection((node.host, node.port), timeout=timeout) as sock:
            sock.sendall(encode_packet(StatFetch(), 1, 0, 0))
            while True:
                data = sock.recv(READ)
                codec.receive_data(data)
                got = codec.next_packet()
                if not isinstance(got, NeedData):
                    break
                if not data:
                    raise ConnectError(f"{node.node} closed the connection without an answer")
    except OSError as exc:
        raise ConnectError(f"cannot reach {node.node}: {exc}") from exc
    _, packet = got
    if isinstance(packet, Error):
        raise error_for_code(packet.code, packet.reason)
    if not isinstance(packet, StatPage):
        raise ConnectError(f"{node.node} answered {type(packet).__name__}, not statistics")
    stats: dict[str, Any] = json.loads(packet.json_text)
    return stats
