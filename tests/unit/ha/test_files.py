"""A backup's journal made from what the live sends: identical files, whatever it held
before (nothing, a prefix, or more than the live: a deposed live's unconfirmed tail)."""

from __future__ import annotations

from pathlib import Path

from chute.core.model.store import AddOp
from chute.ha.files import ReplicaFiles, catch_up, holdings, used_length
from chute.store.journal import Journal
from chute.store.segment import list_segments, read_segment
from tests.unit.store.helpers import msg


def _journal(directory: Path, count: int, start: int = 0) -> None:
    with Journal(directory, segment_size=64 << 10) as journal:
        journal.recover()
        for seq in range(start, start + count):
            journal.add(AddOp("q", ("q",), seq + 1, msg(f"m-{seq}".encode() * 50)))
        journal.flush()


def _sync(live: Path, backup: Path) -> None:
    segments = list_segments(str(live))
    newest = segments[-1]
    end = used_length(read_segment(str(live), newest), newest)
    frames = catch_up(
        5,
        holdings(str(backup)),
        segments,
        (newest, end),
        lambda n: read_segment(str(live), n),
    )
    files = ReplicaFiles(str(backup))
    for frame in frames:
        files.apply(frame)
    files.flush()
    files.close()


def _same(live: Path, backup: Path) -> None:
    assert list_segments(str(backup)) == list_segments(str(live))
    for number in list_segments(str(live)):
        mine = read_segment(str(live), number)
        theirs = read_segment(str(backup), number)
        assert theirs == mine[: used_length(mine, number)]


def _recovered(directory: Path) -> list[int]:
    with Journal(directory, segment_size=64 << 10) as journal:
        return sorted(m.seq for m in journal.recover().messages["q"])


def test_an_empty_backup_gets_every_segment(tmp_path: Path) -> None:
    _journal(tmp_path / "live", 300)
    _sync(tmp_path / "live", tmp_path / "backup")
    _same(tmp_path / "live", tmp_path / "backup")
    assert _recovered(tmp_path / "backup") == list(range(1, 301))


def test_a_backup_behind_gets_only_what_it_lacks(tmp_path: Path) -> None:
    _journal(tmp_path / "live", 100)
    _sync(tmp_path / "live", tmp_path / "backup")
    _journal(tmp_path / "live", 100, start=100)
    held = {s: n for s, n, _ in holdings(str(tmp_path / "backup"))}
    _sync(tmp_path / "live", tmp_path / "backup")
    _same(tmp_path / "live", tmp_path / "backup")
    for segment, length in held.items():  # what it had is where it was
        assert (
            read_segment(str(tmp_path / "backup"), segment)[:length]
            == read_segment(str(tmp_path / "live"), segment)[:length]
        )


def test_a_backup_holding_more_than_the_live_is_cut_back_to_it(tmp_path: Path) -> None:
    _journal(tmp_path / "live", 100)
    _sync(tmp_path / "live", tmp_path / "backup")
    _journal(tmp_path / "backup", 50, start=1000)  # written there, never by the live
    _sync(tmp_path / "live", tmp_path / "backup")
    _same(tmp_path / "live", tmp_path / "backup")
    assert _recovered(tmp_path / "backup") == list(range(1, 101))
