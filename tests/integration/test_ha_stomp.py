"""STOMP clients and a node's live and backup (docs/ha.md): a backup answers a STOMP
connection with an ERROR frame that names the live; once it took over, its STOMP port
is the broker's, and a stomp.py client that reconnects finds there every message the
old live had receipted. Real etcd, real ``chute serve`` processes, stomp.py."""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest
import stomp
from stomp.exception import ConnectFailedException, NotConnectedException

from tests.integration.conftest import ChuteServer, free_port
from tests.integration.test_ha import DEADLINE, Pair, kill
from tests.integration.test_ha import pair as pair  # noqa: PLC0414

DESTINATION = "/queue/orders"


class Frames(stomp.ConnectionListener):  # type: ignore[misc]
    """What a stomp.py connection received, in queues a test waits on."""

    def __init__(self) -> None:
        self.errors: queue.Queue[Any] = queue.Queue()
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])


def _spawn(pair: Pair, name: str) -> tuple[ChuteServer, int]:
    """A process of the node with a STOMP port; returns at once."""
    stomp_port = free_port()
    return pair.spawn(name, extra=["--stomp-port", str(stomp_port)]), stomp_port


def _connection(*ports: int) -> tuple[Any, Frames]:
    conn = stomp.Connection12([("127.0.0.1", port) for port in ports], auto_decode=False)
    frames = Frames()
    conn.set_listener("", frames)
    return conn, frames


def test_a_backup_answers_a_stomp_client_with_an_error_that_names_the_live(
    pair: Pair,
) -> None:
    live, _ = _spawn(pair, "one")
    live.wait_for_line("chute listening", timeout=DEADLINE)
    backup, backup_stomp = _spawn(pair, "two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    for _ in range(20):  # every connection, each time
        conn, frames = _connection(backup_stomp)
        with pytest.raises(ConnectFailedException):
            conn.connect(wait=True)
        error = frames.errors.get(timeout=DEADLINE)
        conn.disconnect()
        assert error.headers["code"] == "connect-error"
        assert "this process is a backup" in error.headers["message"]
        assert f"its live is at 127.0.0.1:{live.port}" in error.headers["message"]


def test_a_stomp_client_that_reconnects_finds_the_backup_live_with_what_was_receipted(
    pair: Pair,
) -> None:
    live, live_stomp = _spawn(pair, "one")
    live.wait_for_line("chute listening", timeout=DEADLINE)
    backup, backup_stomp = _spawn(pair, "two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    conn, frames = _connection(live_stomp, backup_stomp)
    conn.connect(wait=True)
    for n in range(10):
        conn.send(DESTINATION, f"order-{n}", headers={"persistent": "true", "receipt": f"r{n}"})
        assert frames.receipts.get(timeout=DEADLINE) == f"r{n}"
    kill(live)
    # as a STOMP client does once its connection dropped: connect again, going down its
    # list of brokers (the dead live refuses the TCP connection; the backup, until it
    # took over, answers ERROR), until one lets it in
    end = time.monotonic() + DEADLINE
    while True:
        conn, frames = _connection(live_stomp, backup_stomp)
        try:
            conn.connect(wait=True)
            break
        except (ConnectFailedException, NotConnectedException):  # ERROR; no port open
            assert time.monotonic() < end, "the backup's STOMP port never let the client in"
            conn.disconnect()
            time.sleep(0.1)
    conn.subscribe(DESTINATION, id="1", ack="auto")
    got = [frames.messages.get(timeout=DEADLINE).body for _ in range(10)]
    assert got == [f"order-{n}".encode() for n in range(10)]
    conn.disconnect()
