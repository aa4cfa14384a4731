"""The event loop's watchdog: a log line when the broker's loop stops turning.

Every connection, timer and answer of the broker runs on one event loop. A
callback that holds it (a bug, a system call that blocks, a machine starved of
CPU) holds them all: clients time out and, without this, nothing says why.
:class:`LoopWatchdog` is a thread that expects the loop to tick every
:data:`TICK_S`; when it has not for :data:`STALL_S`, it logs one warning naming
where the loop's thread is (its innermost frames), and the loop logs one line
when it turns again, with how long it was held. Two lines an episode, however
long, so a stalled broker does not fill its log.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Final

log = logging.getLogger("chute.server")

TICK_S: Final = 0.25
"""How often the loop tells the watchdog it turns (seconds)."""
STALL_S: Final = 2.0
"""How long the loop may go without turning before the watchdog says so (seconds)."""
FRAMES: Final = 4
"""Innermost frames of the loop's thread a warning names."""


class LoopWatchdog:
    """Watches ``loop``, run by the thread ``thread_id``. :meth:`start` on the loop,
    :meth:`close` when the broker stops."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        thread_id: int,
        *,
        stall: float = STALL_S,
        tick: float = TICK_S,
    ) -> None:
        self.loop = loop
        self.thread_id = thread_id
        self.stall = stall
        self.tick = tick
        self.stalls = 0
        """Episodes so far."""
        self.longest = 0.0
        """The longest the loop went without turning, among the episodes (seconds)."""
        self._beat = time.monotonic()
        self._stalled = False  # set by the watching thread, cleared by the loop
        self._stalled_at = 0.0  # the last tick before the episode the watcher saw
        self._timer: asyncio.TimerHandle | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chute-watchdog", daemon=True)

    def start(self) -> None:
        self._beat = time.monotonic()
        self._timer = self.loop.call_later(self.tick, self._turned)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _turned(self) -> None:
        """(Loop.) The loop turns: tell the watchdog, and say an episode ended."""
        now = time.monotonic()
        if self._stalled:
            held = now - self._stalled_at
            self.longest = max(self.longest, held)
            self._stalled = False
            log.warning("the event loop runs again after %.1f s without turning", held)
        self._beat = now
        if not self._closed.is_set():
            self._timer = self.loop.call_later(self.tick, self._turned)

    def _watch(self) -> None:
        """(Its thread.) Wake every tick; warn once when the loop is late by ``stall``."""
        while not self._closed.wait(self.tick):
            if self.loop.is_closed():
                return
            beat = self._beat
            held = time.monotonic() - beat
            if held < self.stall or self._stalled or not self.loop.is_running():
                continue  # a loop that is not running (between two runs) is not held
            self._stalled_at = beat  # set first: the loop reads it once it sees _stalled
            self._stalled = True
            self.stalls += 1
            log.warning(
                "the event loop has not turned for %.1f s: every connection waits "
                "(the loop is in %s)",
                held,
                self.where(),
            )

    def where(self) -> str:
        """The innermost frames of the loop's thread, innermost first."""
        frame = sys._current_frames().get(self.thread_id)
        if frame is None:
            return "no frame (the thread ended)"
        frames = traceback.extract_stack(frame)[-FRAMES:]
        return " < ".join(
            f"{entry.name} ({entry.filename.rsplit('/', 1)[-1]}:{entry.lineno})"
            for entry in reversed(frames)
        )
