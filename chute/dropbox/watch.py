"""Waiting for files: inotify where the kernel has it, polling everywhere.

A consumer that finds ``target/`` empty waits on a :class:`Watcher` instead
of sleeping a whole polling interval: on Linux, inotify (through the small
``inotify_simple`` library) wakes it the moment a file is renamed or written
into a watched directory. inotify only sees changes made through this
machine's kernel, so a file another machine renames in on a shared (NFS, SMB)
filesystem goes unseen: the watcher therefore never waits longer than the
polling interval (DropboxMQ's 300 ms by default) before the caller scans
again. Without inotify (not Linux, the library missing, the watch limit
reached) it is plain polling.

A watcher is for one thread at a time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

__all__ = ["DEFAULT_POLL_INTERVAL", "Watcher", "inotify_available"]

log = logging.getLogger("chute.dropbox")

DEFAULT_POLL_INTERVAL: Final = 0.3
"""DropboxMQ's polling interval, in seconds."""

try:  # pragma: no cover - depends on the platform
    import inotify_simple as _inotify
except ImportError:  # pragma: no cover
    _inotify = None


def inotify_available() -> bool:
    """True if change notification by inotify can be used here."""
    return _inotify is not None


class Watcher:
    """Wakes :meth:`wait` when a file may have arrived in one of ``paths``.

    ``use_inotify=False`` forces polling (tests use it to cover the fallback).
    """

    def __init__(
        self,
        paths: Iterable[Path],
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        *,
        use_inotify: bool = True,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.poll_interval = poll_interval
        self._notify: Any = None
        if use_inotify and _inotify is not None:
            self._notify = self._open_inotify(list(paths))

    @staticmethod
    def _open_inotify(paths: list[Path]) -> Any:
        if _inotify is None:  # pragma: no cover
            return None
        try:
            notify = _inotify.INotify()
        except OSError as exc:  # the per-user instance limit, or no inotify at all
            log.info("inotify unavailable (%s): polling instead", exc)
            return None
        mask = _inotify.flags.MOVED_TO | _inotify.flags.CLOSE_WRITE | _inotify.flags.CREATE
        try:
            for path in paths:
                notify.add_watch(os.fspath(path), mask)
        except OSError as exc:  # the watch limit, or a vanished directory
            log.info("cannot watch %s (%s): polling instead", path, exc)
            notify.close()
            return None
        return notify

    @property
    def notifying(self) -> bool:
        """True when inotify backs this watcher (else it only polls)."""
        return self._notify is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a file may have arrived, the polling interval passed, or ``timeout``.

        Returns True if inotify reported a change (False after a plain wait):
        either way the caller should scan again.
        """
        limit = self.poll_interval if timeout is None else min(timeout, self.poll_interval)
        if limit <= 0:
            return False
        if self._notify is None:
            time.sleep(limit)
            return False
        events = self._notify.read(timeout=max(1, int(limit * 1000)))
        return bool(events)

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
