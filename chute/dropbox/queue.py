"""Serverless queue dropboxes: produce, claim, ack and recover with real files.

The DropboxMQ 1.2 protocol (``shared/notes/dropboxmq.md``), with no broker:
processes on one machine, or on machines sharing a filesystem, exchange
messages through a dropbox root and settle contention by atomic rename.

Theory of operation
-------------------
- **Produce** (:class:`QueueProducer`): create the file exclusively in
  ``working/`` under its DropboxMQ name (:func:`encode_filename`), write the
  body, fsync it, rename it into ``target/`` and fsync ``target/``. A file in
  ``target/`` is therefore complete and durable; a crash leaves at worst a
  stray file in ``working/``, never a torn one in ``target/``.
- **Flow control** (:mod:`chute.dropbox.flow`): while DropboxMQ's
  ``write-lock.properties`` says so, a send waits (if given a
  ``block_timeout``, that long at most, then
  :class:`~chute.errors.DestinationFull`); while a ``read-lock``
  or the root's ``global-read-lock`` exists, a consumer finds nothing.
- **Claim** (:class:`QueueConsumer`): list ``target/``, decode the names and
  order them by priority (high first), timestamp, sequence, name. Claim the
  first by renaming it to ``processing/<enc(clientId)>~<name>``. Exactly one
  rename of a file succeeds; a consumer whose rename fails with
  ``FileNotFoundError`` lost the race (or the file vanished) and tries the next
  one. The sorted listing is reused until it is used up or older than
  ``target_scan_timeout_ms`` (DropboxMQ's target scan timeout), so one scan
  serves many receives.
- **After the claim**, only the claimer touches the file: expired (expiration
  set and past) goes to ``expired/``; a file that cannot be read as a regular
  file (a FIFO, a symlink, a directory, an I/O error) goes to ``error/`` with a
  log line; anything else is delivered.
- **Settle**: :meth:`QueueConsumer.ack` moves the file to
  ``processed/<clientId>~<name with JMSXDeliveryCount=n>`` (or deletes it);
  :meth:`QueueConsumer.recover` puts it back in ``target/`` with the delivery
  count raised, or into ``error/`` once the redelivery limit is spent.
- **A dead consumer**: :func:`recover_client` moves what a client id left in
  ``processing/`` back to ``target/``. Run it only when that client is gone:
  it takes the files of a live consumer with that id just the same.
- **Purge and delete** (:func:`purge_queue`, :func:`delete_queue`): purging
  unlinks what waits in ``target/`` (claimed files stay with their consumers);
  deleting removes the queue's directory, claimed files too, and a consumer
  finds it gone at its next scan.

Durability: a produced file is fsynced, and so is ``target/`` after the rename.
The consumer's moves are not fsynced: after a power cut a claimed file may be
back in ``target/`` (delivered again, which at-least-once allows) or still in
``processing/`` (brought back by :func:`recover_client`).

Hazard kept from DropboxMQ: ``rename`` replaces a file of the same name, so two
producers sending the same message id into one queue keep only one file. Ids
made here (:func:`~chute.dropbox.transcoder.dropbox_id`) hold 10 random digits.

A producer or consumer object is for one thread at a time; any number of them,
in any number of processes, may share one root. Both take a root and a queue
name, or a :class:`~chute.dropbox.layout.QueueLayout` (a topic's
``.incoming`` or subscription dropbox) and no name.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from chute.core.model.address import Kind, parse
from chute.dropbox.flow import ReadLock, WriteLock
from chute.dropbox.layout import QueueLayout, init_queue, queue_layout
from chute.dropbox.names import DEFAULT_CLAIM_ROOM, claim_name, claim_room, split_claim_name
from chute.dropbox.properties import lost_properties
from chute.dropbox.transcoder import (
    DecodedName,
    check_body,
    decode_filename,
    encode_filename,
)
from chute.dropbox.watch import DEFAULT_POLL_INTERVAL, Watcher
from chute.errors import InvalidAddress, InvalidMessage, NotFound
from chute.message import Message, now_ms

__all__ = [
    "ConsumerOptions",
    "Delivery",
    "QueueConsumer",
    "QueueProducer",
    "delete_queue",
    "open_layout",
    "purge_queue",
    "recover_client",
    "recover_layout",
]

log = logging.getLogger("chute.dropbox")

_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_NAME_TRIES: Final = 5


def open_layout(root: str | os.PathLike[str] | QueueLayout, destination: str = "") -> QueueLayout:
    """``root`` itself if it is a layout (created if missing), else queue ``destination``'s.

    Raises:
        InvalidAddress: a bad name, or a directory that resolves elsewhere.
    """
    if isinstance(root, QueueLayout):
        root.create()
        return root
    return init_queue(root, destination)


def _fsync_dir(path: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fsync(fd)
    finally:
        os.close(fd)


class QueueProducer:
    """Writes messages into a queue dropbox, as a DropboxMQ producer does.

    Creates the dropbox's directories if missing. ``durable=False`` skips the
    fsyncs (faster; a power cut may lose or empty recent files). ``fsync`` is
    the seam tests use to fail or observe syncs. ``block_timeout`` is how long
    a send waits on DropboxMQ's write lock, in seconds (None: as long as the
    lock says, as DropboxMQ's producers do); the lock is looked at every
    ``poll_interval`` seconds. ``claim_room`` is what the claim prefix of the
    consumers that will take the files adds to a name
    (:func:`~chute.dropbox.names.claim_room`; see :func:`encode_filename`).
    Properties DropboxMQ cannot read are not written
    (:func:`~chute.dropbox.transcoder.lost_properties`): ``lost_properties``
    counts them, and the first is logged.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | QueueLayout,
        destination: str = "",
        *,
        durable: bool = True,
        fsync: Callable[[int], None] = os.fsync,
        block_timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        claim_room: int = DEFAULT_CLAIM_ROOM,
    ) -> None:
        self.layout: QueueLayout = open_layout(root, destination)
        self.write_lock = WriteLock(self.layout, poll_interval)
        self.block_timeout = block_timeout
        self.claim_room = claim_room
        self.lost_properties = 0
        self._durable = durable
        self._fsync = fsync
        self._sequence = itertools.count()

    def send(self, message: Message) -> str:
        """Put ``message`` into ``target/``; returns its filename.

        A message with an empty id gets a DropboxMQ id carrying its timestamp
        (or now) and this producer's sequence, so consumers order it by time;
        a message with an id keeps it, and is ordered by time of receipt.

        Waits first while DropboxMQ's write lock holds sends back
        (:meth:`~chute.dropbox.flow.WriteLock.wait`).

        Raises:
            DestinationFull: still write-locked after ``block_timeout``; nothing
                was written.
            InvalidMessage: the message cannot be written as a DropboxMQ name
                (see :func:`encode_filename`), or its body is one DropboxMQ
                cannot read (see :func:`~chute.dropbox.transcoder.check_body`).
            OSError: the file cannot be written; nothing is left in ``target/``.
        """
        self.write_lock.wait(self.block_timeout)
        name, working = self.stage(message)
        self.publish(working, name)
        return name

    def stage(self, message: Message, *, claim_room: int | None = None) -> tuple[str, Path]:
        """Write ``message`` into ``working/`` only: (its name, its path there).

        :meth:`publish` moves it into ``target/``; :meth:`discard` drops it. A
        transaction stages its sends and publishes them at commit.
        ``claim_room`` overrides this producer's for this message.

        Raises:
            InvalidMessage, OSError: as :meth:`send`; nothing is left behind.
        """
        check_body(message)
        self._count_lost(message)
        for _ in range(_NAME_TRIES):
            name = encode_filename(
                message,
                sequence=next(self._sequence),
                claim_room=self.claim_room if claim_room is None else claim_room,
            )
            working = self.layout.working / name
            try:
                fd = self._create(working)
            except FileExistsError:
                if message.id:
                    raise
                continue  # a generated id collided: the next one differs
            break
        else:  # pragma: no cover - needs _NAME_TRIES random collisions
            raise FileExistsError(f"no unique name in {self.layout.working}")
        try:
            try:
                view = memoryview(message.body)
                while view:
                    view = view[os.write(fd, view) :]
                if self._durable:
                    self._fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            working.unlink(missing_ok=True)
            raise
        return name, working

    def _count_lost(self, message: Message) -> None:
        lost = lost_properties(message.properties)
        if lost and not self.lost_properties:
            log.warning(
                "%s: property %r is not a Java identifier, which DropboxMQ cannot read: "
                "not written (nor is any such property; said once per producer)",
                self.layout.target,
                lost[0],
            )
        self.lost_properties += len(lost)

    def _create(self, working: Path) -> int:
        try:
            return os.open(working, _CREATE_FLAGS, 0o644)
        except FileNotFoundError:  # the dropbox was deleted: its next use makes it anew
            self.layout.create()
            return os.open(working, _CREATE_FLAGS, 0o644)

    def publish(self, working: Path, name: str) -> None:
        """Rename a staged file into ``target/`` (and fsync ``target/`` if durable).

        Raises:
            OSError: the rename failed; the staged file is removed.
        """
        try:
            os.rename(working, self.layout.target / name)
        except BaseException:
            working.unlink(missing_ok=True)
            raise
        if self._durable:
            _fsync_dir(self.layout.target, self._fsync)

    @staticmethod
    def discard(working: Path) -> None:
        """Drop a staged file that will not be published."""
        working.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """What DropboxMQ users configure, with DropboxMQ's defaults.

    ``redelivery_attempts`` is how many times a recovered message goes back to
    ``target/`` before it goes to ``error/`` (0: never redelivered).
    ``target_scan_timeout_ms`` is how long one sorted listing of ``target/``
    serves receives before a new scan (0: scan on every receive, so a new
    high-priority message is seen at once, at the cost of a listing each time).
    """

    redelivery_attempts: int = 0
    delete_processed: bool = False
    delete_expired: bool = False
    target_scan_timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class Delivery:
    """One claimed message and where its file is: the handle to ack or recover."""

    message: Message
    decoded: DecodedName
    path: Path


class QueueConsumer:
    """Claims messages from a queue dropbox as client ``client_id``.

    Creates the dropbox's directories if missing. :meth:`receive` never waits:
    it returns None when a fresh scan of ``target/`` finds nothing to claim, and
    while DropboxMQ's read locks (:class:`~chute.dropbox.flow.ReadLock`) exist.

    Raises:
        InvalidAddress: (constructor) a bad destination name or client id.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | QueueLayout,
        destination: str,
        client_id: str,
        *,
        options: ConsumerOptions | None = None,
        accept: Callable[[DecodedName], bool] | None = None,
    ) -> None:
        self._claim_room = claim_room([client_id])  # checks the client id
        self.layout: QueueLayout = open_layout(root, destination)
        self.read_lock = ReadLock(self.layout)
        self.client_id = client_id
        self.options = options or ConsumerOptions()
        self._accept = accept
        self._pending: list[DecodedName] = []
        self._scanned_at = 0.0
        self._watcher: Watcher | None = None

    def receive_wait(
        self, timeout: float | None, poll_interval: float = DEFAULT_POLL_INTERVAL
    ) -> Delivery | None:
        """:meth:`receive`, waiting up to ``timeout`` seconds (None: forever) for a file.

        Waits on a :class:`~chute.dropbox.watch.Watcher` of ``target/``: inotify
        wakes it as soon as a file arrives; ``target/`` is rescanned at least
        every ``poll_interval`` seconds anyway (the only way to see files that
        another machine renames in on a shared filesystem, or a read lock removed).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            delivery = self.receive()
            if delivery is not None:
                return delivery
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            if self._watcher is None:
                self._watcher = Watcher([self.layout.target], poll_interval)
            self._watcher.wait(remaining)

    def close(self) -> None:
        """Release the watcher, if :meth:`receive_wait` opened one. Claimed files stay."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def release(self, delivery: Delivery) -> Path:
        """Give a claimed file back to ``target/`` unchanged (it was never delivered).

        Raises:
            FileNotFoundError: as :meth:`ack`.
        """
        new_path = self.layout.target / delivery.decoded.name
        os.rename(delivery.path, new_path)
        return new_path

    def receive(self) -> Delivery | None:
        """Claim and read the next message, or None when ``target/`` has none or
        the dropbox is read-locked (as DropboxMQ's consumers, which then act as
        if no message were waiting).

        Expired and unreadable files met on the way are moved aside (see the
        module docstring) and never returned.
        """
        if self.read_lock.locked():
            return None
        fresh = False
        while True:
            if not self._pending or (not fresh and self._scan_is_stale()):
                if fresh:
                    return None
                self._scan()
                fresh = True
                continue
            decoded = self._pending.pop()
            delivery = self._claim(decoded)
            if delivery is not None:
                return delivery

    def ack(self, delivery: Delivery) -> None:
        """Done with the message: to ``processed/`` (or deleted, per the options).

        Raises:
            FileNotFoundError: the claimed file is gone (acked twice, or taken
                back by :func:`recover_client`).
        """
        if self.options.delete_processed:
            delivery.path.unlink()
            return
        count = delivery.decoded.delivery_count + 1
        name = _counted_name(delivery.decoded, count, self._claim_room)
        os.rename(delivery.path, self.layout.processed / claim_name(self.client_id, name))

    def recover(self, delivery: Delivery) -> Path:
        """Not done: back to ``target/`` with the delivery count raised, or to ``error/``.

        Returns the file's new path.

        Raises:
            FileNotFoundError: as :meth:`ack`.
        """
        decoded = delivery.decoded
        count = decoded.delivery_count + 1
        if count <= self.options.redelivery_attempts:
            try:
                new_name = decoded.with_delivery_count(count, claim_room=self._claim_room)
                new_path = self.layout.target / new_name
            except InvalidMessage:
                log.warning("%s: no room in the name for a delivery count: to error/", decoded.name)
            else:
                os.rename(delivery.path, new_path)
                return new_path
        name = _counted_name(decoded, count, self._claim_room)
        new_path = self.layout.error / claim_name(self.client_id, name)
        os.rename(delivery.path, new_path)
        return new_path

    def reject(self, delivery: Delivery) -> Path:
        """Refuse the message for good: to ``error/`` (the dropbox's dead letters).

        Raises:
            FileNotFoundError: as :meth:`ack`.
        """
        count = delivery.decoded.delivery_count + 1
        name = _counted_name(delivery.decoded, count, self._claim_room)
        new_path = self.layout.error / claim_name(self.client_id, name)
        os.rename(delivery.path, new_path)
        return new_path

    # -- inside ---------------------------------------------------------------------------

    def _scan_is_stale(self) -> bool:
        age_ms = (time.monotonic() - self._scanned_at) * 1000
        return age_ms >= self.options.target_scan_timeout_ms

    def _scan(self) -> None:
        now = now_ms()
        names: list[str] = []
        with os.scandir(self.layout.target) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        continue  # not a message; leave it for a person
                except OSError:
                    continue
                names.append(entry.name)
        decoded = [decode_filename(name, now_ms=now) for name in names]
        if self._accept is not None:
            decoded = [d for d in decoded if self._accept(d)]
        decoded.sort(key=lambda d: d.sort_key, reverse=True)  # pop() takes the first
        self._pending = decoded
        self._scanned_at = time.monotonic()

    def _claim(self, decoded: DecodedName) -> Delivery | None:
        source = self.layout.target / decoded.name
        try:
            claimed = self.layout.processing / claim_name(self.client_id, decoded.name)
        except InvalidAddress as exc:
            log.warning(
                "%s: too long to claim (%s): to error/ as it is (a consumer with a "
                "shorter client id can take it: move it back to target/)",
                decoded.name,
                exc.reason,
            )
            _move_if_there(source, self.layout.error / decoded.name)
            return None
        try:
            os.rename(source, claimed)
        except FileNotFoundError:
            return None  # another consumer won it, or it vanished: not an error
        if 0 < decoded.expiration <= now_ms():
            if self.options.delete_expired:
                claimed.unlink(missing_ok=True)
            else:
                os.rename(claimed, self.layout.expired / claimed.name)
            return None
        try:
            body = _read_regular(claimed)
        except OSError as exc:
            log.warning("%s: cannot read it (%s): to error/", decoded.name, exc)
            os.rename(claimed, self.layout.error / claimed.name)
            return None
        for note in decoded.notes:
            log.info("%s: %s", decoded.name, note)
        return Delivery(decoded.to_message(body), decoded, claimed)


def recover_client(root: str | os.PathLike[str], destination: str, client_id: str) -> list[str]:
    """Move every file ``client_id`` left in ``processing/`` back to ``target/``.

    The recovery command for a killed consumer: run it only when no consumer
    with this client id is alive. Each file's delivery count is raised (it may
    have been delivered), so its consumer sees it as redelivered. Returns the
    names put back into ``target/``.

    Raises:
        InvalidAddress: a bad destination name.
    """
    return recover_layout(init_queue(root, destination), client_id)


def recover_layout(layout: QueueLayout, client_id: str) -> list[str]:
    """:func:`recover_client` for any dropbox (a topic subscription's too)."""
    layout.create()
    restored: list[str] = []
    with os.scandir(layout.processing) as entries:
        claimed = [entry.name for entry in entries]
    for claimed_name in claimed:
        owner, name = split_claim_name(claimed_name)
        if owner != client_id:
            continue
        decoded = decode_filename(name)
        try:
            new_name = decoded.with_delivery_count(
                decoded.delivery_count + 1, claim_room=claim_room([client_id])
            )
        except InvalidMessage:
            new_name = name
        if _move_if_there(layout.processing / claimed_name, layout.target / new_name):
            restored.append(new_name)
    return restored


def purge_queue(root: str | os.PathLike[str], address: str) -> int:
    """Remove every file waiting in a queue dropbox's ``target/`` (files claimed in
    ``processing/`` stay with their consumers); returns how many.

    Raises:
        InvalidAddress: a bad address, or a topic. NotFound: no such queue dropbox.
    """
    layout = _existing_queue(root, address, "purged")
    with os.scandir(layout.target) as entries:
        names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
    count = 0
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # claimed meanwhile
            os.unlink(layout.target / name)
            count += 1
    return count


def delete_queue(root: str | os.PathLike[str], address: str) -> int:
    """Delete a queue dropbox, its directory and every file in it; returns how many
    messages went (waiting in ``target/`` or claimed in ``processing/``).

    Raises:
        InvalidAddress: a bad address, or a topic. NotFound: no such queue dropbox.
    """
    layout = _existing_queue(root, address, "deleted")
    count = 0
    for directory in (layout.target, layout.processing):
        with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
            count += sum(1 for _ in entries)
    shutil.rmtree(layout.base.parent)
    return count


def _existing_queue(root: str | os.PathLike[str], address: str, done: str) -> QueueLayout:
    addr = parse(address)
    if addr.kind is not Kind.QUEUE:
        raise InvalidAddress(
            f"{addr}: a dropbox topic has no messages of its own to be {done}; its "
            "subscriptions are directories (unsubscribe them)"
        )
    layout = queue_layout(root, addr.name)
    if not layout.base.is_dir():
        raise NotFound(f"{addr} does not exist under {layout.root}")
    return layout


def _counted_name(decoded: DecodedName, count: int, room: int) -> str:
    """``decoded``'s name with the delivery count, or as it was if that cannot fit
    once claimed with ``room`` bytes of prefix."""
    try:
        return decoded.with_delivery_count(count, claim_room=room)
    except InvalidMessage:
        return decoded.name


def _move_if_there(source: Path, dest: Path) -> bool:
    try:
        os.rename(source, dest)
    except FileNotFoundError:
        return False
    return True


def _read_regular(path: Path) -> bytes:
    """The content of ``path``, which must be a regular file (no symlink, no FIFO)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
