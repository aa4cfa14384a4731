"""Fixtures: one store suite for MemoryStore and Journal, and journals on a counting disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chute.core.model.store import Store
from chute.store.disk import FaultyDisk
from chute.store.journal import Journal
from chute.store.memory import MemoryStore


class Harness:
    """A store under test and how to "restart" it.

    For a MemoryStore a restart is recovering from the same instance (what a
    new broker over it does); for a Journal it is close and open again.
    """

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.disk = FaultyDisk()
        self.store: Store = self._open()

    def _open(self) -> Store:
        if self.kind == "memory":
            return MemoryStore()
        return Journal(self.directory, segment_size=64 * 1024, disk=self.disk)

    def reopen(self) -> Store:
        if isinstance(self.store, Journal):
            self.store.close()
            self.store = self._open()
        return self.store

    def close(self) -> None:
        self.store.close()


@pytest.fixture(params=["memory", "journal"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(request.param, tmp_path / "journal")
    yield h
    h.close()


class Journals:
    """Opens journals on ``directory`` over one FaultyDisk and closes them all at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.disk = FaultyDisk()
        self.opened: list[Journal] = []

    def open(self, **settings: Any) -> Journal:
        settings.setdefault("segment_size", 64 * 1024)
        settings.setdefault("disk", self.disk)
        journal = Journal(self.directory, **settings)
        self.opened.append(journal)
        return journal

    def reopen(self, journal: Journal, **settings: Any) -> Journal:
        journal.close()
        return self.open(**settings)


@pytest.fixture
def journals(tmp_path: Path) -> Iterator[Journals]:
    j = Journals(tmp_path / "journal")
    yield j
    for journal in j.opened:
        journal.close()
