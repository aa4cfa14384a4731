"""A condition a flood repeats, logged once when it begins and summed up when it ends.

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

log = logging.getLogger("chute.server")

QUIET: Final = 5.0
"""Seconds a condition must not recur before its episode is summed up and closed."""


class Episode:
    """A condition logged once when it begins and summed up when it has ended.

    :meth:`hit` logs its message at ``level`` if the episode is new, else at
    DEBUG; once ``quiet`` seconds pass without a hit, one INFO line says how
    many there were and over how long, and the next hit begins a new episode.
    """

    def __init__(self, what: str, *, level: int = logging.WARNING, quiet: float = QUIET) -> None:
        self.what = what
        self.level = level
        self.quiet = quiet
        self.count = 0  # in this episode
        self.began = 0.0
        self.last = 0.0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def active(self) -> bool:
        return self._timer is not None

    def hit(self, message: str, *args: object) -> None:
        now = time.monotonic()
        self.count += 1
        self.last = now
        if self._timer is not None:
            log.debug(message, *args)
            return
        self.began = now
        log.log(self.level, message, *args)
        self._timer = asyncio.get_running_loop().call_later(self.quiet, self._check)

    def _check(self) -> None:
        now = time.monotonic()
        wait = self.last + self.quiet - now
        if wait > 0:
            self._timer = asyncio.get_running_loop().call_later(wait, self._check)
            return
        log.info(
            "%s: %d in %.1f s, none for the last %g s",
            self.what,
            self.count,
            self.last - self.began,
            self.quiet,
        )
        self._timer = None
        self.count = 0

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
