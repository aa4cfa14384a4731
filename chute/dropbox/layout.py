"""Where queue and topic dropboxes live under a dropbox root.

DropboxMQ 1.2 keeps a queue ``orders`` in ``root/orders/incoming/`` with six
directories (``shared/notes/dropboxmq.md``):

- ``working/``: a producer writes a new file here, then renames it into ``target/``;
- ``target/``: messages ready for delivery;
- ``processing/``: files claimed by a consumer, as ``<enc(clientId)>~<name>``;
- ``processed/``: acknowledged messages (unless processed files are deleted);
- ``expired/``: messages found expired at delivery (unless deleted);
- ``error/``: messages past the redelivery limit, and files that cannot be read.

A topic ``a.b`` lives in ``root/topic-root/a/b/``: its ``.incoming/`` and each
subscription's ``.subscriptions/<enc(subscription)>.<enc(clientId)>/`` are
dropboxes with the same six directories. A dropbox appears whole: its
directory is built aside with the six inside and renamed into place, so a
publisher copying into every subscription never meets one half made.

Creating a queue or a topic also creates what DropboxMQ's ``create-dropbox``
creates beside the dropboxes, in the root: ``dropboxmq/clients/`` and
``dropboxmq/transaction/{associated,unassociated,prepared,committing,committed,
rolling-back,rolled-back}/``. chute uses none of them, but DropboxMQ's
client-acknowledge and transacted sessions fail on a root without them.

What a destination, subscription directory or claimed file may be called is
:mod:`~chute.dropbox.names`'s rule; this module turns the names into paths. A
destination name is never a path: it is checked with
:func:`~chute.dropbox.names.check_destination_name`, and every directory of
the layout must resolve to exactly the path built from the resolved root, so
neither ``..`` nor a symlink planted under the root can lead outside it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from chute.dropbox.names import (
    check_destination_name,
    check_subscription_dir,
    destination_parts,
    subscription_dir_name,
)
from chute.errors import InvalidAddress

__all__ = [
    "INCOMING",
    "QUEUE_DIRS",
    "SUPPORT_DIR",
    "TOPIC_INCOMING",
    "TOPIC_SUBSCRIPTIONS",
    "TRANSACTION_STATES",
    "QueueLayout",
    "TopicLayout",
    "init_queue",
    "init_subscription",
    "init_topic",
    "queue_layout",
    "subscription_layouts",
    "support_dirs",
    "topic_layout",
]

INCOMING: Final = "incoming"
TOPIC_INCOMING: Final = ".incoming"
TOPIC_SUBSCRIPTIONS: Final = ".subscriptions"
QUEUE_DIRS: Final = ("working", "target", "processing", "processed", "expired", "error")
SUPPORT_DIR: Final = "dropboxmq"
"""DropboxMQ's own directory in a root, beside the dropboxes."""
TRANSACTION_STATES: Final = (
    "associated",
    "unassociated",
    "prepared",
    "committing",
    "committed",
    "rolling-back",
    "rolled-back",
)
"""The directories of ``dropboxmq/transaction/``: DropboxMQ's transaction logs, by state."""


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """The directories of one queue dropbox. Immutable; share it freely.

    ``root`` is resolved (absolute, no symlinks); ``base`` is
    ``root/<destination>/incoming`` for a queue, and for a topic's dropboxes
    ``root/topic-root/<a>/<b>/.incoming`` or ``.../.subscriptions/<dir>``;
    ``destination`` then reads ``topic:a.b`` or ``topic:a.b/<dir>``.
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
        for path in (*_levels(self.root, self.base), *self.dirs()):
            _check_resolves_to_itself(path)

    def create(self) -> None:
        """Create the missing directories, checking each one as it is made.

        A missing ``base`` appears whole: it is built aside with its six
        directories and renamed into place (:meth:`_create_aside`), so a
        publisher that lists ``.subscriptions/`` never finds a subscription
        without its ``working/`` or ``target/``.

        Raises:
            InvalidAddress: as :meth:`check`.
            OSError: a directory cannot be created.
        """
        *above, base = _levels(self.root, self.base)
        for path in above:
            path.mkdir(exist_ok=True)
            _check_resolves_to_itself(path)
        if not os.path.lexists(base):
            self._create_aside()
        for path in (base, *self.dirs()):
            path.mkdir(exist_ok=True)  # a dropbox an older client made may lack some
            _check_resolves_to_itself(path)

    def _create_aside(self) -> None:
        """Build ``base`` and its six directories under a hidden name beside its parent
        (``.new-<random>``, which no destination or subscription can be called), then
        rename it into place. If another process made ``base`` meanwhile, theirs stays."""
        aside = self.base.parent.parent / f".new-{secrets.token_hex(8)}"
        aside.mkdir()
        try:
            for name in QUEUE_DIRS:
                (aside / name).mkdir()
            try:
                os.rename(aside, self.base)
            except OSError:
                if not os.path.isdir(self.base):
                    raise
        finally:
            if os.path.lexists(aside):
                shutil.rmtree(aside, ignore_errors=True)


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

    Idempotent. ``root`` itself is created if missing, and so are DropboxMQ's
    own directories in it (:func:`support_dirs`). The layout is checked before
    and after creating, so a symlink raced in between is caught too.

    Raises:
        InvalidAddress: as :func:`queue_layout`.
        OSError: a directory cannot be created (or a plain file is in the way).
    """
    check_destination_name(destination)  # before creating anything
    Path(root).mkdir(parents=True, exist_ok=True)
    layout = queue_layout(root, destination)
    layout.create()
    _create_support(layout.root)
    return layout


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """Where topic ``topic`` lives: ``root/topic-root/<a>/<b>``. Immutable."""

    root: Path
    topic: str
    dir: Path

    @property
    def incoming(self) -> QueueLayout:
        """The ``.incoming`` dropbox, for files the distributor fans out."""
        return QueueLayout(self.root, f"topic:{self.topic}", self.dir / TOPIC_INCOMING)

    @property
    def subscriptions_dir(self) -> Path:
        return self.dir / TOPIC_SUBSCRIPTIONS

    def subscription(self, subscription: str, client_id: str) -> QueueLayout:
        """The dropbox of one subscription (not checked, not created).

        Raises:
            InvalidAddress: see :func:`~chute.dropbox.names.subscription_dir_name`.
        """
        return self.subscription_dir(subscription_dir_name(subscription, client_id))

    def subscription_dir(self, dir_name: str) -> QueueLayout:
        """The dropbox of the subscription whose directory is ``dir_name``.

        Raises:
            InvalidAddress: see :func:`~chute.dropbox.names.check_subscription_dir`.
        """
        check_subscription_dir(dir_name)
        return QueueLayout(
            self.root, f"topic:{self.topic}/{dir_name}", self.subscriptions_dir / dir_name
        )


def topic_layout(root: str | os.PathLike[str], topic: str) -> TopicLayout:
    """The layout of ``topic`` under ``root``, checked; creates nothing.

    Raises:
        InvalidAddress: not a topic name, or a part that exists resolves elsewhere.
    """
    parts = destination_parts(topic, topic=True)
    root_path = Path(root).resolve()
    layout = TopicLayout(root_path, topic, root_path.joinpath(*parts))
    for path in _levels(root_path, layout.dir):
        _check_resolves_to_itself(path)
    return layout


def init_topic(root: str | os.PathLike[str], topic: str) -> TopicLayout:
    """Create (if missing) ``topic``'s directory, its ``.incoming`` dropbox and
    ``.subscriptions``, and DropboxMQ's own directories (:func:`support_dirs`).
    Idempotent.

    Raises:
        InvalidAddress: as :func:`topic_layout`.
        OSError: a directory cannot be created.
    """
    destination_parts(topic, topic=True)  # check before creating anything
    Path(root).mkdir(parents=True, exist_ok=True)
    layout = topic_layout(root, topic)
    layout.incoming.create()
    layout.subscriptions_dir.mkdir(exist_ok=True)
    _check_resolves_to_itself(layout.subscriptions_dir)
    _create_support(layout.root)
    return layout


def init_subscription(topic: TopicLayout, subscription: str, client_id: str) -> QueueLayout:
    """Create (if missing) the dropbox of one subscription of ``topic``.

    Raises:
        InvalidAddress: a bad name, or a part resolves elsewhere.
        OSError: a directory cannot be created.
    """
    layout = topic.subscription(subscription, client_id)
    layout.create()
    return layout


def subscription_layouts(topic: TopicLayout) -> list[QueueLayout]:
    """Every subscription dropbox of ``topic`` there is now (real directories only)."""
    found: list[QueueLayout] = []
    try:
        entries = list(os.scandir(topic.subscriptions_dir))
    except FileNotFoundError:
        return found
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue  # a symlink or a stray file: not a subscription we follow
        except OSError:
            continue
        found.append(topic.subscription_dir(entry.name))
    return sorted(found, key=lambda layout: layout.base.name)


def support_dirs(root: Path) -> tuple[Path, ...]:
    """DropboxMQ's directories in ``root`` (resolved), parents first: ``dropboxmq``,
    ``dropboxmq/clients``, ``dropboxmq/transaction`` and one directory per
    :data:`TRANSACTION_STATES`. What DropboxMQ's ``create-dropbox`` makes beside
    the dropbox it creates."""
    support = root / SUPPORT_DIR
    transaction = support / "transaction"
    states = tuple(transaction / state for state in TRANSACTION_STATES)
    return (support, support / "clients", transaction, *states)


def _create_support(root: Path) -> None:
    """Create (if missing) :func:`support_dirs`, checking each as :meth:`QueueLayout.create`.

    Raises:
        InvalidAddress: one resolves elsewhere (a symlink).
        OSError: one cannot be created (or a plain file is in the way).
    """
    for path in support_dirs(root):
        path.mkdir(exist_ok=True)
        _check_resolves_to_itself(path)


def _levels(root: Path, base: Path) -> list[Path]:
    """Every directory from just below ``root`` down to ``base``."""
    parts = base.relative_to(root).parts
    return [root.joinpath(*parts[: i + 1]) for i in range(len(parts))]


def _check_resolves_to_itself(path: Path) -> None:
    if os.path.lexists(path) and path.resolve() != path:
        raise InvalidAddress(f"{path} resolves to {path.resolve()}: refusing to use it")
