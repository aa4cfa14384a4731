"""``chute.connect("dropbox:///srv/mq")``: the client API with no broker, on a dropbox root.

As in JBoss Messaging's design, serverful and serverless look the same to a client. A
:class:`DropboxConnection` offers what :class:`chute.client.blocking.BlockingConnection`
offers (sessions, producers, consumers, ack modes, local transactions,
browsing) over the DropboxMQ files of :mod:`chute.dropbox.queue` and
:mod:`chute.dropbox.topic`, so any number of processes on one machine (or on
machines sharing a filesystem) exchange messages through a directory.

URL: ``dropbox:///abs/path`` or ``dropbox:relative/path``, with options in the
query (:mod:`chute.dropbox.options`). The API is :mod:`chute.client.api`'s,
method for method.

What the filesystem cannot do, and what happens instead (docs/dropbox.md):

- **Transactions** are local and *not atomic across files*: sends are held in
  memory and written at :meth:`DropboxSession.commit`, then the received
  messages are acknowledged, one rename each. A crash during a commit may
  leave part of it done; no message is ever torn or lost. Two-phase
  (``prepare``) needs a broker and raises :class:`TransactionError`.
- **Prefetch** does not apply: each receive claims one file. **Exclusive**
  consumers and **callback queues** need a broker and are refused.
- **Flow control**: DropboxMQ's lock files are obeyed
  (:mod:`chute.dropbox.flow`): a read-locked dropbox looks empty to its
  consumers; a queue send waits while ``write-lock.properties`` holds it back,
  up to the URL's ``block_timeout_ms``, then raises ``DestinationFull``.
- **Selectors** are evaluated over each file's name (headers and properties)
  before it is claimed; a file no consumer selects stays in ``target/``.
- A **non-durable topic subscription** is a subscription directory removed
  when its consumer closes; a killed process leaves it behind.
- **Temporary queues** are queue dropboxes removed when the connection
  closes (a killed process leaves them behind).
- **Confirm window**: a persistent send is on disk when ``send`` returns, so
  nothing ever awaits confirmation (``unconfirmed`` is 0, ``flush`` returns).
- **Delete and purge** work on queue dropboxes only (a topic's subscriptions are
  directories: unsubscribe them); other processes' consumers are told at their next scan.
- **Cursors** (reading by sequence number) and **batch commits** need a
  broker: they raise :class:`~chute.errors.ChuteError` and
  :class:`~chute.errors.TransactionError`.

Not thread-safe: use a connection, its sessions and consumers from one thread
at a time (open one connection per thread; they may share the root).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NoReturn, ParamSpec

from chute.client import api
from chute.client.closing import ClosedAtExit
from chute.core.model.address import Kind, parse, pattern_matcher
from chute.dropbox.layout import (
    QueueLayout,
    init_queue,
    queue_layout,
)
from chute.dropbox.maintenance import delete_queue, purge_queue
from chute.dropbox.names import (
    TOPIC_ROOT,
)
from chute.dropbox.options import DropboxOptions, parse_dropbox_url
from chute.dropbox.session import NO_TWO_PHASE, DropboxSession
from chute.errors import (
    ChuteError,
    ConnectError,
    InvalidAddress,
    TransactionError,
)

__all__ = [
    "DropboxConnection",
    "DropboxSession",
    "connect",
    "open_root",
]

P = ParamSpec("P")

_ACK_MODES: Final = ("auto", "client", "individual")
_NO_CURSORS: Final = "cursors need a broker (chute://): a dropbox has no sequence numbers"


def _needs_a_broker(
    declared: Callable[P, object], error: type[ChuteError], why: str
) -> Callable[P, NoReturn]:
    """A method with the signature of ``declared`` (the API's) that raises ``error``
    with ``why``: what a dropbox cannot do."""

    @functools.wraps(declared)
    def refused(*args: P.args, **kwargs: P.kwargs) -> NoReturn:
        raise error(why)

    refused.__doc__ = f"Raises {error.__name__} (at once): {why}."
    return refused


def connect(
    url: str,
    *,
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 10.0,
    heartbeat: float = 0.0,
) -> DropboxConnection:
    """Open a dropbox root as a connection. ``login``, ``passcode`` and
    ``heartbeat`` have no meaning without a broker (file permissions guard a
    dropbox) and are ignored. The root is created if missing.

    Raises:
        ConnectError: a bad URL, or the root cannot be used as a directory.
    """
    del login, passcode, heartbeat
    return open_root(parse_dropbox_url(url, client_id), timeout)


def open_root(options: DropboxOptions, timeout: float = 10.0) -> DropboxConnection:
    """:func:`connect` without a URL (a root path needs no escaping here).

    Raises:
        ConnectError: the root cannot be used as a directory.
    """
    try:
        options.root.mkdir(parents=True, exist_ok=True)
        if not os.access(options.root, os.R_OK | os.W_OK | os.X_OK):
            raise PermissionError(f"{options.root}: not readable and writable")
    except OSError as exc:
        raise ConnectError(f"cannot use dropbox root {options.root}: {exc}") from None
    return DropboxConnection(options, timeout)


class DropboxConnection(ClosedAtExit):
    """A dropbox root opened by one client id. See the module docstring."""

    def __init__(self, options: DropboxOptions, timeout: float = 10.0) -> None:
        self.options = options
        self.root = options.root
        self.client_id = options.client_id
        self.connection_id = options.client_id
        self.timeout = timeout
        self._sessions: list[DropboxSession] = []
        self._temporary: list[QueueLayout] = []
        self._closed = False
        self._session_ids = itertools.count(1)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def node(self) -> str:
        return str(self.root)

    def _check(self) -> None:
        if self._closed:
            raise ConnectError("the connection is closed")

    def session(
        self, ack: str = "auto", transacted: bool = False, *, confirm_window: int = 0
    ) -> DropboxSession:
        """Open a session. A ``confirm_window`` is accepted and never fills: each send is
        on disk when it returns. Raises ValueError for an unknown ack mode or a
        negative window."""
        self._check()
        if ack not in _ACK_MODES:
            raise ValueError(f"ack must be one of {', '.join(_ACK_MODES)}, not {ack!r}")
        if confirm_window < 0:
            raise ValueError("confirm_window must not be negative")
        session = DropboxSession(self, next(self._session_ids), ack, transacted, confirm_window)
        self._sessions.append(session)
        return session

    def release(self, session: DropboxSession) -> None:
        """Forget a session that closed itself."""
        with contextlib.suppress(ValueError):
            self._sessions.remove(session)

    def stat(self, pattern: str | None = None, *, page_size: int = 0) -> dict[str, Any]:
        """Each queue dropbox (that ``pattern`` names) with ``depth`` (files in
        ``target/``) and ``inflight`` (claimed, in ``processing/``); the same shape as a
        broker's ``stat``. There is no packet to bound: ``page_size`` changes nothing."""
        self._check()
        keep = pattern_matcher(pattern) if pattern else None
        destinations: list[dict[str, Any]] = []
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.name == TOPIC_ROOT or not entry.is_dir(follow_symlinks=False):
                continue
            if keep is not None and not keep(f"queue:{entry.name}"):
                continue
            try:
                layout = queue_layout(self.root, entry.name)
                depth = _count(layout.target)
                inflight = _count(layout.processing)
            except (InvalidAddress, OSError):
                continue
            destinations.append(
                {"address": f"queue:{entry.name}", "depth": depth, "inflight": inflight}
            )
        return {"destinations": destinations, "connections": 0, "root": str(self.root)}

    def delete(self, address: str, *, force: bool = False) -> int:
        """Delete a queue dropbox and every file in it (``dropbox.maintenance.delete_queue``; a
        topic's subscriptions are directories: unsubscribe them); how many messages went."""
        self._check()
        return delete_queue(self.root, address)

    def purge(self, address: str) -> int:
        """Remove the files waiting in a queue dropbox's ``target/``; how many."""
        self._check()
        return purge_queue(self.root, address)

    def create(self, address: str) -> bool:
        """Make a queue dropbox (its directories); True if made, False if it existed.

        Raises:
            InvalidAddress: a bad address, or a topic or a stream (a dropbox topic's
                subscriptions are directories its subscribers make).
        """
        self._check()
        addr = parse(address)
        if addr.kind is not Kind.QUEUE:
            raise InvalidAddress(f"{addr}: a dropbox makes queues only")
        existed = queue_layout(self.root, addr.name).base.is_dir()
        init_queue(self.root, addr.name)
        return not existed

    move = _needs_a_broker(
        api.Connection.move, ChuteError, "moving messages needs a broker (chute://), not a dropbox"
    )
    retry_dead_letters = _needs_a_broker(
        api.Connection.retry_dead_letters,
        ChuteError,
        "retrying dead letters needs a broker (chute://), not a dropbox",
    )

    def prepared(self) -> list[str]:
        """Always empty: two-phase transactions need a broker."""
        return []

    commit_prepared = _needs_a_broker(
        api.Connection.commit_prepared, TransactionError, NO_TWO_PHASE
    )
    rollback_prepared = _needs_a_broker(
        api.Connection.rollback_prepared, TransactionError, NO_TWO_PHASE
    )
    commit_batch = _needs_a_broker(api.Connection.commit_batch, TransactionError, NO_TWO_PHASE)

    # -- cursors: a broker's sequence numbers; a dropbox has none -----------------------

    cursor_open = _needs_a_broker(api.Connection.cursor_open, ChuteError, _NO_CURSORS)
    cursor_fetch = _needs_a_broker(api.Connection.cursor_fetch, ChuteError, _NO_CURSORS)
    cursor_read = _needs_a_broker(api.Connection.cursor_read, ChuteError, _NO_CURSORS)
    cursor_ack = _needs_a_broker(api.Connection.cursor_ack, ChuteError, _NO_CURSORS)
    cursor_close = _needs_a_broker(api.Connection.cursor_close, ChuteError, _NO_CURSORS)

    def temporary_queue(self) -> str:
        """Create a queue dropbox removed when this connection closes; its address."""
        self._check()
        client = re.sub(r"[^A-Za-z0-9_-]", "_", self.client_id)[:100]
        name = f"__tmp__.{client}.{uuid.uuid4().hex[:8]}"
        self._temporary.append(init_queue(self.root, name))
        return f"queue:{name}"

    def close(self) -> None:
        """Close every session (unacknowledged messages go back to ``target/``) and
        remove temporary queues. Idempotent; never raises for files already gone."""
        if self._closed:
            return
        for session in list(self._sessions):
            session.close()
        for layout in self._temporary:
            shutil.rmtree(layout.base.parent, ignore_errors=True)
        self._temporary.clear()
        self._closed = True

    def _described(self) -> str:
        return f"the dropbox connection to {self.root}"

    def __repr__(self) -> str:
        return f"<chute.DropboxConnection {self.root} as {self.client_id}>"


def _count(path: Path) -> int:
    with os.scandir(path) as entries:
        return sum(1 for _ in entries)
