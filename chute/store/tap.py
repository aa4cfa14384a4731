"""What a journal tells a replica of itself (:mod:`chute.ha`): bytes written, segments
deleted, and the sync callbacks it is about to call.

Set with :meth:`Journal.replicate <chute.store.journal.Journal.replicate>`. Called on
whichever thread runs the writer's cycle, under its ``cycle_lock``, in the order the
journal did those things.
"""

from __future__ import annotations

from typing import Protocol

from chute.core.model.store import SyncCallback


class Tap(Protocol):
    def wrote(self, segment: int, offset: int, data: bytes) -> None:
        """``data`` was written at ``offset`` in segment file ``segment``."""

    def deleted(self, segment: int) -> None:
        """Segment file ``segment`` was deleted."""

    def synced(self, callbacks: list[SyncCallback], segment: int, offset: int) -> None:
        """Everything up to ``offset`` in ``segment`` is durable here: ``callbacks`` are
        the tap's to call (with None) once its copies have it too."""
