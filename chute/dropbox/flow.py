"""DropboxMQ's flow control: the lock files an operator puts in a root to stop clients.

DropboxMQ's administrative guide ("Flow Control") and its ``Locks`` class:

- ``<root>/global-read-lock`` (any content, ``touch`` will do) stops every
  consumer of every dropbox in the root; ``<dropbox>/read-lock`` (for a queue,
  ``<root>/<queue>/incoming/read-lock``) stops the consumers of that dropbox.
  A read-locked consumer behaves exactly as if no message were waiting, and
  goes on when the file is removed.
- ``<dropbox>/write-lock.properties`` holds producers back. It is a Java
  properties file with two settings: ``delay-milliseconds`` (default -1: no
  end) is how long a send waits at most; ``target-limit`` (default 0) lets a
  send through at once while fewer files than that wait in ``target/``. So an
  empty file stops every producer until it is removed, and
  ``delay-milliseconds=8000`` + ``target-limit=1000`` slows producers down to
  one send per 8 s per producer while 1000 files or more wait. A value that is
  not a number keeps its default (logged).

:class:`ReadLock` and :class:`WriteLock` look at these files for one dropbox.
Each logs a lock's appearance once (a warning naming the file) and its end
once, not on every look. DropboxMQ repeats its warning every five minutes.

A DropboxMQ producer waits as long as the write lock says, with no end for
``delay-milliseconds=-1``; so does a :class:`~chute.dropbox.queue.QueueProducer`
by default. :meth:`WriteLock.wait` takes a limit, after which it raises
:class:`~chute.errors.DestinationFull`: the client API's sends use the dropbox
URL's ``block_timeout_ms`` (30 s, as long as a broker's producers wait on a
full destination), and a ``stop`` event ends the wait of a thread that is
shutting down (the broker's bridge).

Only the files are looked at, as DropboxMQ does: a shell script writing into
``target/`` directly is not held back, and a file in ``target/`` is not
locked against a consumer that ignores the locks.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from chute.dropbox.layout import QueueLayout
from chute.dropbox.watch import DEFAULT_POLL_INTERVAL
from chute.errors import DestinationFull

__all__ = [
    "GLOBAL_READ_LOCK",
    "READ_LOCK",
    "WRITE_LOCK",
    "ReadLock",
    "WriteLimits",
    "WriteLock",
    "parse_write_limits",
]

log = logging.getLogger("chute.dropbox")

GLOBAL_READ_LOCK: Final = "global-read-lock"
"""In the root: no consumer of the root reads."""
READ_LOCK: Final = "read-lock"
"""In a dropbox (beside ``target/``): no consumer of that dropbox reads."""
WRITE_LOCK: Final = "write-lock.properties"
"""In a dropbox (beside ``target/``): producers of that dropbox wait (:class:`WriteLimits`)."""

_NO_END: Final = -1
_PROPERTY: Final = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)")
"""A properties line: the key ends at the first ``=``, ``:`` or blank; one may follow."""
_WHOLE_NUMBER: Final = re.compile(r"[+-]?[0-9]+")
"""What Java's ``Long.parseLong`` reads (Python's ``int`` would take ``1_000`` too)."""


def _destination(layout: QueueLayout) -> str:
    name = layout.destination
    return name if ":" in name else f"queue:{name}"


class ReadLock:
    """Whether DropboxMQ's read locks stop the consumers of one dropbox now.

    One thread at a time (it remembers which locks it saw, to log changes once).
    """

    def __init__(self, layout: QueueLayout) -> None:
        self.destination = _destination(layout)
        self.paths: tuple[Path, ...] = (layout.base / READ_LOCK, layout.root / GLOBAL_READ_LOCK)
        self._seen: tuple[Path, ...] = ()

    def locked(self) -> bool:
        """True while ``read-lock`` or ``global-read-lock`` exists (one ``stat`` each)."""
        seen = tuple(path for path in self.paths if os.path.exists(path))
        if seen != self._seen:
            if seen:
                log.warning(
                    "%s: read-locked by %s (DropboxMQ flow control): not reading until removed",
                    self.destination,
                    " and ".join(map(str, seen)),
                )
            else:
                log.info("%s: read lock removed: reading again", self.destination)
            self._seen = seen
        return bool(seen)


@dataclass(frozen=True, slots=True)
class WriteLimits:
    """What a ``write-lock.properties`` says (DropboxMQ's defaults: wait with no end).

    ``delay_ms``: how long a send waits at most (-1: until the lock goes);
    ``target_limit``: a send goes at once while fewer files wait in ``target/``.
    """

    delay_ms: int = _NO_END
    target_limit: int = 0


def parse_write_limits(text: str, source: object = WRITE_LOCK) -> WriteLimits:
    """Read ``delay-milliseconds`` and ``target-limit`` from properties text.

    Java properties as lock files use them: ``key=value``, ``key: value`` or
    ``key value`` lines; ``#`` and ``!`` start comments; other keys are
    ignored. A value that is not a whole number keeps its default, with a
    warning naming ``source``. Line continuations and escapes are not read (no
    value of these two keys needs them).
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        match = _PROPERTY.fullmatch(line)
        if line and line[0] not in "#!" and match:
            values[match[1]] = match[2]
    return WriteLimits(
        delay_ms=_number(values, "delay-milliseconds", _NO_END, source),
        target_limit=_number(values, "target-limit", 0, source),
    )


def _number(values: dict[str, str], key: str, default: int, source: object) -> int:
    raw = values.get(key)
    if raw is None:
        return default
    if _WHOLE_NUMBER.fullmatch(raw):
        return int(raw)
    log.warning("%s: %s=%r is not a number: %d (the default) it is", source, key, raw, default)
    return default


class WriteLock:
    """Whether DropboxMQ's ``write-lock.properties`` holds back a send into one dropbox.

    The file is read again only when it changes (its size, inode or
    modification time). One thread at a time.
    """

    def __init__(self, layout: QueueLayout, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.destination = _destination(layout)
        self.path = layout.base / WRITE_LOCK
        self.target = layout.target
        self.poll_interval = poll_interval
        self._stamp: tuple[int, int, int] | None = None
        self._limits = WriteLimits()
        self._holding = False

    def holds(self, waited: float) -> bool:
        """True if a send that has waited ``waited`` seconds must wait on.

        False when there is no lock file, fewer than its ``target-limit`` files
        wait in ``target/``, or ``waited`` reached its ``delay-milliseconds``.
        """
        limits = self._read()
        if limits is None or self._waiting(limits.target_limit) < limits.target_limit:
            self._note(held=False)
            return False
        if limits.delay_ms != _NO_END and waited * 1000 >= limits.delay_ms:
            return False  # this send's delay is over; the lock still slows the next ones
        self._note(held=True)
        return True

    def wait(self, timeout: float | None, stop: threading.Event | None = None) -> bool:
        """Wait until a send may go: True. Looks every polling interval.

        ``timeout`` (seconds, None: no limit) bounds the wait; ``stop`` ends it
        early (False: the caller is stopping and sends nothing).

        Raises:
            DestinationFull: still held back after ``timeout``; nothing was sent.
        """
        started = time.monotonic()
        while True:
            waited = time.monotonic() - started
            if not self.holds(waited):
                return True
            if timeout is not None and waited >= timeout:
                raise DestinationFull(
                    f"{self.destination}: write-locked by {self.path} (DropboxMQ flow control) "
                    f"for {timeout:g} s: the message was not written; send it again later"
                )
            pause = (
                self.poll_interval if timeout is None else min(self.poll_interval, timeout - waited)
            )
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return False

    def _read(self) -> WriteLimits | None:
        """The lock's limits, or None when there is no lock file."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._stamp = None
            return None
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stamp != self._stamp:
            try:
                text = self.path.read_text(encoding="latin-1")  # Java properties' charset
            except FileNotFoundError:
                self._stamp = None
                return None
            except OSError as exc:  # unreadable (a directory, no permission): it still locks
                log.warning("%s: cannot read it (%s): waiting with no end", self.path, exc)
                text = ""
            self._limits = parse_write_limits(text, self.path)
            self._stamp = stamp
        return self._limits

    def _waiting(self, limit: int) -> int:
        """How many entries wait in ``target/``, counted up to ``limit`` (enough to decide)."""
        if limit <= 0:
            return 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self.target) as entries:
            return sum(1 for _ in itertools.islice(entries, limit))
        return 0

    def _note(self, *, held: bool) -> None:
        """Log when the lock starts holding sends back, and when it stops, once each."""
        if held and not self._holding:
            log.warning(
                "%s: write-locked by %s (DropboxMQ flow control: delay-milliseconds=%d, "
                "target-limit=%d): sends wait",
                self.destination,
                self.path,
                self._limits.delay_ms,
                self._limits.target_limit,
            )
        elif self._holding and not held:
            log.info("%s: write lock lifted: sending again", self.destination)
        self._holding = held
