"""``conn.create(address)`` on every client of the suite in test_client_api.py (blocking
and asyncio over each transport, and the dropbox): made once, then found existing; what
a client cannot make is refused with a clear error."""

from __future__ import annotations

import pytest

from chute.errors import InvalidAddress

from .test_client_api import Client, broker, client, tls_broker

__all__ = ["broker", "client", "tls_broker"]  # the suite's fixtures, used here


def test_create_makes_a_queue_once(client: Client) -> None:
    address = client.address()
    with client.connect() as conn:
        assert conn.create(address) is True
        assert conn.create(address) is False
        rows = conn.stat(address)["destinations"]
        assert [row["address"] for row in rows] == [address]
        assert rows[0]["depth"] == 0
        with pytest.raises(InvalidAddress):
            conn.create("queue:bad name")
        topic = client.address("topic")
        if client.broker:
            assert conn.create(topic) is True
        else:
            with pytest.raises(InvalidAddress, match="a dropbox makes queues only"):
                conn.create(topic)
