"""Change notification: inotify wakes a waiter early; polling is the fallback."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from chute.dropbox.watch import Watcher, inotify_available


def drop_file_later(directory: Path, delay: float) -> threading.Timer:
    def drop() -> None:
        (directory / "w").write_bytes(b"x")
        os.rename(directory / "w", directory / "4.1-1.T")

    timer = threading.Timer(delay, drop)
    timer.start()
    return timer


@pytest.mark.skipif(not inotify_available(), reason="inotify is Linux-only")
def test_inotify_wakes_before_the_polling_interval(tmp_path: Path) -> None:
    with Watcher([tmp_path], poll_interval=10) as watcher:
        assert watcher.notifying
        timer = drop_file_later(tmp_path, 0.1)
        started = time.monotonic()
        assert watcher.wait(10) is True
        assert time.monotonic() - started < 5
        timer.join()


def test_polling_waits_one_interval_at_most(tmp_path: Path) -> None:
    with Watcher([tmp_path], poll_interval=0.05, use_inotify=False) as watcher:
        assert not watcher.notifying
        started = time.monotonic()
        assert watcher.wait(10) is False
        assert 0.04 < time.monotonic() - started < 2
        started = time.monotonic()
        watcher.wait(0)  # a spent timeout returns at once
        assert time.monotonic() - started < 0.04


def test_an_inotify_watcher_still_returns_every_polling_interval(tmp_path: Path) -> None:
    # inotify cannot see files renamed in by another machine on NFS: rescan anyway.
    with Watcher([tmp_path], poll_interval=0.05) as watcher:
        started = time.monotonic()
        watcher.wait(None)
        assert time.monotonic() - started < 2


def test_a_missing_directory_falls_back_to_polling(tmp_path: Path) -> None:
    with Watcher([tmp_path / "gone"], poll_interval=0.05) as watcher:
        assert not watcher.notifying
        assert watcher.wait(1) is False


def test_a_bad_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        Watcher([tmp_path], poll_interval=0)
