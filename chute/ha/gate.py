"""When a durable operation may be confirmed: the live's sync and its in-sync backups'.

The journal's writer hands the :class:`Gate` each batch of sync callbacks with the
position its sync reached (:func:`chute.ha.wire.position`). The gate calls them at
once when no in-sync backup is behind that position, at least ``min_in_sync``
copies (the live's and the in-sync backups') hold it, and the live may still
confirm (``may_confirm``: its lease in etcd is safely alive, :mod:`chute.ha.elector`).
Otherwise it holds them until acks from the backups move past it.

A backup joins the in-sync set once its ack reached every position handed in so
far (:meth:`Gate.join`): from then on nothing is confirmed without it. It leaves
(:meth:`Gate.leave`) when the live gave up on it, only after the live recorded in
etcd that it is no longer in sync (so that it can never take over without what was
confirmed without it).

Thread-safety: every method may be called from any thread (the writer's, the loop's);
callbacks are called on the thread that released them, outside the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from chute.core.model.store import SyncCallback

log = logging.getLogger("chute.ha")


class Gate:
    """Holds sync callbacks until enough copies have what they cover (module docstring)."""

    def __init__(self, min_in_sync: int, may_confirm: Callable[[], bool]) -> None:
        if min_in_sync < 1:
            raise ValueError("min_in_sync must be 1 or more")
        self.min_in_sync = min_in_sync
        self._may_confirm = may_confirm
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, float, list[SyncCallback]]] = deque()
        self._acked: dict[str, int] = {}  # in-sync backup -> the position it acked
        self.last_submitted = 0
        self.confirmed = 0  # the position up to which everything was confirmed

    @property
    def in_sync(self) -> list[str]:
        with self._lock:
            return sorted(self._acked)

    def _allowed(self, at: int) -> bool:
        """(The lock held.) May what was synced up to ``at`` be confirmed now?"""
        if len(self._acked) + 1 < self.min_in_sync:
            return False
        if any(acked < at for acked in self._acked.values()):
            return False
        return self._may_confirm()

    def submit(self, callbacks: list[SyncCallback], at: int) -> None:
        """The live synced up to ``at``: ``callbacks`` may be called once the backups have it."""
        with self._lock:
            self.last_submitted = max(self.last_submitted, at)
            if self._pending or not self._allowed(at):
                self._pending.append((at, time.monotonic(), callbacks))
                return
            self.confirmed = max(self.confirmed, at)
        _call(callbacks)

    def acked(self, backup: str, at: int) -> None:
        """``backup`` has everything up to ``at`` on disk."""
        with self._lock:
            if backup in self._acked and at > self._acked[backup]:
                self._acked[backup] = at
            released = self._release()
        _call(released)

    def join(self, backup: str, at: int) -> bool:
        """``backup`` acked ``at``: True if that makes it in sync (it was, or is now)."""
        with self._lock:
            if backup in self._acked:
                self._acked[backup] = max(at, self._acked[backup])
                return True
            if at < self.last_submitted:
                return False
            self._acked[backup] = at
            return True

    def leave(self, backup: str) -> None:
        """``backup`` is out of the in-sync set (recorded in etcd first, by the caller)."""
        with self._lock:
            self._acked.pop(backup, None)
            released = self._release()
        _call(released)

    def recheck(self) -> None:
        """Release what may be confirmed now (after ``may_confirm`` changed)."""
        with self._lock:
            released = self._release()
        _call(released)

    def behind(self, timeout: float) -> list[str]:
        """In-sync backups that have kept a confirmation waiting over ``timeout`` seconds."""
        with self._lock:
            if not self._pending:
                return []
            at, since, _ = self._pending[0]
            if time.monotonic() - since < timeout:
                return []
            return sorted(b for b, acked in self._acked.items() if acked < at)

    def _release(self) -> list[SyncCallback]:
        released: list[SyncCallback] = []
        pending = self._pending
        while pending and self._allowed(pending[0][0]):
            at, _, callbacks = pending.popleft()
            self.confirmed = max(self.confirmed, at)
            released += callbacks
        return released


def _call(callbacks: list[SyncCallback]) -> None:
    for callback in callbacks:
        try:
            callback(None)
        except Exception:
            log.exception("a confirmation's callback failed")
