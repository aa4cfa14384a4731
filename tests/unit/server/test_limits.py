"""The connection limits, tickets, and episodes logged once (no sockets)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

from chute.config import LimitSettings
from chute.server.episode import Episode
from chute.server.limits import LOGIN_ALLOWANCE, ConnectionLimits, Ticket


class FakeTransport:
    def __init__(self) -> None:
        self.aborted = False
        self.reading = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class FakeDriver:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def close_with_error(self, code: str, reason: str) -> None:
        self.errors.append((code, reason))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


async def until(check: Callable[[], bool]) -> None:
    """Poll ``check`` until a deadline (a timer is what is tested: time must pass)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not check():
        assert loop.time() < deadline, "not within 5 s"
        await asyncio.sleep(0.005)


def test_an_episode_logs_once_then_sums_up_and_a_later_one_logs_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        episode = Episode("things refused", quiet=0.05)
        for n in range(3):
            episode.hit("refused thing %d", n)
        assert episode.active
        await until(lambda: not episode.active)
        episode.hit("refused thing %d", 3)
        episode.cancel()

    with caplog.at_level(logging.DEBUG, logger="chute.server"):
        run(main())
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert records[:3] == [
        ("WARNING", "refused thing 0"),
        ("DEBUG", "refused thing 1"),
        ("DEBUG", "refused thing 2"),
    ]
    assert records[3][0] == "INFO"
    assert records[3][1].startswith("things refused: 3 in ")
    assert records[4] == ("WARNING", "refused thing 3")


def test_the_limits_refuse_by_total_and_by_host_and_count_what_is_open() -> None:
    async def main() -> None:
        limits = ConnectionLimits(LimitSettings(max_connections=3, max_connections_per_host=2))
        a1 = limits.admit("native", "a", "a:1")
        a2 = limits.admit("stomp", "a", "a:2")
        assert isinstance(a1, Ticket)
        assert isinstance(a2, Ticket)
        code, reason = cast(tuple[str, str], limits.admit("native", "a", "a:3"))
        assert code == "connection-limit"
        assert "max_connections_per_host" in reason
        b1 = limits.admit("native", "b", "b:1")
        assert isinstance(b1, Ticket)
        code, reason = cast(tuple[str, str], limits.admit("native", "c", "c:1"))
        assert "server.max_connections)" in reason
        b1.logged_in()
        stats = limits.stats()
        assert stats["open"] == 3
        assert stats["before_login"] == 2
        assert stats["by_listener"] == {"native": 2, "stomp": 1}
        assert stats["refused_max_connections"] == 1
        assert stats["refused_max_connections_per_host"] == 1
        a1.release()
        a1.release()  # idempotent
        b1.release()
        assert isinstance(limits.admit("native", "a", "a:4"), Ticket)
        assert limits.stats()["open"] == 2
        assert limits.stats()["before_login"] == 2
        limits.close()

    run(main())


def test_the_login_deadline_asks_the_driver_to_close_or_aborts() -> None:
    async def main() -> None:
        limits = ConnectionLimits(LimitSettings(login_timeout_ms=10))
        told = cast(Ticket, limits.admit("stomp", "a", "a:1"))
        driver = FakeDriver()
        transport = FakeTransport()
        told.attach(cast(asyncio.BaseTransport, transport))
        assert limits.ticket_of(cast(asyncio.BaseTransport, transport)) is told
        told.driver = driver
        silent = cast(Ticket, limits.admit("stomp-tls", "a", "a:2"))
        handshaking = FakeTransport()
        silent.attach(cast(asyncio.BaseTransport, handshaking))
        logged = cast(Ticket, limits.admit("native", "a", "a:3"))
        logged.logged_in()
        await until(lambda: bool(driver.errors) and handshaking.aborted)
        [(code, reason)] = driver.errors
        assert code == "login-timeout"
        assert "0.01 s" in reason
        assert told.expired
        assert not logged.expired
        assert limits.stats()["login_timeouts"] == 2
        await until(lambda: transport.aborted)  # the driver did not close: aborted after GRACE
        for ticket in (told, silent, logged):
            ticket.release()
        assert limits.ticket_of(cast(asyncio.BaseTransport, transport)) is None
        limits.close()

    run(main())


def test_past_its_budget_a_connection_is_not_read_until_it_logs_in() -> None:
    async def main() -> None:
        limits = ConnectionLimits(LimitSettings(max_login_frame_size=2048))
        assert limits.login_budget == 2048 + LOGIN_ALLOWANCE
        ticket = cast(Ticket, limits.admit("http", "a", "a:1", budget=True))
        transport = FakeTransport()
        ticket.attach(cast(asyncio.BaseTransport, transport))
        ticket.received(limits.login_budget)
        assert transport.reading
        ticket.received(1)
        assert not transport.reading
        ticket.received(100)  # what was read already goes on; reading stays paused
        assert not transport.reading
        ticket.logged_in()
        assert transport.reading
        ticket.received(10 << 20)  # no budget once logged in
        assert transport.reading
        assert limits.stats()["held_before_login"] == 1
        ticket.release()
        limits.close()

    run(main())
