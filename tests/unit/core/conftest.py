"""Fixtures for the core's unit tests: a fake clock and a broker over a MemoryStore."""

from __future__ import annotations

import pytest

from chute.core.rules.broker import Broker

from .helpers import FakeClock, make_broker


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(clock: FakeClock) -> Broker:
    return make_broker(clock=clock)
