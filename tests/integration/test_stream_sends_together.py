"""A producer's pipelined sends to a stream (a confirm window) reach the broker together
and are taken together: against a real ``chute serve`` with its journal, every send is
kept once, in the order sent, at consecutive offsets, whatever else the connection sends
in between (other sessions, other streams, queues), and what the broker confirmed
outlives ``kill -9``."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

import chute
from chute.client import blocking
from chute.errors import ChuteError

from .conftest import ChuteServer, start_server
from .test_held_sends import BIG
from .test_memory_limits import serve

WAIT = 30.0
WINDOW = 128
SENT = 600
"""Sends held mid-way: 1 KiB each, held at twice their size, under 1.5 MiB in all."""


def numbered(i: int) -> bytes:
    return b"%d:" % i + b"x" * 1024


def read_stream(url: str, stream: str) -> list[tuple[int, bytes]]:
    with blocking.connect(url, timeout=WAIT) as conn:
        first, head = conn.cursor_open(stream)
        return [
            (seq, message.body)
            for page in conn.cursor_read(stream, None, first, head)
            for seq, message in page
        ]


def consecutive(stored: list[tuple[int, bytes]]) -> list[bytes]:
    seqs = [seq for seq, _ in stored]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    return [body for _, body in stored]


def test_sends_interleaved_with_other_work_keep_their_order_and_outlive_kill_9(
    server: ChuteServer, tmp_path: Path
) -> None:
    expected: dict[str, list[bytes]] = {"stream:a": [], "stream:b": [], "queue:q": []}
    with chute.connect(server.url, timeout=WAIT) as conn:
        one = conn.session(confirm_window=WINDOW)
        two = conn.session(confirm_window=WINDOW)
        for i in range(1500):
            # runs of one session to one stream, broken by the other session, another
            # stream, a queue, and a send with a time to live
            if i % 100 < 60:
                session, address, name, ttl = one, "stream:a", b"one", 0
            elif i % 100 < 75:
                session, address, name, ttl = two, "stream:a", b"two", 0
            elif i % 100 < 90:
                session, address, name, ttl = one, "stream:b", b"one", 0
            elif i % 100 < 95:
                session, address, name, ttl = one, "queue:q", b"one", 0
            else:
                session, address, name, ttl = one, "stream:a", b"one", 600_000
            body = b"%s-%d" % (name, i)
            session.send(address, body, ttl=ttl)
            expected[address].append(body)
        one.flush()
        two.flush()
    server.stop(signal.SIGKILL)
    server = start_server(tmp_path, data_dir=server.data_dir)
    try:
        for stream in ("stream:a", "stream:b"):
            assert consecutive(read_stream(server.url, stream)) == expected[stream]
        with chute.connect(server.url, timeout=WAIT) as conn, conn.session() as look:
            assert [m.body for m in look.browse("queue:q")] == expected["queue:q"]
    finally:
        server.stop()


class Producer(threading.Thread):
    """Sends numbered messages to a stream with a confirm window until its connection
    breaks; ``confirmed`` is how many the broker confirmed (those below it)."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stream = stream
        self.confirmed = 0
        self.progress = threading.Condition()

    def run(self) -> None:
        try:
            with chute.connect(self.url, timeout=WAIT) as conn:
                session = conn.session(confirm_window=WINDOW)
                sent = 0
                while True:
                    session.send(self.stream, b"%d" % sent)
                    sent += 1
                    with self.progress:  # past the window: the oldest are confirmed
                        self.confirmed = max(0, sent - session.unconfirmed)
                        self.progress.notify_all()
        except (ChuteError, OSError):
            return  # the broker was killed

    def wait_for(self, count: int) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: self.confirmed >= count, WAIT)


@pytest.mark.crash
def test_kill_9_while_sends_arrive_keeps_every_confirmed_send_once_and_in_order(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = start_server(tmp_path, data_dir=data)
    try:
        producers = [Producer(server.url, f"stream:{name}") for name in ("x", "y")]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.wait_for(3000)  # then kill while the next sends arrive
        server.stop(signal.SIGKILL)
        for producer in producers:
            producer.join(WAIT)
            assert not producer.is_alive()
    finally:
        server.stop(signal.SIGKILL)
    server = start_server(tmp_path, data_dir=data)
    try:
        for producer in producers:
            kept = consecutive(read_stream(server.url, producer.stream))
            assert kept == [b"%d" % i for i in range(len(kept))]  # once each, in order
            assert len(kept) >= producer.confirmed
    finally:
        server.stop()


def test_sends_held_for_memory_mid_run_go_on_in_order_once_there_is_room(
    tmp_path: Path,
) -> None:
    """The broker's memory passes its high watermark while a producer's pipelined sends
    to a stream arrive, then a send to a queue: the producer waits (the send that found
    no room, and every one after it), and once a consumer drained a queue, the sends go
    on in order and the queue's send after them."""
    server = serve(tmp_path, 'store = "memory"\nmemory_high_watermark = "2MiB"\n')
    try:
        with chute.connect(server.url, timeout=WAIT) as conn, conn.session() as s:
            s.send("queue:hoard", BIG)  # 1.25 MiB held: the stream's sends pass the line
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                with chute.connect(server.url, timeout=WAIT) as conn:
                    session = conn.session(confirm_window=1000)
                    for i in range(SENT):
                        session.send("stream:held", numbered(i))
                    session.send("queue:after", b"after")
                    session.flush()
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                failure.append(exc)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        server.wait_for_line("producers wait")
        with chute.connect(server.url, timeout=WAIT) as conn, conn.session(ack="auto") as s:
            assert s.consumer("queue:hoard").receive(timeout=WAIT) is not None
        producer.join(WAIT)
        assert not producer.is_alive()
        assert not failure
        assert "producers resume" in server.output
        kept = consecutive(read_stream(server.url, "stream:held"))
        assert kept == [numbered(i) for i in range(SENT)]
        with chute.connect(server.url, timeout=WAIT) as conn, conn.session() as look:
            assert [m.body for m in look.browse("queue:after")] == [b"after"]
    finally:
        server.stop()
