"""A broker on a real, small filesystem (tmpfs) that it fills (issue 13, "Disk").

What a user expects: a broker whose disk cannot hold one journal segment says so
and does not start; one that fills its disk tells producers clearly that their
messages were not stored (and does not deliver them), its consumers still receive
and ack everything that was acknowledged, and once they have acked, reclaiming
frees the space and producers can send again, with no operator and no restart.

The filesystem is a tmpfs mounted for the test. As root (CI) it is mounted here;
elsewhere the broker runs in a private user and mount namespace with the tmpfs
mounted inside it (``unshare``), which needs no privilege.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import chute
from chute.errors import ChuteError

from .conftest import READY_TIMEOUT, free_port, start_server

MiB = 1 << 20


@dataclass(frozen=True)
class SmallDisk:
    path: Path  # where the tmpfs is mounted (as the broker sees it)
    prefix: tuple[str, ...]  # what to run the broker under so that it sees the mount


@contextmanager
def small_disk(tmp_path: Path, size: str) -> Iterator[SmallDisk]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)]
    if os.geteuid() == 0 and subprocess.run(mount, check=False).returncode == 0:
        try:
            yield SmallDisk(mount_point, ())
        finally:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)
        return
    script = f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"'
    yield SmallDisk(
        mount_point,
        ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(mount_point)),
    )


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chute.toml"
    path.write_text(f"[server]\n{text}\n", encoding="utf-8")
    return path


def test_a_disk_that_cannot_hold_one_segment_is_an_error_at_start(tmp_path: Path) -> None:
    with small_disk(tmp_path, "4m") as disk:
        data_dir = disk.path / "data"
        cmd = [
            *disk.prefix,
            sys.executable,
            "-m",
            "chute.cli",
            "serve",
            "--config",
            str(config(tmp_path, 'segment_size = "8MiB"')),
            "--data-dir",
            str(data_dir),
            "--port",
            str(free_port()),
            "--stomp-port",
            "0",
            "--http-port",
            "0",
        ]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=READY_TIMEOUT, check=False
        )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "chute listening" not in output
    assert f"journal {data_dir / 'journal'}: the disk has" in output
    assert "which cannot hold one journal segment (server.segment_size = 8.0 MiB" in output
    assert "free space on that disk, or lower server.segment_size" in output


def test_a_broker_that_fills_its_disk_refuses_clearly_drains_and_recovers_by_itself(
    tmp_path: Path,
) -> None:
    body = b"f" * (32 << 10)
    with small_disk(tmp_path, "40m") as disk:
        server = start_server(
            tmp_path,
            "--config",
            str(
                config(
                    tmp_path,
                    'segment_size = "1MiB"\ndisk_free_limit = "8MiB"\nblock_timeout_ms = 2000',
                )
            ),
            data_dir=disk.path / "data",
            prefix=disk.prefix,
        )
        try:
            acknowledged: list[int] = []
            refused: ChuteError | None = None
            with chute.connect(server.url) as conn, conn.session() as producer:
                for i in range(4000):  # far more than 40 MiB: the disk fills first
                    try:
                        producer.send("queue:full", f"{i:06d}".encode() + body)
                    except ChuteError as exc:
                        refused = exc
                        break
                    acknowledged.append(i)
            assert refused is not None, "40 MiB took 125 MiB of messages"
            reason = str(refused)
            assert "not stored" in reason or "disk_free_limit" in reason, reason
            assert "No space left" in reason or "disk_free_limit" in reason, reason
            low = server.wait_for_line("under disk_free_limit")
            assert " WARNING " in low  # the journal said so before the disk was full

            # consumers receive and ack everything acknowledged, and nothing else
            with chute.connect(server.url) as conn, conn.session(ack="client") as s:
                consumer = s.consumer("queue:full", prefetch=50)
                received: list[int] = []
                for _ in acknowledged:
                    message = consumer.receive(timeout=30)
                    assert message is not None, f"stalled after {len(received)}"
                    received.append(int(message.body[:6]))
                    message.ack()
                assert received == acknowledged
                stats = {d["address"]: d for d in conn.stat()["destinations"]}
                assert stats["queue:full"]["depth"] == 0  # the refused one is not there

            # reclaiming frees what they acked; producers send again
            server.wait_for_line("free again", timeout=30)
            with chute.connect(server.url) as conn:
                with conn.session() as producer:
                    for i in range(20):
                        producer.send("queue:full", f"{i:06d}".encode() + body)
                with conn.session(ack="client") as s:
                    consumer = s.consumer("queue:full", prefetch=50)
                    for i in range(20):
                        message = consumer.receive(timeout=30)
                        assert message is not None
                        assert int(message.body[:6]) == i
                        message.ack()
        finally:
            server.stop()
