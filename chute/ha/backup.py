"""A backup's side: follow the node's live, keep an identical journal, take over.

:class:`Backup` runs until this process should be live. In a loop it reads who is
live in etcd (:class:`~chute.ha.elector.Elector`); when there is one, it connects to
its replication listener, says what it holds, and applies what the live sends
(:class:`~chute.ha.files.ReplicaFiles`, on a thread), answering after each batch
with the position it has on disk. When there is none, it campaigns if the record
in etcd lets it (it was the live, or in sync with it), and returns once it won:
the caller then opens the journal as any broker does at start (recovery).

A backup refuses a live whose epoch is older than one it saw (kept in
``ha-epoch`` beside the journal) and keeps its identity in ``ha-id``.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Final

from chute.cluster.errors import EtcdError
from chute.errors import StoreError
from chute.ha.elector import Elector, LiveInfo
from chute.ha.files import ReplicaFiles, holdings
from chute.ha.live import write
from chute.ha.wire import (
    POSITION_SHIFT,
    Ack,
    Decoder,
    Frame,
    Hello,
    State,
    Welcome,
    WireError,
    encode,
)

log = logging.getLogger("chute.ha")

POLL: Final = 0.2  # seconds between looks at who is live


def node_id(data_dir: Path) -> str:
    """This data directory's identity as a replica (made on first use)."""
    path = data_dir / "ha-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        made = uuid.uuid4().hex
        path.write_text(made + "\n")
        return made


class Backup:
    """This process as a backup of its node, until it becomes live (module docstring)."""

    def __init__(self, elector: Elector, data_dir: Path, address: str) -> None:
        self.elector = elector
        self.data_dir = data_dir
        self.journal = str(data_dir / "journal")
        self.address = address  # this process's replication address, if it becomes live
        self._epoch_path = data_dir / "ha-epoch"
        self.in_sync = False
        self.following: LiveInfo | None = None
        self.live_address: str | None = None  # where clients reach the live, once known
        self.position = 0  # where its copy of the journal ends, as far as it synced

    @property
    def epoch_seen(self) -> int:
        try:
            return int(self._epoch_path.read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def _saw(self, epoch: int) -> None:
        if epoch > self.epoch_seen:
            self._epoch_path.write_text(f"{epoch}\n")

    async def run(self) -> None:
        """Follow lives until this process won the node's election.

        Raises:
            EtcdUnavailable, EtcdAuthError: etcd cannot be used at the start.
            StoreError: another process uses this data directory.
        """
        os.makedirs(self.journal, exist_ok=True)
        lock = _lock(self.journal)
        try:
            await self._run()
        finally:
            os.close(lock)

    async def _run(self) -> None:
        elector = self.elector
        waiting_logged = False
        await elector.live()  # an etcd out of reach at the start is an error, as for any node
        while True:
            try:
                live = await elector.live()
                if live is None:
                    record = await elector.record()
                    if record is None or record.may_take_over(elector.node_id):
                        if await elector.campaign(self.address):
                            self._saw(elector.epoch)
                            return
                    elif not waiting_logged:
                        log.warning(
                            "high availability: no live, and this process was not in sync "
                            "with the last one (epoch %d): waiting for it to come back",
                            record.epoch,
                        )
                        waiting_logged = True
                elif live.node_id == elector.node_id:
                    if not waiting_logged:  # its previous run, killed: its lease runs out
                        log.warning(
                            "high availability: the node's live has this data directory's "
                            "identity (its previous run, or a copy of the directory): "
                            "waiting for its lease to end"
                        )
                        waiting_logged = True
                elif live.epoch < self.epoch_seen:
                    log.warning("high availability: live of epoch %d is stale", live.epoch)
                else:
                    await self._follow(live)
                    continue
            except EtcdError as exc:
                log.warning("high availability: etcd: %s", exc)
            await asyncio.sleep(POLL)

    async def _follow(self, live: LiveInfo) -> None:
        host, _, port = live.address.rpartition(":")
        try:
            async with asyncio.timeout(self.elector.ttl):
                reader, writer = await asyncio.open_connection(host, int(port))
        except (OSError, ValueError, TimeoutError) as exc:
            log.debug("high availability: cannot reach the live at %s: %s", live.address, exc)
            await asyncio.sleep(POLL)
            return
        self.following = live
        files = ReplicaFiles(self.journal)
        watcher = asyncio.create_task(self._watch(live, writer))
        epoch = 0  # the live's, once it welcomed this backup
        try:
            held = await asyncio.to_thread(holdings, self.journal)
            write(writer, encode(Hello(self.elector.node_id, self.epoch_seen, tuple(held))))
            decoder = Decoder()
            while data := await reader.read(1 << 20):
                frames = decoder.feed(data)
                if epoch == 0 and frames:
                    first = frames.pop(0)
                    if not isinstance(first, Welcome) or first.epoch < self.epoch_seen:
                        raise WireError("the live did not welcome this backup in a current epoch")
                    epoch = first.epoch
                    self._saw(epoch)
                    log.info(
                        "high availability: backup of the live at %s (epoch %d)",
                        live.address,
                        epoch,
                    )
                # on the loop: a backup serves nothing else, and a thread hop per batch
                # would lengthen every synchronous send's round trip
                at = _apply(files, frames, epoch)
                for frame in frames:
                    if isinstance(frame, State) and frame.in_sync != self.in_sync:
                        self.in_sync = frame.in_sync
                        log.info(
                            "high availability: %s with the live",
                            "in sync" if frame.in_sync else "no longer in sync",
                        )
                if at is not None:
                    self.position = at
                    write(writer, encode(Ack(epoch, at)))
            if epoch:
                log.warning("high availability: link to the live lost: it closed the link")
        except WireError as exc:
            log.warning("high availability: link to the live lost: %s", exc)
        except OSError as exc:  # ConnectionError: closed by _watch
            if epoch:
                log.warning("high availability: link to the live lost: %s", exc)
            else:  # a live that stops (or was killed) as this backup links anew
                log.debug(
                    "high availability: the live at %s closed the link: %s", live.address, exc
                )
        finally:
            watcher.cancel()
            writer.close()
            files.close()
            self.in_sync = False
            self.following = None

    def view(self) -> dict[str, Any]:
        """This process's statistics as a backup: ``role``, ``epoch`` (the newest seen),
        ``live`` (where clients reach it; None: not known yet), ``in_sync`` and
        ``position`` (``{"segment", "offset"}``: where its copy ends)."""
        return {
            "role": "backup",
            "epoch": self.epoch_seen,
            "live": self.live_address,
            "in_sync": self.in_sync,
            "position": {
                "segment": self.position >> POSITION_SHIFT,
                "offset": self.position & ((1 << POSITION_SHIFT) - 1),
            },
        }

    def refusal(self) -> str:
        """Why a client is refused here: this process is a backup; where the live is."""
        where = f"its live is at {self.live_address}" if self.live_address else "no live yet"
        return (
            f"node {self.elector.node}: this process is a backup and takes no client work ({where})"
        )

    async def _watch(self, live: LiveInfo, writer: asyncio.StreamWriter) -> None:
        """Close the link once etcd no longer names ``live`` (its lease ran out); learn
        where clients reach it meanwhile."""
        self.live_address = None
        while True:
            try:
                if self.live_address is None:
                    self.live_address = await self.elector.client_address()
                await asyncio.sleep(POLL)
                now = await self.elector.live()
            except EtcdError:
                await asyncio.sleep(POLL)  # a backup cut off from etcd follows on meanwhile
                continue
            if now is None or now.epoch != live.epoch:
                writer.close()
                return


def _apply(files: ReplicaFiles, frames: list[Frame], epoch: int) -> int | None:
    """Apply ``frames`` and make them durable; the position reached (None: nothing to ack)."""
    if not frames:
        return None
    for frame in frames:
        if getattr(frame, "epoch", epoch) != epoch:
            raise WireError(f"a frame of epoch {getattr(frame, 'epoch', 0)} in epoch {epoch}")
        files.apply(frame)
    return files.flush()


def _lock(directory: str) -> int:
    fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StoreError(
            f"journal {directory} is in use by another broker (cannot lock it: {exc.strerror})"
        ) from exc
    return fd
