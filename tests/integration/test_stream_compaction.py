"""Compacted streams (``cleanup = "compact"``) on a real ``chute serve``: the newest message of
each key survives restarts and a ``kill -9`` in the middle of compaction, the stream's first
offset stays where retention left it across them, tombstones remove their key, readers from
the start see one message per key, and the disk is freed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chute
from chute.client import blocking
from chute.errors import ChuteError
from chute.message import Message

from .conftest import ChuteServer, free_port, start_server
from .hostile import wait_until
from .test_stomp import Client

STREAM = "stream:state"
WAIT = 60.0


def config(tmp_path: Path, *, segment: str = "64KiB", tombstones: str = "1d") -> Path:
    """Small segments (compaction works on those no longer written), a fast sweep."""
    path = tmp_path / "chute.toml"
    path.write_text(
        f'[server]\nsegment_size = "{segment}"\nexpiry_interval_ms = 50\n\n'
        f'[destinations."{STREAM}"]\ncleanup = "compact"\ncompact_tombstones = "{tombstones}"\n'
    )
    return path


def serve(tmp_path: Path, conf: Path, *extra: str) -> ChuteServer:
    return start_server(tmp_path, "--config", str(conf), *extra, data_dir=tmp_path / "data")


def send_rounds(url: str, keys: int, rounds: int, start: int = 0, pad: int = 200) -> None:
    """Round ``r`` sends ``k{K}:{r}`` to every key ``k{K}``, a round per ``send_many``."""
    with chute.connect(url, timeout=WAIT) as conn:
        session = conn.session()
        for r in range(start, start + rounds):
            session.send_many(
                STREAM,
                [
                    Message.create(f"k{k}:{r}:".encode().ljust(pad, b"."), key=f"k{k}")
                    for k in range(keys)
                ],
            )


def read_all(url: str) -> list[tuple[int, str | None, bytes]]:
    """The stream from its first offset: (offset, key, body) of each message kept."""
    with blocking.connect(url, timeout=WAIT) as conn:
        first, head = conn.cursor_open(STREAM)
        return [
            (seq, message.key, message.body)
            for page in conn.cursor_read(STREAM, None, first, head)
            for seq, message in page
        ]


def depth(url: str) -> int:
    with blocking.connect(url, timeout=WAIT) as conn:
        for dest in conn.stat(STREAM)["destinations"]:
            if dest["address"] == STREAM:
                found: int = dest["depth"]
                return found
    return -1


def newest_per_key(rows: list[tuple[int, str | None, bytes]]) -> dict[str | None, bytes]:
    out: dict[str | None, bytes] = {}
    for _, key, body in rows:
        out[key] = body
    return out


def round_of(body: bytes) -> int:
    return int(body.split(b":")[1])


def check_one_per_key(rows: list[tuple[int, str | None, bytes]], keys: int, last: int) -> None:
    assert sorted(str(key) for _, key, _ in rows) == sorted(f"k{k}" for k in range(keys))
    assert all(round_of(body) == last for _, _, body in rows)
    offsets = [seq for seq, _, _ in rows]
    assert offsets == sorted(offsets)


@pytest.fixture
def stopping() -> Iterator[list[ChuteServer]]:
    servers: list[ChuteServer] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.stop(signal.SIGKILL)


def test_the_newest_of_each_key_is_kept_across_restarts(
    tmp_path: Path, stopping: list[ChuteServer]
) -> None:
    conf = config(tmp_path)
    server = serve(tmp_path, conf)
    stopping.append(server)
    send_rounds(server.url, keys=50, rounds=40)  # 2,000 messages, ~8 segments
    wait_until(lambda: depth(server.url) < 2_000, "compaction while the broker runs", WAIT)
    rows = read_all(server.url)
    newest = newest_per_key(rows)
    assert len(newest) == 50
    assert all(round_of(b) == 39 for b in newest.values())
    assert server.stop() == 0

    server = serve(tmp_path, conf)  # what was written is sealed now: all of it is compacted
    stopping.append(server)
    wait_until(lambda: depth(server.url) == 50, "one message per key", WAIT)
    rows = read_all(server.url)
    check_one_per_key(rows, keys=50, last=39)
    send_rounds(server.url, keys=50, rounds=1, start=40)
    assert server.stop() == 0

    server = serve(tmp_path, conf)
    stopping.append(server)
    wait_until(lambda: depth(server.url) == 50, "one message per key after the next round", WAIT)
    check_one_per_key(read_all(server.url), keys=50, last=40)
    first, head = rows[0][0], read_all(server.url)[-1][0] + 1
    assert head == 2_051  # offsets kept their numbers: 2,050 were sent
    assert first > 1


class Producer(threading.Thread):
    """Sends round after round (one ``send_many`` each, stored whole) until its connection
    breaks; ``confirmed`` is the last round the broker confirmed."""

    def __init__(self, url: str, keys: int, start: int) -> None:
        super().__init__(daemon=True)
        self.url, self.keys, self.next = url, keys, start
        self.confirmed = start - 1
        self.progress = threading.Condition()

    def run(self) -> None:
        try:
            while True:
                send_rounds(self.url, self.keys, 1, start=self.next, pad=100)
                with self.progress:
                    self.confirmed = self.next
                    self.progress.notify_all()
                self.next += 1
        except (ChuteError, OSError):
            return  # the broker was killed

    def wait_for(self, round_: int) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: self.confirmed >= round_, WAIT)


def removed(url: str) -> int:
    with blocking.connect(url, timeout=WAIT) as conn:
        for dest in conn.stat(STREAM)["destinations"]:
            if dest["address"] == STREAM:
                found: int = dest["removed"]
                return found
    return 0


def figures(url: str) -> dict[str, Any]:
    """The stream's statistics."""
    with blocking.connect(url, timeout=WAIT) as conn:
        found: dict[str, Any] = next(
            d for d in conn.stat(STREAM)["destinations"] if d["address"] == STREAM
        )
        return found


def first_of(url: str) -> int:
    """The stream's first offset as a reader sees it (``cursor_open``)."""
    with blocking.connect(url, timeout=WAIT) as conn:
        return conn.cursor_open(STREAM)[0]


def first_read(url: str) -> int:
    """The offset of the first message a consumer opened at ``offset="first"`` gets."""
    with chute.connect(url, timeout=WAIT) as conn:
        got = conn.session().consumer(STREAM, offset="first").receive(timeout=WAIT)
        assert got is not None
        return got.seq


def stored(url: str) -> None:
    """Send a message elsewhere: its confirmation covers every record written before it (the
    journal syncs them together), so a ``kill -9`` after it loses none of them."""
    with chute.connect(url, timeout=WAIT) as conn:
        conn.session().send("stream:elsewhere", b"sync")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_the_first_offset_stays_where_retention_left_it_across_restarts(
    tmp_path: Path, stopping: list[ChuteServer], sig: int
) -> None:
    def restart() -> ChuteServer:
        assert server.stop(sig) == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
        again = serve(tmp_path, conf)
        stopping.append(again)
        return again

    conf = config(tmp_path)
    server = serve(tmp_path, conf)
    stopping.append(server)
    send_rounds(server.url, keys=50, rounds=40)  # offsets 1-2,000
    wait_until(lambda: read_all(server.url)[0][0] > 1, "the oldest compacted away", WAIT)
    assert first_of(server.url) == figures(server.url)["first"] == 1
    stored(server.url)

    server = restart()  # all that was written is sealed now: compacted to one per key
    wait_until(lambda: depth(server.url) == 50, "one message per key", WAIT)
    rows = read_all(server.url)
    assert rows[0][0] == 1_951  # the oldest kept: round 39's first
    # retention never moved the first offset: compaction does not either, a restart neither
    assert first_of(server.url) == figures(server.url)["first"] == 1
    assert first_read(server.url) == 1_951  # a reader from there gets the next kept
    stored(server.url)

    conf.write_text(conf.read_text() + "max_messages = 50\n")  # retention, from the next start
    server = restart()
    assert first_of(server.url) == figures(server.url)["first"] == 1  # 50 kept: none over
    with chute.connect(server.url, timeout=WAIT) as conn:  # 10 more keys: 10 over
        conn.session().send_many(
            STREAM, [Message.create(b"new", key=f"k{k}") for k in range(50, 60)]
        )
    assert first_of(server.url) == figures(server.url)["first"] == 1_961
    stored(server.url)

    server = restart()
    assert first_of(server.url) == figures(server.url)["first"] == 1_961
    assert first_read(server.url) == 1_961
    assert depth(server.url) == 50


def test_kill_9_in_the_middle_of_compaction_loses_nothing_kept(
    tmp_path: Path, stopping: list[ChuteServer]
) -> None:
    conf = config(tmp_path)
    keys, start = 500, 0
    for kill in range(3):
        server = serve(tmp_path, conf)
        stopping.append(server)
        producer = Producer(server.url, keys, start)
        producer.start()
        producer.wait_for(start + 10)
        # compaction removes what the sealed segments hold while the producer goes on
        wait_until(lambda: removed(server.url) >= 2 * keys, f"compaction under way ({kill})", WAIT)  # noqa: B023
        server.stop(signal.SIGKILL)
        producer.join(WAIT)
        assert not producer.is_alive()

        server = serve(tmp_path, conf)
        stopping.append(server)
        rows = read_all(server.url)
        newest = newest_per_key(rows)
        assert len(newest) == keys, "a key lost its every message"
        last = round_of(rows[-1][2])
        assert last >= producer.confirmed, "a confirmed round was lost"
        assert all(round_of(body) == last for body in newest.values()), (
            "an older message came back as the newest of its key"
        )
        wait_until(lambda: depth(server.url) == keys, "one message per key", WAIT)  # noqa: B023
        check_one_per_key(read_all(server.url), keys=keys, last=last)
        assert server.stop() == 0
        start = last + 1


def test_a_tombstone_removes_its_key_then_goes_itself(
    tmp_path: Path, stopping: list[ChuteServer]
) -> None:
    conf = config(tmp_path, tombstones="15s")  # time enough to see it before it goes
    server = serve(tmp_path, conf)
    stopping.append(server)
    with chute.connect(server.url, timeout=WAIT) as conn:
        session = conn.session()
        for key, body in (("a", b"a1"), ("b", b"b1"), ("a", b"a2"), (None, b"plain")):
            session.send(STREAM, body, key=key)
        session.send(STREAM, b"", key="a")  # the tombstone of a
    assert server.stop() == 0
    server = serve(tmp_path, conf)
    stopping.append(server)
    wait_until(lambda: depth(server.url) == 3, "a's messages removed", WAIT)
    assert [(seq, key, body) for seq, key, body in read_all(server.url)] == [
        (2, "b", b"b1"),
        (4, None, b"plain"),
        (5, "a", b""),
    ]
    wait_until(lambda: depth(server.url) == 2, "the tombstone removed after 15 s", WAIT)
    assert read_all(server.url) == [(2, "b", b"b1"), (4, None, b"plain")]
    assert server.stop() == 0
    server = serve(tmp_path, conf)
    stopping.append(server)
    assert read_all(server.url) == [(2, "b", b"b1"), (4, None, b"plain")]


def test_readers_from_the_start_get_one_message_per_key(
    tmp_path: Path, stopping: list[ChuteServer]
) -> None:
    conf = config(tmp_path)
    stomp_port = free_port()
    server = serve(tmp_path, conf, "--stomp-port", str(stomp_port))
    stopping.append(server)
    send_rounds(server.url, keys=20, rounds=10)
    assert server.stop() == 0
    server = serve(tmp_path, conf, "--stomp-port", str(stomp_port))
    stopping.append(server)
    wait_until(lambda: depth(server.url) == 20, "one message per key", WAIT)
    expected = read_all(server.url)
    check_one_per_key(expected, keys=20, last=9)

    with chute.connect(server.url, timeout=WAIT) as conn:  # native, from offset 0
        consumer = conn.session().consumer(STREAM, offset=0)
        got = [consumer.receive(timeout=WAIT) for _ in range(20)]
        assert [(m.seq, m.message.key, m.body) for m in got if m is not None] == expected
        assert consumer.receive(timeout=0.2) is None

    client = Client(stomp_port)  # STOMP, from offset 1 (compacted away: the next kept)
    try:
        client.conn.subscribe(
            "/stream/state", id="s", ack="auto", headers={"x-stream-offset": "offset=1"}
        )
        frames: list[Any] = [client.message() for _ in range(20)]
        assert [(int(f.headers["x-stream-offset"]), f.headers["key"], f.body) for f in frames] == [
            (seq, key, body) for seq, key, body in expected
        ]
    finally:
        client.close()


def journal_bytes(data: Path) -> int:
    return sum(f.stat().st_size for f in data.rglob("*") if f.is_file())


def test_a_compacted_stream_of_100k_messages_over_1000_keys_frees_its_disk(
    tmp_path: Path, stopping: list[ChuteServer]
) -> None:
    conf = config(tmp_path, segment="1MiB")
    server = serve(tmp_path, conf)
    stopping.append(server)
    send_rounds(server.url, keys=1_000, rounds=100, pad=200)  # 100,000 messages, 20 MB of bodies
    # compaction frees the sealed segments while the producer sends; what the segment being
    # written holds stays until it is sealed: the newest rounds
    wait_until(lambda: removed(server.url) >= 90_000, "compaction of the sealed segments", WAIT)
    wait_until(
        lambda: journal_bytes(tmp_path / "data") < 8 << 20, "the journal's segments freed", WAIT
    )
    newest = newest_per_key(read_all(server.url))
    assert len(newest) == 1_000
    assert all(round_of(b) == 99 for b in newest.values())
    assert server.stop() == 0
    server = serve(tmp_path, conf)
    stopping.append(server)
    wait_until(lambda: depth(server.url) == 1_000, "one message per key", WAIT)
    check_one_per_key(read_all(server.url), keys=1_000, last=99)
    wait_until(
        lambda: journal_bytes(tmp_path / "data") < 6 << 20, "the journal down to its keys", WAIT
    )
