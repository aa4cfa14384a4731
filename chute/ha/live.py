"""The live's side of replication: a listener for backups, a link per backup.

:class:`Replication` is the journal's tap (:mod:`chute.store.tap`): every write and
deletion becomes a frame (:mod:`chute.ha.wire`) queued for every connected backup,
and every batch of sync callbacks goes to the :class:`~chute.ha.gate.Gate`.

A backup connects and says what it holds (``HELLO``); the live takes a snapshot of
its segment files with no write under way (:meth:`Journal.at_rest
<chute.store.journal.Journal.at_rest>`) and from then on queues the new frames for
it, while it sends what the backup lacks from its files (:func:`chute.ha.files.catch_up`,
read on a thread: the live never stops). Then the queue follows. Once the backup's
ack reaches every position handed to the gate, it is in sync: recorded in etcd,
told (``STATE``), and counted for every confirmation from then on. A backup whose
link breaks, or that keeps a confirmation waiting longer than ``drop_after_ms``, is
dropped: recorded in etcd, then out of the gate (logged once each way).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Final

from chute.cluster.errors import EtcdError
from chute.core.model.store import SyncCallback
from chute.ha.elector import Elector
from chute.ha.files import Holding, catch_up
from chute.ha.gate import Gate
from chute.ha.wire import (
    Ack,
    Decoder,
    Delete,
    Frame,
    Hello,
    State,
    Welcome,
    WireError,
    Write,
    encode,
    position,
)
from chute.store.journal import Journal
from chute.store.segment import read_segment

log = logging.getLogger("chute.ha")

MAX_BEHIND: Final = 64 << 20
"""Bytes queued for a backup (behind its socket, or while it catches up) before its
link is cut: it connects again and catches up from the files."""
_DROP_CHECK: Final = 0.1
_RECORD_RETRY: Final = 0.2


class _Link:
    """One backup's link (on the loop)."""

    def __init__(self, node_id: str, address: str, writer: asyncio.StreamWriter) -> None:
        self.node_id = node_id
        self.address = address
        self.writer = writer
        self.caught_up = False
        self.in_sync = False
        self.dropping = False  # being recorded out of the in-sync set: no joining meanwhile
        self.recorded = False  # etcd lists it as in sync (it may take over)
        self.queued: list[bytes] = []  # frames written meanwhile, while catching up
        self.queued_bytes = 0

    def send(self, data: bytes) -> None:
        if self.writer.transport.get_write_buffer_size() > MAX_BEHIND:
            raise ConnectionError("too far behind")
        write(self.writer, data)


class Replication:
    """The live's replication: tap, gate, backup links (module docstring)."""

    def __init__(
        self,
        elector: Elector,
        *,
        min_in_sync: int,
        drop_after_ms: int,
        step_down: Callable[[str], None],
    ) -> None:
        self.elector = elector
        self.gate = Gate(min_in_sync, elector.may_confirm)
        elector.on_renewed = self.gate.recheck
        elector.on_new_epoch = self._new_epoch
        self._drop_after = drop_after_ms / 1000
        self._step_down = step_down
        self._journal: Journal | None = None
        self._attached = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._links: list[_Link] = []  # connected, snapshot taken
        self._outbox: list[bytes] = []
        self._flush_due = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._checker: asyncio.Task[None] | None = None
        self.backups: dict[str, str] = {}  # address -> "in-sync" | "catching-up" | "down"
        self._addresses: dict[str, str] = {}  # a backup's identity -> its latest link's address
        self._closing = False
        self._recording = asyncio.Lock()
        self._leaving: set[str] = set()  # backups being recorded out of the in-sync set

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    def attach(self, journal: Journal) -> None:
        """Tap ``journal`` (before anything is written that a client waits for)."""
        self._journal = journal
        journal.replicate(self)
        self._attached.set()
        self._checker = asyncio.create_task(self._check_behind(), name="ha-drop-check")

    async def close(self) -> None:
        """Stop replicating (a clean stop: the backups stay in sync, so one takes over)."""
        self._closing = True
        if self._journal is not None:
            self._journal.replicate(None)
        if self._server is not None:
            self._server.close()
        for task in [*self._tasks, *([self._checker] if self._checker else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for link in list(self._links):
            link.writer.close()

    def _new_epoch(self) -> None:
        """Live again under a new epoch: every backup links anew (and hears it)."""
        for link in list(self._links):
            link.writer.close()

    # -- the tap (the writer's thread, or the loop's for an inline sync) ------------------

    def wrote(self, segment: int, offset: int, data: bytes) -> None:
        if self._links:  # no backup: nothing to copy (a link is added under the cycle lock)
            self._queue(encode(Write(self.elector.epoch, segment, offset, data)))

    def deleted(self, segment: int) -> None:
        if self._links:
            self._queue(encode(Delete(self.elector.epoch, segment)))

    def synced(self, callbacks: list[SyncCallback], segment: int, offset: int) -> None:
        self.gate.submit(callbacks, position(segment, offset))

    def _queue(self, data: bytes) -> None:
        with self._lock:
            if not self._links:
                return
            self._outbox.append(data)
            if self._flush_due:
                return
            self._flush_due = True
        if threading.get_ident() == self._loop_thread:
            self._flush()  # an inline sync: off to the backups before the live's fsync
        else:
            self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            frames, self._outbox = self._outbox, []
            self._flush_due = False
            links = list(self._links)
        if not frames:
            return
        data = b"".join(frames)
        for link in links:
            if not link.caught_up:
                link.queued.append(data)
                link.queued_bytes += len(data)
                if link.queued_bytes > MAX_BEHIND:  # it starts again, from the files
                    link.writer.close()
                continue
            try:
                link.send(data)
            except ConnectionError:
                link.writer.close()

    # -- a backup's link -------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        link: _Link | None = None
        try:
            await self._attached.wait()
            decoder = Decoder()
            hello = await _first(reader, decoder)
            epoch = self.elector.epoch
            if hello.epoch > epoch:
                self._step_down(f"a backup has seen epoch {hello.epoch}, newer than this live's")
                return
            write(writer, encode(Welcome(epoch, self.elector.node_id)))
            link = _Link(hello.node_id, f"{peer[0]}:{peer[1]}" if peer else "?", writer)
            await self._catch_up(link, hello.segments)
            await self._follow(link, reader, decoder)
        except (OSError, WireError, asyncio.IncompleteReadError, ConnectionError) as exc:
            if link is not None:
                log.warning("high availability: backup %s: link lost (%s)", link.address, exc)
        finally:
            if link is not None:
                await self._gone(link)
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _catch_up(self, link: _Link, held: tuple[Holding, ...]) -> None:
        journal = self._journal
        if journal is None:
            raise ConnectionError("no journal to replicate yet")
        snapshot: list[tuple[list[int], int, int]] = []

        def start(segments: list[int], segment: int, offset: int) -> None:
            snapshot.append((segments, segment, offset))
            with self._lock:
                self._links.append(link)

        journal.at_rest(start)
        segments, segment, offset = snapshot[0]
        before = self._addresses.get(link.node_id)
        if before is not None and before != link.address:  # the same backup, linked anew
            self.backups.pop(before, None)
        self._addresses[link.node_id] = link.address
        self.backups[link.address] = "catching-up"
        log.info(
            "high availability: backup %s (%s) connected; catching up", link.address, link.node_id
        )
        directory = journal.directory

        def read(number: int) -> bytes | None:
            try:
                return read_segment(directory, number)
            except FileNotFoundError:
                return None

        frames = iter(catch_up(self.elector.epoch, list(held), segments, (segment, offset), read))
        while True:
            batch = await asyncio.to_thread(_take, frames, 16)
            if not batch:
                break
            write(link.writer, b"".join(encode(f) for f in batch))
            await link.writer.drain()
        for data in link.queued:
            write(link.writer, data)
        link.queued.clear()
        link.caught_up = True
        await link.writer.drain()

    async def _follow(self, link: _Link, reader: asyncio.StreamReader, decoder: Decoder) -> None:
        epoch = self.elector.epoch
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError("the backup closed the link")
            for frame in decoder.feed(data):
                if not isinstance(frame, Ack) or frame.epoch != epoch:
                    raise WireError(f"unexpected frame from a backup: {type(frame).__name__}")
                if link.in_sync:
                    self.gate.acked(link.node_id, frame.position)
                elif (
                    link.caught_up
                    and not link.dropping
                    and self.gate.join(link.node_id, frame.position)
                ):
                    link.in_sync = True
                    self.backups[link.address] = "in-sync"
                if link.in_sync and not link.recorded:
                    await self._recorded_in_sync(link, epoch)

    async def _recorded_in_sync(self, link: _Link, epoch: int) -> None:
        """Record in etcd that ``link``'s backup is in sync (it is, in the gate, from
        before: until it is recorded it only may not take over), then tell it. Tried
        again at its next ack if etcd did not answer."""
        try:
            recorded = await self._record()
        except EtcdError:
            return
        if recorded and link.in_sync and not link.recorded:
            link.recorded = True
            write(link.writer, encode(State(epoch, in_sync=True)))
            log.info("high availability: backup %s is in sync", link.address)

    async def _gone(self, link: _Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        if self._addresses.get(link.node_id) == link.address:  # not replaced by a new link
            self.backups[link.address] = "down"
        if link.in_sync and not self._closing:
            link.in_sync = False
            await self._drop(link.node_id, link.address, "its link is lost")

    async def _record(self) -> bool:
        """Record the in-sync set in etcd (one write at a time, the newest set each time:
        without the backups being dropped); False if this process is no longer live."""
        async with self._recording:
            in_sync = [b for b in self.gate.in_sync if b not in self._leaving]
            return await self.elector.record_in_sync(in_sync)

    async def _drop(self, node_id: str, address: str, why: str) -> None:
        """Record ``node_id`` out of the in-sync set, then confirm without it (retrying
        while etcd is out of reach; never, if this process is no longer live)."""
        self._leaving.add(node_id)
        try:
            while not self._closing:
                try:
                    recorded = await self._record()  # before confirming anything without it
                except EtcdError as exc:
                    log.debug("high availability: recording a dropped backup: %s", exc)
                    await asyncio.sleep(_RECORD_RETRY)
                    continue
                if recorded:
                    self.gate.leave(node_id)
                    log.warning(
                        "high availability: backup %s dropped from the in-sync set: %s",
                        address,
                        why,
                    )
                return
        finally:
            self._leaving.discard(node_id)

    async def _check_behind(self) -> None:
        while True:
            await asyncio.sleep(_DROP_CHECK)
            for node_id in self.gate.behind(self._drop_after):
                link = next((li for li in self._links if li.node_id == node_id), None)
                if link is None or link.dropping:
                    continue
                link.in_sync = link.recorded = False
                link.dropping = True
                self.backups[link.address] = "catching-up"
                with contextlib.suppress(ConnectionError):
                    link.send(encode(State(self.elector.epoch, in_sync=False)))
                try:
                    await self._drop(
                        node_id,
                        link.address,
                        f"it kept a confirmation waiting over {self._drop_after:g} s",
                    )
                finally:
                    link.dropping = False


def write(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write ``data``, or raise ConnectionError if the link was closed meanwhile."""
    if writer.is_closing():
        raise ConnectionError("the link is closed")
    writer.write(data)


def _take(frames: Iterator[Frame], count: int) -> list[Frame]:
    return list(itertools.islice(frames, count))


async def _first(reader: asyncio.StreamReader, decoder: Decoder) -> Hello:
    while True:
        data = await reader.read(1 << 16)
        if not data:
            raise ConnectionError("the backup closed the link")
        frames = decoder.feed(data)
        if frames:
            if not isinstance(frames[0], Hello) or len(frames) > 1:
                raise WireError("a backup must say HELLO first, and only that")
            return frames[0]
