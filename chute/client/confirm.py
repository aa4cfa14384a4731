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

**Resending.** On a connection that moves when its node is lost, a send's packet
stays in the window with its correlation id until it is confirmed (a synchronous
send passes through a window of size 0). When the link is lost, the thread awaiting
a confirmation asks the session whether it was resumed on the node the connection
moved to (``resumed``); the session then had :meth:`ConfirmWindow.moved` send
every unconfirmed packet again, in order, on the new link (``resumed``), and the wait
goes on there. The broker drops a resend of what it had already stored (duplicate
detection), so nothing is stored twice. A commit cannot be resent: a transacted
session's window is emptied and the loss raised as its ``lost`` error.
"""

from __future__ import annotations

import collections
import threading
from typing import Protocol

from chute.client.link import Link
from chute.errors import ChuteError, ConnectError, RequestTimeout


class Resuming(Protocol):
    """The session of a window that may be resumed on another node."""

    def resumed(self, lost: Link) -> bool:
        """Wait for the connection's move after ``lost`` was lost: True if the session
        now lives on the node it moved to (its unconfirmed requests resent there)."""


class ConfirmWindow:
    """A session's requests awaiting confirmation (persistent sends or commits), oldest
    first, each with its packet if it may be resent. One thread at a time awaits
    confirmations, the others queue behind it (each then finds fewer to await)."""

    __slots__ = (
        "__weakref__",
        "_awaiting",
        "_link",
        "_sent",
        "_session",
        "_session_id",
        "lost",
        "size",
    )

    def __init__(
        self, link: Link, session_id: int, size: int, session: Resuming | None = None
    ) -> None:
        self._link = link
        self._session_id = session_id
        self.size = size
        self._session = session
        self._sent: collections.deque[tuple[int, bytes | None]] = collections.deque()
        self._awaiting = threading.Lock()
        self.lost: ChuteError | None = None
        """Raised by the next wait, once: what the move could not carry over (a
        transaction in progress)."""

    def __len__(self) -> int:
        return len(self._sent)

    def add(self, corr: int, *, flush: bool = False, packet: bytes | None = None) -> None:
        """Track request ``corr`` (``packet``: its bytes, to resend if the link is lost);
        if the window overflows, await the oldest down to its size, else (``flush``)
        send what is queued now."""
        self._sent.append((corr, packet))
        if len(self._sent) > self.size:
            self.await_down_to(self.size)
        elif flush:
            self._link.flush()

    def moved(self, link: Link, session_id: int, *, resend: bool) -> None:
        """The session now lives on ``link`` as ``session_id``: send every unconfirmed
        request again there, in order (``resend``), or forget them all.

        Raises:
            ConnectError: ``link`` was lost too; nothing changed.
        """
        sent = self._sent
        old = list(sent)  # a request added meanwhile (another thread) stays, after these
        again = []
        if resend:  # all or none: if the link is lost meanwhile, the next move resends
            again = [(link.resend(session_id, p), p) for _corr, p in old if p is not None]
        for _ in old:
            sent.popleft()
        sent.extendleft(reversed(again))
        self._link, self._session_id = link, session_id

    def await_down_to(self, most: int) -> None:
        """Wait until at most ``most`` requests are unconfirmed, oldest first.

        Raises:
            ChuteError: the first refused or unstored one (noted as an earlier send).
        """
        sent = self._sent
        with self._awaiting:
            if len(sent) > most:
                self._link.flush()  # what is queued goes out before we wait on it
            while len(sent) > most:
                corr = sent[0][0]
                link = self._link
                try:
                    link.wait(corr)
                except ConnectError:
                    if self._session is not None and self._session.resumed(link):
                        continue  # resent on the new node: wait there
                    sent.popleft()
                    raise
                except ChuteError as exc:
                    sent.popleft()
                    exc.add_note(
                        f"raised for an earlier persistent send or commit of session "
                        f"{self._session_id}, which awaited its confirmation (confirm_window)"
                    )
                    raise
                sent.popleft()

    def raise_lost(self) -> None:
        """Raise :attr:`lost`, once, if set."""
        lost, self.lost = self.lost, None
        if lost is not None:
            raise lost

    def settle_all(self) -> None:
        """Await every unconfirmed request, past failures; raise the first failure (not a
        lost connection or a timeout: what is unconfirmed then stays unknown)."""
        first: ChuteError | None = None
        while self._sent:
            try:
                self.await_down_to(0)
            except (ConnectError, RequestTimeout):
                break
            except ChuteError as exc:
                first = first or exc
        if first is not None:
            raise first


__all__ = ["ConfirmWindow", "Resuming"]
