# Written by scripts/unasync.py from chute/client/aio_confirm.py: edit that, then run the script.
"""The blocking client's confirm window: a session's persistent sends (transacted: commits)
awaiting the broker's answer while the producer goes on.

A session opened with ``confirm_window=N`` hands each such request's correlation
id to its :class:`ConfirmWindow` instead of waiting for the answer; once more
than N are unconfirmed, the next one waits for the oldest until N are left. One
thread at a time awaits confirmations, oldest first, and a failure is raised with a
note that it was for an earlier send. The session's ``flush`` awaits them all;
closing the session or its connection awaits them all past failures
(:meth:`ConfirmWindow.settle_all`). The waiting itself is the
:class:`~chute.client.link.Link`'s.
"""

from __future__ import annotations

import collections
import threading

from chute.client.link import Link
from chute.errors import ChuteError, ConnectError, RequestTimeout


class ConfirmWindow:
    """A session's requests awaiting confirmation (persistent sends or commits), oldest
    first. One thread at a time awaits confirmations, the others queue behind it (each
    then finds fewer to await)."""

    __slots__ = ("__weakref__", "_awaiting", "_corrs", "_link", "_session_id", "size")

    def __init__(self, link: Link, session_id: int, size: int) -> None:
        self._link = link
        self._session_id = session_id
        self.size = size
        self._corrs: collections.deque[int] = collections.deque()
        self._awaiting = threading.Lock()

    def __len__(self) -> int:
        return len(self._corrs)

    def add(self, corr: int, *, flush: bool = False) -> None:
        """Track request ``corr``; if the window overflows, await the oldest down to
        its size, else (``flush``) send what is queued now."""
        self._corrs.append(corr)
        if len(self._corrs) > self.size:
            self.await_down_to(self.size)
        elif flush:
            self._link.flush()

    def await_down_to(self, most: int) -> None:
        """Wait until at most ``most`` requests are unconfirmed, oldest first.

        Raises:
            ChuteError: the first refused or unstored one (noted as an earlier send).
        """
        corrs = self._corrs
        with self._awaiting:
            if len(corrs) <= most:
                return
            self._link.flush()  # what is queued goes out before we wait on it
            while len(corrs) > most:
                corr = corrs.popleft()
                try:
                    self._link.wait(corr)
                except ChuteError as exc:
                    exc.add_note(
                        f"raised for an earlier persistent send or commit of session "
                        f"{self._session_id}, which awaited its confirmation (confirm_window)"
                    )
                    raise

    def settle_all(self) -> None:
        """Await every unconfirmed request, past failures; raise the first failure (not a
        lost connection or a timeout: what is unconfirmed then stays unknown)."""
        first: ChuteError | None = None
        while self._corrs:
            try:
                self.await_down_to(0)
            except (ConnectError, RequestTimeout):
                break
            except ChuteError as exc:
                first = first or exc
        if first is not None:
            raise first


__all__ = ["ConfirmWindow"]
