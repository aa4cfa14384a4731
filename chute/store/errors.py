"""Errors of the on-disk journal, all under :class:`chute.errors.StoreError`.

They keep StoreError's wire ``code``, so a client sees a ``store-error`` with
the message written here. The message says what failed and what the sender
can do: what a failed write or sync covers was not stored (the journal
refuses it, :mod:`chute.store.unsynced`), and no producer is acknowledged
for a record that is not on disk.
"""

from __future__ import annotations

import errno
import os

from chute.errors import StoreError


class DiskFull(StoreError):
    """A write or sync failed because the disk is full (ENOSPC, EDQUOT)."""


class DiskFailure(StoreError):
    """A write or sync failed for another reason (EIO, EROFS, ...)."""


class CorruptRecord(StoreError):
    """A record passed its CRC but its payload cannot be decoded (recovery skips it)."""


class JournalClosed(StoreError):
    """The journal was used after :meth:`~chute.store.journal.Journal.close`."""


_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def store_error(exc: BaseException, what: str) -> StoreError:
    """The StoreError a sync callback gets for ``exc`` raised while doing ``what``."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, OSError):
        return disk_error(exc, what)
    return DiskFailure(f"journal {what} failed: internal error: {exc!r}")


def disk_error(exc: OSError, what: str) -> StoreError:
    """The StoreError a sync callback gets for ``exc`` raised while doing ``what``."""
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    cls = DiskFull if exc.errno in _FULL else DiskFailure
    return cls(
        f"journal {what} failed: {reason}; what this covers was not stored (send it "
        "again once the broker's disk works)"
    )
