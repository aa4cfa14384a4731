"""What the journal keeps across a restart, exactly: a queue's bytes, and what a lost
segment took (issue 13, "Integrity"). Real `chute serve` processes, real clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chute
from chute.errors import DestinationFull

from .conftest import ChuteServer, start_server

BOUNDED = "queue:bounded"
MAX_BYTES = 2 << 20
BODY = b"s" * 100  # small messages: the old estimate of ~1 KiB each was six times too big
PER_COMMIT = 500


def queue_stats(conn: chute.Connection, address: str) -> dict[str, Any]:
    """The queue's stats (depth and bytes 0 while nothing made it)."""
    for dest in conn.stat()["destinations"]:
        if dest["address"] == address:
            found: dict[str, Any] = dest
            return found
    return {"address": address, "depth": 0, "bytes": 0}


def fill_by_transactions(conn: chute.Connection, up_to: int) -> None:
    """Commit batches of PER_COMMIT until ``BOUNDED`` holds about ``up_to`` bytes."""
    with conn.session(transacted=True) as tx:
        while queue_stats(conn, BOUNDED)["bytes"] < up_to:
            for _ in range(PER_COMMIT):
                tx.send(BOUNDED, BODY)
            tx.commit()


def send_until_full(conn: chute.Connection) -> int:
    """Send to ``BOUNDED`` until it refuses (commits of a batch, then one at a time);
    returns how many it took."""
    taken = 0
    with conn.session(transacted=True) as tx:
        while True:
            for _ in range(100):
                tx.send(BOUNDED, BODY)
            try:
                tx.commit()
            except DestinationFull:
                break  # the whole commit is refused: less than 100 fit
            taken += 100
    with conn.session() as one:
        while True:
            try:
                one.send(BOUNDED, BODY)
            except DestinationFull:
                return taken
            taken += 1


def restart(tmp_path: Path, server: ChuteServer, *extra: str) -> ChuteServer:
    assert server.stop() == 0
    return start_server(tmp_path, *extra, data_dir=server.data_dir)


def test_a_queue_filled_by_transactions_counts_its_real_bytes_after_a_restart(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(f'[destinations."{BOUNDED}"]\nmax_bytes = {MAX_BYTES}\n')
    server = start_server(tmp_path, "--config", str(config))
    try:
        with chute.connect(server.url) as conn:
            fill_by_transactions(conn, MAX_BYTES * 6 // 10)
            before = queue_stats(conn, BOUNDED)
        server = restart(tmp_path, server, "--config", str(config))
        with chute.connect(server.url) as conn:
            after = queue_stats(conn, BOUNDED)
            assert (after["depth"], after["bytes"]) == (before["depth"], before["bytes"])
            size = before["bytes"] // before["depth"]  # every message is the same size
            taken = send_until_full(conn)
            full = queue_stats(conn, BOUNDED)
        # it took sends up to its real limit: the next one would not have fit
        assert taken == (MAX_BYTES - before["bytes"]) // size
        assert full["bytes"] <= MAX_BYTES < full["bytes"] + size
    finally:
        server.stop()


@pytest.mark.parametrize("ack", ["auto", "client"])
def test_bytes_after_a_restart_match_for_a_queue_partly_consumed(tmp_path: Path, ack: str) -> None:
    """Acks in between (and compaction after roll-overs) change nothing in the count."""
    server = start_server(tmp_path)
    try:
        with chute.connect(server.url) as conn:
            fill_by_transactions(conn, 3 << 20)
            with conn.session(ack=ack) as s:
                consumer = s.consumer(BOUNDED, prefetch=100)
                for _ in range(PER_COMMIT * 2):
                    message = consumer.receive(timeout=10)
                    assert message is not None
                    if ack == "client":
                        message.ack()
            before = queue_stats(conn, BOUNDED)
        server = restart(tmp_path, server)
        with chute.connect(server.url) as conn:
            after = queue_stats(conn, BOUNDED)
        assert (after["depth"], after["bytes"]) == (before["depth"], before["bytes"])
    finally:
        server.stop()


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_lost_middle_segment_is_a_warning_that_says_what_was_lost(
    tmp_path: Path, how: str
) -> None:
    server = start_server(tmp_path, "--config", str(small_segments(tmp_path)))
    sent = 3000
    try:
        with chute.connect(server.url) as conn, conn.session(confirm_window=200) as s:
            for i in range(sent):
                s.send("queue:kept", f"{i:06d}".encode() + b"k" * 200)
            s.flush()
        assert server.stop() == 0
        journal = server.data_dir / "journal"
        segments = sorted(journal.glob("*.seg"))
        assert len(segments) > 4
        middle = segments[len(segments) // 2]
        if how == "deleted":
            middle.unlink()
        else:
            middle.write_bytes(b"")
        server = start_server(
            tmp_path, "--config", str(small_segments(tmp_path)), data_dir=server.data_dir
        )
        number = int(middle.stem)
        state = "missing" if how == "deleted" else "empty"
        warning = server.wait_for_line(f"segment {number} is {state}")
        assert " WARNING " in warning
        summary = server.wait_for_line("1 segments lost")
        assert " WARNING " in summary  # not INFO: the operator must see it
        restored = int(server.wait_for_line("recovered ").split("recovered ")[1].split()[0])
        with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
            consumer = s.consumer("queue:kept", prefetch=500)
            received = []
            for _ in range(restored):
                message = consumer.receive(timeout=10)
                assert message is not None
                received.append(int(message.body[:6]))
            assert queue_stats(conn, "queue:kept")["enqueued"] == restored  # all it held
        missing = sorted(set(range(sent)) - set(received))
        assert missing == list(range(missing[0], missing[-1] + 1))  # one run
        assert f"up to {len(missing)} messages lost" in warning
    finally:
        server.stop()


def small_segments(tmp_path: Path) -> Path:
    config = tmp_path / "small.toml"
    config.write_text('[server]\nsegment_size = "64KiB"\n')
    return config
