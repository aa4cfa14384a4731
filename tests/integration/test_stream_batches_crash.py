"""``kill -9`` a real ``chute serve`` while producers send batches to a stream: after each
restart every batch is in the stream whole, at consecutive offsets, or not at all, and
every batch the broker confirmed is there."""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path

import pytest

import chute
from chute.client import blocking
from chute.errors import ChuteError

from .conftest import start_server

pytestmark = pytest.mark.crash

STREAM = "stream:batches"
WAIT = 30.0


def body(batch: int, index: int, size: int) -> bytes:
    return f"{batch}:{index}:{size}:".encode().ljust(200, b"x")


class Producer(threading.Thread):
    """Sends batches of random sizes with ``send_many`` until its connection breaks;
    ``confirmed`` holds each batch ``send_many`` returned for."""

    def __init__(self, url: str, first: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.next = first
        self.random = random.Random(seed)
        self.confirmed: list[int] = []
        self.progress = threading.Condition()

    def run(self) -> None:
        try:
            with chute.connect(self.url, timeout=WAIT) as conn:
                session = conn.session()
                while True:
                    batch, size = self.next, self.random.randint(1, 600)
                    self.next += 1
                    session.send_many(STREAM, [body(batch, i, size) for i in range(size)])
                    with self.progress:
                        self.confirmed.append(batch)
                        self.progress.notify_all()
        except (ChuteError, OSError):
            return  # the broker was killed

    def wait_for(self, count: int) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: len(self.confirmed) >= count, WAIT)


def read_stream(url: str) -> list[tuple[int, bytes]]:
    with blocking.connect(url, timeout=WAIT) as conn:
        first, head = conn.cursor_open(STREAM)
        return [
            (seq, message.body)
            for page in conn.cursor_read(STREAM, None, first, head)
            for seq, message in page
        ]


def check_whole(stored: list[tuple[int, bytes]], confirmed: set[int]) -> set[int]:
    """Every batch in ``stored`` whole and in order at consecutive offsets; returns them."""
    seen: dict[int, list[tuple[int, int, int]]] = {}
    for seq, data in stored:
        batch, index, size = (int(part) for part in data.split(b":", 3)[:3])
        seen.setdefault(batch, []).append((seq, index, size))
    for number, rows in seen.items():
        whole = rows[0][2]
        assert [i for _, i, _ in rows] == list(range(whole)), f"batch {number} cut"
        assert [s for s, _, _ in rows] == list(range(rows[0][0], rows[0][0] + whole))
    assert confirmed <= set(seen), f"confirmed batches lost: {sorted(confirmed - set(seen))}"
    return set(seen)


def test_kill_9_keeps_every_batch_whole_or_leaves_it_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    confirmed: set[int] = set()
    first = 0
    for kill in range(3):
        server = start_server(tmp_path, data_dir=data)
        try:
            producers = [Producer(server.url, first + k * 100_000, kill * 10 + k) for k in (0, 1)]
            for producer in producers:
                producer.start()
            for producer in producers:
                producer.wait_for(5 + kill * 3)  # then kill while the next batches arrive
            server.stop(signal.SIGKILL)
            for producer in producers:
                producer.join(WAIT)
                assert not producer.is_alive()
                confirmed |= set(producer.confirmed)
        finally:
            server.stop(signal.SIGKILL)
        first += 1_000_000
        server = start_server(tmp_path, data_dir=data)
        try:
            check_whole(read_stream(server.url), confirmed)
        finally:
            server.stop()
