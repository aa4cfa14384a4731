"""What the HTTP port serves is handed to the server (the admin side sits above it)."""

from __future__ import annotations

import asyncio

import pytest

from chute.config import ListenSettings, ServerConfig
from chute.server.app import BrokerServer
from chute.store.memory import MemoryStore


def test_a_server_with_an_http_port_and_no_site_says_so_before_it_opens_anything() -> None:
    async def main() -> None:
        server = BrokerServer(
            ServerConfig(ListenSettings(port=0, stomp_port=0, http_port=1)), MemoryStore()
        )
        with pytest.raises(RuntimeError, match="no site"):
            await server.start()
        assert server.listeners == []
        assert server.http is None

    asyncio.run(main())
