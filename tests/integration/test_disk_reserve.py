"""The room ``disk_free_limit`` keeps on the journal's disk is a reserve for consumers'
acks: the journal's own next segment must not eat it before producers are held off.
A real `chute serve` on a real small filesystem (tmpfs)."""

from __future__ import annotations

import re
from pathlib import Path

import chute
from chute.errors import ChuteError

from .conftest import start_server
from .test_small_disk import config, small_disk

LIMIT_MIB = 32


def test_producers_are_held_off_before_the_next_segment_eats_the_reserve(
    tmp_path: Path,
) -> None:
    """16 MiB segments, a 32 MiB limit, 100 MiB of disk: each roll-over makes a 16 MiB
    spare. Producers must be held off while the disk still has the limit free, not once a
    spare took it to 20 MiB. (A segment takes far longer to fill than the broker takes to
    hold producers off once the journal says so.)"""
    body = b"r" * (32 << 10)
    settings = f'segment_size = "16MiB"\ndisk_free_limit = "{LIMIT_MIB}MiB"\nblock_timeout_ms = 500'
    with small_disk(tmp_path, "100m") as disk:
        server = start_server(
            tmp_path,
            "--config",
            str(config(tmp_path, settings)),
            data_dir=disk.path / "data",
            prefix=disk.prefix,
        )
        try:
            refused: ChuteError | None = None
            with chute.connect(server.url) as conn, conn.session() as producer:
                for i in range(4000):  # 125 MiB: more than the disk holds
                    try:
                        producer.send("queue:reserve", f"{i:06d}".encode() + body)
                    except ChuteError as exc:
                        refused = exc
                        break
            assert refused is not None
            reason = str(refused)
            assert "disk_free_limit" in reason, reason
            found = re.search(r"has ([\d.]+) MiB free", reason)
            assert found is not None, reason
            assert float(found.group(1)) >= LIMIT_MIB, reason
            assert "once the journal's spare segments are made" in reason
        finally:
            server.stop()
