"""The event loop's watchdog: one warning when the loop stops turning, one when it turns again."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from chute.server.watchdog import LoopWatchdog


class _Warned(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def _hold_the_loop_until(event: threading.Event) -> None:
    """A callback that blocks the loop's thread, as a bug or a blocking call would."""
    assert event.wait(10), "the watchdog never said the loop was held"


def test_a_held_loop_is_logged_once_with_where_it_is_and_once_when_it_turns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warned = _Warned("has not turned")
    logger = logging.getLogger("chute.server")
    logger.addHandler(warned)
    caplog.set_level(logging.WARNING, logger="chute.server")
    loop = asyncio.new_event_loop()
    try:
        watchdog = LoopWatchdog(loop, threading.get_ident(), stall=1.0, tick=0.02)

        async def main() -> None:
            watchdog.start()
            loop.call_soon(_hold_the_loop_until, warned.event)
            await asyncio.sleep(0)  # the held callback runs, then this resumes
            turned = asyncio.Event()
            loop.call_later(watchdog.tick * 3, turned.set)  # a tick after the episode
            await turned.wait()

        loop.run_until_complete(main())
        watchdog.close()
    finally:
        loop.close()
        logger.removeHandler(warned)
    messages = [r.getMessage() for r in caplog.records if r.name == "chute.server"]
    held = [m for m in messages if "has not turned" in m]
    again = [m for m in messages if "runs again after" in m]
    assert len(held) == 1, messages
    assert "_hold_the_loop_until" in held[0]  # where the loop's thread was
    assert "test_watchdog.py" in held[0]
    assert len(again) == 1, messages
    assert watchdog.stalls == 1
    assert watchdog.longest >= 1.0


def test_a_loop_that_turns_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chute.server")
    loop = asyncio.new_event_loop()
    try:
        watchdog = LoopWatchdog(loop, threading.get_ident(), stall=2.0, tick=0.01)

        async def main() -> None:
            watchdog.start()
            for _ in range(50):  # turns for longer than the stall, never held for long
                await asyncio.sleep(0.02)

        loop.run_until_complete(main())
        watchdog.close()
    finally:
        loop.close()
    assert watchdog.stalls == 0
    assert not [r for r in caplog.records if r.name == "chute.server"]


def test_a_loop_that_is_not_running_is_not_held(caplog: pytest.LogCaptureFixture) -> None:
    """Between two runs (or once closed without close()) the loop does not turn, and
    that is not a stall: nothing is logged, and the watchdog's thread ends with the loop."""
    caplog.set_level(logging.WARNING, logger="chute.server")
    loop = asyncio.new_event_loop()
    # a stall of 0.5 s: while start() runs the loop does turn, and a loaded machine may
    # deschedule this thread for tens of ms then (a real, if short, stall)
    watchdog = LoopWatchdog(loop, threading.get_ident(), stall=0.5, tick=0.01)

    async def start() -> None:
        watchdog.start()

    loop.run_until_complete(start())
    stopped = threading.Event()

    def watch_it_end() -> None:
        watchdog._thread.join()
        stopped.set()

    threading.Thread(target=watch_it_end).start()
    assert not stopped.wait(1.0)  # the loop does not run, past stall: the watchdog waits, silent
    loop.close()
    assert stopped.wait(10)  # a closed loop: its watchdog ends
    assert watchdog.stalls == 0
    assert not [r for r in caplog.records if r.name == "chute.server"]
