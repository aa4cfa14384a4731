"""Dropbox layout: the six directories, DropboxMQ's own ones, never a path outside the root."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from chute.dropbox.layout import QUEUE_DIRS, init_queue, init_topic, queue_layout, support_dirs
from chute.errors import InvalidAddress


def test_init_creates_the_six_directories_under_incoming(tmp_path: Path) -> None:
    layout = init_queue(tmp_path / "root", "orders")
    base = (tmp_path / "root").resolve() / "orders" / "incoming"
    assert layout.base == base
    assert sorted(p.name for p in base.iterdir()) == sorted(QUEUE_DIRS)
    assert (layout.working, layout.target, layout.processing) == (
        base / "working",
        base / "target",
        base / "processing",
    )
    assert (layout.processed, layout.expired, layout.error) == (
        base / "processed",
        base / "expired",
        base / "error",
    )
    assert layout.dirs() == tuple(base / name for name in QUEUE_DIRS)
    assert not (layout.root / "orders" / "routing").exists()  # only where routes are set


def test_init_is_idempotent_and_keeps_files(tmp_path: Path) -> None:
    layout = init_queue(tmp_path, "orders")
    (layout.target / "4.1.T").write_bytes(b"x")
    assert init_queue(tmp_path, "orders") == layout
    assert (layout.target / "4.1.T").read_bytes() == b"x"


def test_queue_layout_creates_nothing(tmp_path: Path) -> None:
    layout = queue_layout(tmp_path, "orders")
    assert layout.base == tmp_path.resolve() / "orders" / "incoming"
    assert not (tmp_path / "orders").exists()


def test_a_relative_root_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    layout = init_queue("mq", "orders")
    assert layout.root == tmp_path.resolve() / "mq"
    assert layout.target.is_dir()


@pytest.mark.parametrize(
    "name",
    ["..", "../x", "a/b", "/etc", "a\\b", "", ".", ".hidden", "trailing.", "topic-root", "a\0b"],
)
def test_names_that_are_not_one_directory_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidAddress):
        init_queue(tmp_path / "root", name)
    with pytest.raises(InvalidAddress):
        queue_layout(tmp_path / "root", name)
    assert list(tmp_path.iterdir()) == []  # nothing created, not even the root


def test_a_symlinked_destination_leading_outside_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "orders").symlink_to(outside)
    with pytest.raises(InvalidAddress, match="resolves"):
        init_queue(root, "orders")
    with pytest.raises(InvalidAddress, match="resolves"):
        queue_layout(root, "orders")
    assert list(outside.iterdir()) == []


def test_a_symlinked_directory_inside_the_layout_is_refused(tmp_path: Path) -> None:
    layout = init_queue(tmp_path, "orders")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    layout.target.rmdir()
    layout.target.symlink_to(elsewhere)
    with pytest.raises(InvalidAddress):
        init_queue(tmp_path, "orders")
    with pytest.raises(InvalidAddress):
        layout.check()


def test_a_plain_file_in_the_way_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "orders").write_bytes(b"")
    with pytest.raises(OSError, match="orders"):
        init_queue(tmp_path, "orders")


def test_a_symlinked_root_is_followed_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    layout = init_queue(tmp_path / "link", "orders")
    assert layout.root == real.resolve()
    assert (real / "orders" / "incoming" / "target").is_dir()


SUPPORT = [
    "dropboxmq/clients",
    *(
        f"dropboxmq/transaction/{state}"
        for state in (
            "associated",
            "unassociated",
            "prepared",
            "committing",
            "committed",
            "rolling-back",
            "rolled-back",
        )
    ),
]
"""What DropboxMQ's create-dropbox makes in the root beside every dropbox (its admin guide,
and DirectoryStructure.createDropbox in the 1.2 source)."""


def leaf_dirs(root: Path, top: str) -> list[str]:
    return sorted(
        str(Path(path).relative_to(root)) for path, subdirs, _ in os.walk(root / top) if not subdirs
    )


@pytest.mark.parametrize("make", [init_queue, init_topic], ids=["queue", "topic"])
def test_creating_a_dropbox_makes_dropboxmqs_client_and_transaction_dirs(
    tmp_path: Path, make: Callable[[Path, str], object]
) -> None:
    make(tmp_path / "root", "orders")
    assert leaf_dirs(tmp_path / "root", "dropboxmq") == sorted(SUPPORT)
    assert [p.resolve() for p in support_dirs((tmp_path / "root").resolve())] == [
        (tmp_path / "root" / d).resolve()
        for d in ["dropboxmq", "dropboxmq/clients", "dropboxmq/transaction", *SUPPORT[1:]]
    ]


def test_dropboxmqs_dirs_and_what_is_in_them_survive_a_second_init(tmp_path: Path) -> None:
    init_queue(tmp_path, "orders")
    log = tmp_path / "dropboxmq" / "transaction" / "committing" / "tx1"
    log.write_text("kept")
    init_queue(tmp_path, "invoices")
    init_topic(tmp_path, "news.eu")
    assert log.read_text() == "kept"


def test_a_symlinked_dropboxmq_dir_leading_outside_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "dropboxmq").symlink_to(outside)
    with pytest.raises(InvalidAddress, match="resolves"):
        init_queue(root, "orders")
    assert list(outside.iterdir()) == []
