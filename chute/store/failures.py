"""The writer's disk failures: back-off between retries, and what it tells the operator.

A failed write or sync is retried after 5 ms, doubling to 1 s while the disk
keeps failing. The operator hears of it once as it starts, then about once a
second at most, with how many messages and acks were refused so far
(:mod:`chute.store.unsynced`); and once more when the disk works again.

Thread-safety: belongs to the writer (whoever holds its cycle lock).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from chute.store.errors import store_error

log = logging.getLogger("chute.store.journal")

_BACKOFF_FIRST: Final = 0.005
_BACKOFF_MAX: Final = 1.0


class Failures:
    """Whether the writer is retrying after a failure, and since when, for one journal."""

    __slots__ = ("_backoff", "_refused", "directory", "retry_at")

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.retry_at: float | None = None
        """When to try again after a failure; None while the disk works."""
        self._backoff = 0.0
        self._refused = (0, 0)  # messages, acks refused since the disk last worked

    def refused(self, adds: int, acks: int) -> None:
        self._refused = (self._refused[0] + adds, self._refused[1] + acks)

    def failed(self, exc: Exception, buffered: int) -> None:
        """A cycle failed with ``exc``: back off (and say so, if it is time to)."""
        first = self._backoff == 0.0
        self._backoff = min(max(self._backoff * 2, _BACKOFF_FIRST), _BACKOFF_MAX)
        self.retry_at = time.monotonic() + self._backoff
        if first or self._backoff >= _BACKOFF_MAX:
            adds, acks = self._refused
            log.error(
                "journal %s: %s; retrying (%d records buffered; so far %d messages and %d "
                "acks not stored, their senders told so)",
                self.directory,
                store_error(exc, "write"),
                buffered,
                adds,
                acks,
                exc_info=not isinstance(exc, OSError),
            )

    def succeeded(self) -> None:
        """A cycle succeeded: if it ends a failure, say so once."""
        self.retry_at = None
        if not self._backoff:
            return
        self._backoff = 0.0
        adds, acks = self._refused
        log.warning(
            "journal %s: writing again after a disk failure; %d messages and %d acks were "
            "not stored meanwhile (their senders were told)%s",
            self.directory,
            adds,
            acks,
            "; the messages those acks were for come back after a restart" if acks else "",
        )
        self._refused = (0, 0)
