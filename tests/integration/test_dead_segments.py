"""Segments that hold nothing live are deleted without waiting for a roll-over or a restart:
once the journal is idle after writing, when the broker stops, and when it starts, before
it judges whether its disk has room for a new segment. Real `chute serve` processes, real
files, a real small filesystem."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import chute
from chute.core.model.store import AddOp
from chute.message import Message
from chute.store.journal import Journal

from .conftest import ChuteServer, start_server

QUEUE = "queue:drained"
BODY = b"d" * (32 << 10)
SENT = 256  # 8 MiB: 32 segments of 256 KiB
DEADLINE = 20.0


def segments(journal: Path) -> list[str]:
    return sorted(p.name for p in journal.glob("*.seg"))


def fill_and_drain(tmp_path: Path) -> ChuteServer:
    config = tmp_path / "chute.toml"
    config.write_text('[server]\nsegment_size = "256KiB"\n')
    server = start_server(tmp_path, "--config", str(config))
    with chute.connect(server.url) as conn:
        with conn.session(confirm_window=64) as producer:
            for i in range(SENT):
                producer.send(QUEUE, f"{i:06d}".encode() + BODY)
            producer.flush()
        assert len(segments(server.data_dir / "journal")) >= 30
        with conn.session(ack="client") as s:
            consumer = s.consumer(QUEUE, prefetch=16)
            for _ in range(SENT):
                message = consumer.receive(timeout=10)
                assert message is not None
                message.ack()
        assert {d["address"]: d for d in conn.stat()["destinations"]}[QUEUE]["depth"] == 0
    return server


def test_a_drained_journal_frees_its_segments_while_idle(tmp_path: Path) -> None:
    server = fill_and_drain(tmp_path)
    journal = server.data_dir / "journal"
    try:
        deadline = time.monotonic() + DEADLINE
        while len(segments(journal)) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the journal writes nothing more: nothing else to wait on
        assert len(segments(journal)) <= 2, segments(journal)
    finally:
        server.stop()


def test_a_broker_stopped_after_a_drain_leaves_no_dead_segments(tmp_path: Path) -> None:
    server = fill_and_drain(tmp_path)
    assert server.stop() == 0
    assert len(segments(server.data_dir / "journal")) <= 2


@dataclass(frozen=True)
class SmallDisk:
    path: Path  # where the tmpfs is mounted (as the broker sees it)
    prefix: tuple[str, ...]  # what to run the broker under so that it sees the mount


@contextmanager
def small_disk_holding(tmp_path: Path, size: str, data: Path) -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` with a copy of ``data`` as its ``data`` directory (mounted
    here as root, else in a user and mount namespace the broker runs in)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)]
    if os.geteuid() == 0 and subprocess.run(mount, check=False).returncode == 0:
        try:
            shutil.copytree(data, mount_point / "data")
            yield SmallDisk(mount_point, ())
        finally:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)
        return
    script = (
        f'mount -t tmpfs -o size={size} tmpfs "$0" && cp -a "$1" "$0/data" && shift && exec "$@"'
    )
    yield SmallDisk(
        mount_point,
        (
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            str(mount_point),
            str(data),
        ),
    )


def test_a_start_after_a_drain_reclaims_before_it_judges_the_room(tmp_path: Path) -> None:
    """Five dead 8 MiB segments on a 44 MiB disk (a broker killed after its consumers
    drained it): the room for a new segment is what deleting them gives."""
    data = tmp_path / "data"
    count = 4 * 8 * 16  # 64 KiB messages: four segments' worth, and a fifth for the rest
    with Journal(data / "journal", segment_size=8 << 20, auto_reclaim=False) as journal:
        for seq in range(1, count + 1):
            message = Message(b"x" * (64 << 10) + b"%06d" % seq, id=f"m{seq}")
            journal.add(AddOp(QUEUE, (QUEUE,), seq, message))
        journal.flush()
        journal.acks(QUEUE, list(range(1, count + 1)))
    dead = segments(data / "journal")
    assert len(dead) == 5  # 40 MiB
    config = tmp_path / "chute.toml"
    config.write_text('[server]\nsegment_size = "8MiB"\ndisk_free_limit = "8MiB"\n')
    with small_disk_holding(tmp_path, "44m", data) as disk:
        server = start_server(
            tmp_path,
            "--config",
            str(config),
            data_dir=disk.path / "data",
            prefix=disk.prefix,
        )
        try:
            line = server.wait_for_line("that held nothing live")
            assert f"deleted {len(dead)} segments" in line
            with chute.connect(server.url) as conn, conn.session() as s:
                s.send(QUEUE, b"after")
                received = s.consumer(QUEUE).receive(timeout=10)
                assert received is not None
                assert received.body == b"after"
        finally:
            server.stop()
