"""A damaged journal directory: the broker starts in bounded time and memory and reports
exactly what was lost. Real `chute serve` processes on real files, real clients.

Stray files (something under a segment's name that is not one) are set aside, never
read as segments nor taken to mean that the segments up to their number are missing.
A segment cut short, or cut anywhere but at the end of the newest segment, is a loss:
the warning gives the sequence numbers it took, and the messages recorded before it come
back flagged redelivered (their acks may have been in what was lost)."""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import chute
from chute.store.record import Kind, Scan
from chute.store.segment import SEGMENT_HEADER_SIZE, header

from .conftest import ChuteServer, start_server

ADDRESS = "queue:kept"
MEMORY_LIMIT = 2 << 30
"""The address space a broker gets here: a stray must not make it reach for more."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def small_segments(tmp_path: Path) -> Path:
    config = tmp_path / "small.toml"
    config.write_text('[server]\nsegment_size = "64KiB"\n')
    return config


def serve(tmp_path: Path, data_dir: Path | None = None, *extra: str) -> ChuteServer:
    """A broker on small segments, in MEMORY_LIMIT of address space."""
    return start_server(
        tmp_path,
        "--config",
        str(small_segments(tmp_path)),
        *extra,
        data_dir=data_dir,
        preexec_fn=_limit_memory,
    )


def fill(server: ChuteServer, count: int) -> None:
    with chute.connect(server.url) as conn, conn.session(confirm_window=200) as s:
        for i in range(count):
            s.send(ADDRESS, f"{i:06d}".encode() + b"k" * 200)
        s.flush()


def drain(server: ChuteServer) -> list[chute.Received]:
    """Every message of ADDRESS (the count the broker says it restored)."""
    restored = int(server.wait_for_line("recovered ").split("recovered ")[1].split()[0])
    with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
        consumer = s.consumer(ADDRESS, prefetch=500)
        received: list[chute.Received] = []
        for _ in range(restored):
            message = consumer.receive(timeout=10)
            assert message is not None, f"stalled after {len(received)} of {restored}"
            received.append(message)
        assert consumer.receive(timeout=0.2) is None
    return received


def indices(received: list[chute.Received]) -> list[int]:
    return sorted(int(m.body[:6]) for m in received)


def warnings(server: ChuteServer) -> list[str]:
    """What recovery warned of (the broker's summary line aside), and any traceback."""
    return [line for line in server.lines if " WARNING chute.store" in line or "Traceback" in line]


def _random(journal: Path, name: str) -> str:
    (journal / name).write_bytes(os.urandom(1 << 20))
    return name


def _empty(journal: Path, name: str) -> str:
    (journal / name).write_bytes(b"")
    return name


def _header_far_ahead(journal: Path, name: str) -> str:
    (journal / name).write_bytes(header(int(name[:-4])) + bytes(64 << 10))  # a spare, renamed
    return name


def _copy_of_a_segment(journal: Path, name: str) -> str:
    shutil.copyfile(sorted(journal.glob("*.seg"))[1], journal / name)  # its header says 2
    return name


STRAYS: dict[str, tuple[Callable[[Path, str], str], str, str]] = {
    # shape: (how it is made, its name, what the warning says of it)
    "random bytes, a huge number": (_random, "9999999999.seg", "set aside as"),
    "random bytes, a number far ahead": (_random, "0010000000.seg", "set aside as"),
    "zero length, a huge number": (_empty, "9999999999.seg", "held nothing: removed"),
    "a header, a number far ahead": (_header_far_ahead, "0010000000.seg", "held nothing"),
    "another segment's copy": (_copy_of_a_segment, "0000500000.seg", "set aside as"),
    "not a number": (_random, "backup.seg", "set aside as"),
    "not a segment's number": (_random, "12.seg", "set aside as"),
}


@pytest.mark.parametrize("shape", list(STRAYS))
def test_a_stray_file_is_reported_and_set_aside_and_nothing_is_lost(
    tmp_path: Path, shape: str
) -> None:
    make, name, said = STRAYS[shape]
    server = serve(tmp_path)
    sent = 1500
    try:
        fill(server, sent)
        assert server.stop() == 0
        journal = server.data_dir / "journal"
        before = sorted(p.name for p in journal.glob("*.seg"))
        assert len(before) > 2
        copied = (journal / before[1]).read_bytes() if "copy" in shape else None
        make(journal, name)
        server = serve(tmp_path, server.data_dir)  # starts (within READY_TIMEOUT)
        [warning] = warnings(server)  # one line, about that file
        assert name.removesuffix(".seg").lstrip("0") in warning
        assert said in warning
        assert not [line for line in server.lines if "missing" in line or "lost" in line]
        assert sorted(p.name for p in journal.glob("*.seg"))[: len(before)] == before
        assert not (journal / name).exists()
        assert (journal / f"{name}.stray").exists() == ("set aside" in said)
        if copied is not None:  # set aside whole: never cut as a torn tail
            assert (journal / f"{name}.stray").read_bytes() == copied
        assert indices(drain(server)) == list(range(sent))
        assert server.stop() == 0
        server = serve(tmp_path, server.data_dir)
        assert warnings(server) == []  # reported once
    finally:
        server.stop()


def _records(path: Path) -> list[tuple[int, int, int]]:
    """(offset, kind, end) of each record of the segment file at ``path``."""
    data = path.read_bytes()
    return [
        (offset, kind, end)
        for offset, kind, _, end in Scan(data, int(path.stem), SEGMENT_HEADER_SIZE)
    ]


def test_a_middle_segment_cut_short_is_a_loss_with_its_sequence_numbers(tmp_path: Path) -> None:
    server = serve(tmp_path)
    sent = 3000
    try:
        fill(server, sent)
        assert server.stop() == 0
        segments = sorted((server.data_dir / "journal").glob("*.seg"))
        assert len(segments) > 4
        middle = segments[len(segments) // 2]
        records = _records(middle)
        offset, _, end = records[len(records) // 2]
        with open(middle, "r+b") as f:
            f.truncate((offset + end) // 2)  # half of it, inside a record
        server = serve(tmp_path, server.data_dir)
        [warning] = [
            line for line in warnings(server) if f"segment {middle.stem.lstrip('0')} " in line
        ]
        assert f"offset {offset}" in warning
        assert "the file ends inside a record" in warning
        assert "what it held from there on is lost" in warning
        received = drain(server)
        kept = indices(received)
        missing = sorted(set(range(sent)) - set(kept))
        assert missing == list(range(missing[0], missing[-1] + 1))  # one run
        # the broker numbers a destination's messages from 1: message i is seq i + 1
        assert (
            f"{ADDRESS} seq {missing[0] + 1}-{missing[-1] + 1} ({len(missing)} numbers: "
            f"up to {len(missing)} messages lost)"
        ) in warning
        assert "records lost from 1 segments cut short" in server.output
        # what was recorded before the cut may have been consumed in what it took
        assert all(m.redelivered for m in received if int(m.body[:6]) < missing[0])
        assert not any(m.redelivered for m in received if int(m.body[:6]) > missing[-1])
    finally:
        server.stop()


def test_a_newest_segment_cut_short_reports_it_and_brings_consumed_messages_back_redelivered(
    tmp_path: Path,
) -> None:
    """Acks in the part cut off are lost: their messages come back, flagged, also after the
    next restart; the warning says so, and what the cut took."""
    config = tmp_path / "big.toml"
    config.write_text("[server]\n")  # default segments: everything in one
    server = start_server(tmp_path, "--config", str(config))
    try:
        fill(server, 2000)
        with chute.connect(server.url) as conn, conn.session(ack="auto") as s:
            consumer = s.consumer(ADDRESS, prefetch=100)
            for i in range(1000):
                message = consumer.receive(timeout=10)
                assert message is not None
                assert int(message.body[:6]) == i
        with chute.connect(server.url) as conn, conn.session() as s:
            for i in range(2000, 2009):
                s.send(ADDRESS, f"{i:06d}".encode() + b"k" * 200)
        assert server.stop() == 0
        [segment] = sorted((server.data_dir / "journal").glob("*.seg"))
        acks = [(o, e) for o, kind, e in _records(segment) if kind in (Kind.ACK, Kind.ACKS)]
        assert acks
        cut = acks[0][0] + 7
        with open(segment, "r+b") as f:
            f.truncate(cut)
        server = start_server(tmp_path, "--config", str(config), data_dir=server.data_dir)
        [warning] = [line for line in warnings(server) if "the file ends inside a record" in line]
        assert f"segment {segment.stem.lstrip('0')} offset {acks[0][0]}" in warning
        assert "what it held from there on is lost" in warning
        assert f"{ADDRESS} after seq " in warning
        assert "its acks and delivery marks are lost too" in warning
        [flagged] = [line for line in warnings(server) if "flagged redelivered" in line]
        assert server.stop() == 0
        server = start_server(tmp_path, "--config", str(config), data_dir=server.data_dir)
        assert warnings(server) == []  # reported once
        received = drain(server)
        kept = indices(received)
        assert kept[:1000] == list(range(1000))  # the consumed ones are back ...
        assert all(m.redelivered for m in received)  # ... flagged, as is all before the cut
        assert f"{len(received)} messages recorded before what was lost" in flagged
        last = int(warning.split(f"{ADDRESS} after seq ")[1].split()[0].rstrip(");"))
        assert kept == list(range(last))  # what the cut took is what followed seq `last`
    finally:
        server.stop()
