"""Fixtures the unit tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop, set as the current one (a ``BrokerServer`` takes the current
    loop when it is made), for driving connection drivers in process."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()
