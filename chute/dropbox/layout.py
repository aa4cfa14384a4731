"""Where a queue dropbox's files live under a dropbox root.

DropboxMQ 1.2 keeps a queue ``orders`` in ``root/orders/incoming/`` with six
directories (``shared/notes/dropboxmq.md``):

- ``working/``: a producer writes a new file here, then renames it into ``target/``;
- ``target/``: messages ready for delivery;
- ``processing/``: files claimed by a consumer, as ``<enc(clientId)>~<name>``;
- ``processed/``: acknowledged messages (unless processed files are deleted);
- ``expired/``: messages found expired at delivery (unless deleted);
- ``error/``: messages past the redelivery limit, and files that cannot be read.

A destination name is never a path: it is checked with
:func:`~chute.dropbox.transcoder.check_destination_name`, and every directory of
the layout must resolve to exactly the path built from the resolved root, so
neither ``..`` nor a symlink planted under the root can lead outside it.
Topic dropboxes (``topic-root/``) are not here yet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from chute.dropbox.transcoder import check_destination_name
from chute.errors import InvalidAddress

__all__ = ["INCOMING", "QUEUE_DIRS", "QueueLayout", "init_queue", "queue_layout"]

INCOMING: Final = "incoming"
QUEUE_DIRS: Final = ("working", "target", "processing", "processed", "expired", "error")


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """The directories of one queue dropbox. Immutable; share it freely.

    ``root`` is resolved (absolute, no symlinks); ``base`` is
    ``root/<destination>/incoming``.
    """

    root: Path
    destination: str
    base: Path

    @property
    def working(self) -> Path:
        return self.base / "working"

    @property
    def target(self) -> Path:
        return self.base / "target"

    @property
    def processing(self) -> Path:
        return self.base / "processing"

    @property
    def processed(self) -> Path:
        return self.base / "processed"

    @property
    def expired(self) -> Path:
        return self.base / "expired"

    @property
    def error(self) -> Path:
        return self.base / "error"

    def dirs(self) -> tuple[Path, ...]:
        """The six directories, in :data:`QUEUE_DIRS` order."""
        return tuple(self.base / name for name in QUEUE_DIRS)

    def check(self) -> None:
        """Raise unless every existing part of the layout is where it should be.

        Raises:
            InvalidAddress: a directory of the layout resolves elsewhere (a
                symlink), so using it could touch files outside the root.
        """
        for path in (self.base.parent, self.base, *self.dirs()):
            _check_resolves_to_itself(path)


def queue_layout(root: str | os.PathLike[str], destination: str) -> QueueLayout:
    """The layout of queue ``destination`` under ``root``, checked; creates nothing.

    Raises:
        InvalidAddress: the name is not a dropbox destination name, or a part of
            the layout that exists resolves outside its place under the root.
    """
    check_destination_name(destination)
    root_path = Path(root).resolve()
    base = root_path / destination / INCOMING
    if base.parent.parent != root_path:  # belt and braces: the name checks forbid this
        raise InvalidAddress(f"destination {destination!r} is not one directory")
    layout = QueueLayout(root=root_path, destination=destination, base=base)
    layout.check()
    return layout


def init_queue(root: str | os.PathLike[str], destination: str) -> QueueLayout:
    """Create (if missing) the directories of queue ``destination`` under ``root``.

    Idempotent. ``root`` itself is created if missing. The layout is checked
    before and after creating, so a symlink raced in between is caught too.

    Raises:
        InvalidAddress: as :func:`queue_layout`.
        OSError: a directory cannot be created (or a plain file is in the way).
    """
    check_destination_name(destination)  # before creating anything
    Path(root).mkdir(parents=True, exist_ok=True)
    layout = queue_layout(root, destination)
    for path in (layout.base.parent, layout.base, *layout.dirs()):
        path.mkdir(exist_ok=True)
        _check_resolves_to_itself(path)
    return layout


def _check_resolves_to_itself(path: Path) -> None:
    if os.path.lexists(path) and path.resolve() != path:
        raise InvalidAddress(f"{path} resolves to {path.resolve()}: refusing to use it")
