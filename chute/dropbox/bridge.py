"""The broker's side of DropboxMQ: mount dropbox roots, import files, export messages.

Theory of operation
-------------------
One :class:`DropboxBridge` per ``[[dropbox]]`` table (:mod:`chute.dropbox.mount`).
All file I/O runs in the bridge's own thread; the core is only touched on the
server's event loop (``loop.call_soon_threadsafe``), since nothing in the core
is thread-safe.

**Import** (files -> broker). The thread claims files from each mounted
dropbox's ``target/`` by rename, exactly as any DropboxMQ consumer does
(``processing/<client>~<name>``), so a DropboxMQ consumer elsewhere on the same
root never gets the same file. A queue ``NAME`` is read from its dropbox. A
topic is read the way a DropboxMQ subscriber reads it: from a durable
subscription of the bridge's own, ``.subscriptions/<client>.<client>/``, into
which DropboxMQ publishers copy (their own copy goes straight to
``.incoming/processed``). What non-JMS producers drop into the topic's
``.incoming/target`` the bridge fans out first, as DropboxMQ's distributor
does (:class:`~chute.dropbox.topic.Distributor`: to every subscription of the
topic and of the topics above it, its own included), so each message reaches
the bridge once. The claimed messages go to the loop in groups, which sends
each to the broker (``queue:NAME`` or ``topic:NAME``) as a persistent message
and asks the store to sync. Only once the store calls back is each file moved
to ``processed/`` (or deleted): a file's message is never lost. A message the
broker refuses (full, no such destination) is given back to ``target/``
unchanged and retried after a polling interval.

A message is *carried* (:meth:`~chute.core.rules.broker.Broker.send`): it keeps the
timestamp its name holds (the id's leading digits, DropboxMQ's JMSTimestamp),
and the deliveries its ``JMSXDeliveryCount`` counts are the broker's too, so
the broker delivers it marked redelivered. That is how a re-import shows: a
broker killed between the sync and the move leaves the files in
``processing/``; the next start gives them back with the delivery count raised
and they are imported again (at least once, never lost), redelivered. Expired
files go to ``expired/`` when claimed (the consumer's rule); priority,
expiration, properties and the other headers come from the filename.

**Export** (broker -> files). On the loop, the bridge opens a core consumer
(individual acks, ``batch`` credits) on each address: a queue, or a topic
through a durable subscription named after the bridge's client id. Each
delivery is handed to the thread, which writes the file in ``working/``,
fsyncs it, renames it into ``target/`` and fsyncs the directory (a topic: into
every subscription of the topic dropbox); only then is the message acked on
the loop. The file's name keeps the message's id, so a DropboxMQ reader
gets the timestamp back only from a DropboxMQ id (one the message was
imported with). A name leaves room for the claim prefix of the consumers
that will claim it: for a queue, the longest of the mount's ``consumers``
(DropboxMQ's generated client ids when none are listed); for a topic, the
clients its subscription directories name. A message DropboxMQ could not read
(a name too long, a map, stream or object body that is not Java-serialized) is
rejected to the dead-letter queue with a log line (the first, then one a
minute); one that cannot be written
(disk full) is requeued and the thread backs off a polling interval. While
DropboxMQ's ``write-lock.properties`` holds the dropbox's writers back
(:class:`~chute.dropbox.flow.WriteLock`), the export waits, with no limit, as a
DropboxMQ producer does, until the lock lets it or the bridge stops; the message
stays in the broker meanwhile. Import reads through a
:class:`~chute.dropbox.queue.QueueConsumer`, which obeys the read locks.

Waking: import waits on a :class:`~chute.dropbox.watch.Watcher` of every
``target/`` it reads (a topic's: its subscription's and ``.incoming``'s),
inotify where available, a scan at least every ``poll_interval_ms``; export
waits on its hand-off queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from chute.core.model.address import Kind, parse
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.dropbox.flow import WriteLock
from chute.dropbox.layout import QueueLayout, init_queue, init_subscription, init_topic
from chute.dropbox.maintenance import recover_layout
from chute.dropbox.mount import Direction, DropboxMount
from chute.dropbox.names import claim_room
from chute.dropbox.queue import ConsumerOptions, Delivery, QueueConsumer, QueueProducer
from chute.dropbox.topic import Distributor, TopicPublisher
from chute.dropbox.watch import Watcher
from chute.errors import ChuteError, ConsumerError, DestinationFull, InvalidMessage
from chute.message import Message

__all__ = ["DropboxBridge"]

log = logging.getLogger("chute.dropbox")

_STOP_TIMEOUT: Final = 10.0
_RESULT_POLL: Final = 0.5
_REFUSALS_LOGGED_EVERY: Final = 60.0


class BridgeHost(Protocol):
    """What a bridge needs of the server around it."""

    @property
    def broker(self) -> Broker: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


@dataclass(slots=True)
class _Import:
    """One imported destination: the dropbox it is read from, and for a topic the
    distributor of its ``.incoming``."""

    address: str
    files: QueueConsumer
    fan_out: Distributor | None = None
    refused: bool = False

    def targets(self) -> list[Path]:
        """The ``target/`` directories whose new files this import takes."""
        found = [self.files.layout.target]
        if self.fan_out is not None:
            found.append(self.fan_out.files.layout.target)
        return found


@dataclass(slots=True)
class _Export:
    address: str
    write: Callable[[Message], object]
    write_lock: WriteLock  # DropboxMQ's flow control of the dropbox written to
    consumer: BrokerConsumer | None = None
    refused_at: float | None = None  # when a refusal was last logged (monotonic)
    unlogged: int = 0  # refusals since then, counted, not logged


class DropboxBridge:
    """One mounted dropbox root. Start and stop it on the server's loop."""

    def __init__(self, server: BridgeHost, mount: DropboxMount) -> None:
        self.server = server
        self.mount = mount
        self.poll_interval = mount.poll_interval_ms / 1000
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._imports: list[_Import] = []
        self._exports: list[_Export] = []
        self._handoff: queue.SimpleQueue[tuple[_Export, BrokerConsumer, Entry] | None] = (
            queue.SimpleQueue()
        )
        self._core: BrokerConnection | None = None
        self._session: BrokerSession | None = None

    # -- lifecycle (on the loop) ------------------------------------------------------

    def start(self) -> None:
        """Create the dropboxes, take back what a previous run left claimed, start.

        Raises:
            InvalidAddress: a directory of the layout resolves outside the root.
            OSError: the root or a dropbox cannot be created.
        """
        mount = self.mount
        # The bridge acts through a core connection of its own, like any client.
        self._core = BrokerConnection(
            self.server.broker,
            self.server.broker.access.as_user(mount.user),
            client_id=f"dropbox:{mount.client}",
            protocol="dropbox",
            peer=str(mount.root),
        )
        self._core.on_closed_by_broker = self._refuse_close
        self._session = self._core.session(AckMode.INDIVIDUAL)
        if mount.direction is Direction.IMPORT:
            self._imports = [self._open_import(address) for address in mount.destinations]
            target = self._run_import
        else:
            self._open_exports()
            target = self._run_export
        self._thread = threading.Thread(
            target=target, name=f"chute-dropbox-{mount.direction.value}", daemon=True
        )
        self._thread.start()
        log.info(
            "dropbox %s %s: %s (client %s)",
            mount.direction.value,
            mount.root,
            ", ".join(mount.destinations),
            mount.client,
        )

    def _refuse_close(self, reason: str) -> None:
        """An operator may not close the bridge's connection: the configuration decides
        its life (its thread would go on with a closed session)."""
        raise ConsumerError(
            f"connection {self._core.id if self._core else '?'} is the DropboxMQ bridge of "
            f"{self.mount.root}: it cannot be closed on its own; remove its mount from the "
            "configuration and restart the broker instead"
        )

    def _open_import(self, address: str) -> _Import:
        """The dropbox ``address`` is imported from, with what a previous run had
        claimed given back (it is imported again, redelivered)."""
        mount = self.mount
        addr = parse(address)
        fan_out: Distributor | None = None
        layout: QueueLayout
        if addr.kind is Kind.TOPIC:
            topic = init_topic(mount.root, addr.name)
            layout = init_subscription(topic, mount.client, mount.client)
            fan_out = Distributor(
                mount.root,
                addr.name,
                client_id=mount.client,
                delete_processed=mount.delete_processed,
            )
            self._warn_restored(
                topic.incoming, fan_out.restored, "fanned out again: a subscriber may get one twice"
            )
        else:
            layout = init_queue(mount.root, addr.name)
        self._warn_restored(
            layout, recover_layout(layout, mount.client), "imported again, marked redelivered"
        )
        options = ConsumerOptions(delete_processed=mount.delete_processed)
        return _Import(address, QueueConsumer(layout, "", mount.client, options=options), fan_out)

    @staticmethod
    def _warn_restored(layout: QueueLayout, restored: list[str], then: str) -> None:
        if restored:
            log.warning(
                "%s: %d file(s) a previous run had claimed go back to target/ (%s)",
                layout.base,
                len(restored),
                then,
            )

    def _open_exports(self) -> None:
        session = self._session
        if session is None:
            raise RuntimeError("start() opens the bridge's session first")
        ids = itertools.count(1)
        for address in self.mount.destinations:
            addr = parse(address)
            # The export waits on DropboxMQ's write lock itself (stoppable, no limit);
            # the lock's own wait is then 0: the race of a lock made just after is a
            # DestinationFull, and the message is delivered again.
            producer: TopicPublisher | QueueProducer
            if addr.kind is Kind.TOPIC:
                producer = TopicPublisher(self.mount.root, addr.name, block_timeout=0)
            else:
                producer = QueueProducer(
                    self.mount.root,
                    addr.name,
                    block_timeout=0,
                    claim_room=claim_room(self.mount.consumers),
                )
            export = _Export(address, producer.send, producer.write_lock)
            receiver = _ExportReceiver(self, export)
            export.consumer = session.consumer(
                next(ids),
                address,
                receiver,
                prefetch=self.mount.batch,
                subscription=self.mount.client if addr.kind is Kind.TOPIC else None,
                durable=addr.kind is Kind.TOPIC,
            )
            self._exports.append(export)

    async def stop(self) -> None:
        """Stop the thread (what it holds is finished or given back), then close the
        core consumer (messages not yet written go back to their queue)."""
        self._stopping.set()
        self._handoff.put(None)
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, _STOP_TIMEOUT)
            if thread.is_alive():
                log.warning("dropbox bridge %s did not stop in time", self.mount.root)
        if self._core is not None:
            self._core.close()
            self._core = None

    # -- import (in the thread) -------------------------------------------------------

    def _run_import(self) -> None:
        targets = [target for item in self._imports for target in item.targets()]
        watcher = Watcher(targets, self.poll_interval)
        try:
            while not self._stopping.is_set():
                moved, failed = 0, False
                for item in self._imports:
                    try:
                        done, ok = self._import_some(item)
                    except OSError as exc:
                        log.error("dropbox import from %s: %s", item.files.layout.base, exc)
                        done, ok = 0, False
                    moved += done
                    failed = failed or not ok
                if failed:
                    self._stopping.wait(self.poll_interval)
                elif not moved:
                    watcher.wait()
        except Exception:  # a bug here must not take the broker down silently
            log.exception("dropbox import thread for %s failed", self.mount.root)
        finally:
            watcher.close()

    def _import_some(self, item: _Import) -> tuple[int, bool]:
        """Fan out a topic's ``.incoming`` (up to ``batch`` files), then claim up to
        ``batch`` files, hand them to the broker, settle the files: (files moved,
        all ok)."""
        fanned = 0 if item.fan_out is None else item.fan_out.run(self.mount.batch)
        moved, ok = self._import_claimed(item)
        return fanned + moved, ok

    def _import_claimed(self, item: _Import) -> tuple[int, bool]:
        claimed: list[Delivery] = []
        while len(claimed) < self.mount.batch and not self._stopping.is_set():
            delivery = item.files.receive()
            if delivery is None:
                break
            claimed.append(delivery)
        if not claimed:
            return 0, True
        messages = [d.message for d in claimed]
        outcome: concurrent.futures.Future[list[BaseException | None]] = concurrent.futures.Future()
        try:
            self.server.loop.call_soon_threadsafe(self._accept, item.address, messages, outcome)
            errors = self._result(outcome)
        except RuntimeError:  # the loop is gone: keep the files for the next start
            log.warning("dropbox import: the broker stopped; %d file(s) stay claimed", len(claimed))
            return 0, False
        moved, refused = 0, None
        for delivery, error in zip(claimed, errors, strict=True):
            try:
                if error is None:
                    moved += 1
                    item.files.ack(delivery)
                else:
                    refused = refused or error
                    item.files.release(delivery)
            except OSError as exc:  # someone moved the claimed file: say so, go on
                log.error("dropbox import: settling %s: %s", delivery.path, exc)
        if refused is not None and not item.refused:  # once per spell, not per poll
            log.warning(
                "dropbox import into %s refused (%s): files stay in target/, retrying",
                item.address,
                refused,
            )
        elif refused is None and item.refused:
            log.info("dropbox import into %s resumed", item.address)
        item.refused = refused is not None
        return moved, refused is None

    def _result(
        self, outcome: concurrent.futures.Future[list[BaseException | None]]
    ) -> list[BaseException | None]:
        while True:
            try:
                return outcome.result(_RESULT_POLL)
            except concurrent.futures.TimeoutError:
                if self.server.loop.is_closed():
                    raise RuntimeError("event loop closed") from None

    def _accept(
        self,
        address: str,
        messages: list[Message],
        outcome: concurrent.futures.Future[list[BaseException | None]],
    ) -> None:
        """On the loop: send each message (carried: its timestamp and delivery count
        are the file's), then answer once the store synced."""
        broker = self.server.broker
        session = self._session
        errors: list[BaseException | None] = []
        for message in messages:
            try:
                if session is None:
                    raise ChuteError("the bridge is stopping")
                session.send(address, message, carried=True)
            except ChuteError as exc:  # full, no such destination, ...
                errors.append(exc)
            except Exception as exc:  # a bug: keep the file, keep the broker
                log.exception("dropbox import: sending to %s failed", address)
                errors.append(exc)
            else:
                errors.append(None)

        def synced(error: BaseException | None) -> None:  # maybe on the store's thread
            if error is not None:
                outcome.set_result([e or error for e in errors])
            else:
                outcome.set_result(errors)

        broker.sync(synced)

    # -- export ------------------------------------------------------------------------

    def _delivered(self, export: _Export, consumer: BrokerConsumer, entry: Entry) -> None:
        """On the loop: a message for the thread to write."""
        self._handoff.put((export, consumer, entry))

    def _run_export(self) -> None:
        try:
            while not self._stopping.is_set():
                item = self._handoff.get()
                if item is None:
                    break
                export, consumer, entry = item
                outcome = self._write(export, entry)
                if outcome == "requeue":
                    self._stopping.wait(self.poll_interval)
                try:
                    self.server.loop.call_soon_threadsafe(
                        self._settle, consumer, entry.seq, outcome
                    )
                except RuntimeError:
                    return  # the loop is gone; the broker redelivers it
        except Exception:
            log.exception("dropbox export thread for %s failed", self.mount.root)

    def _write(self, export: _Export, entry: Entry) -> str:
        message = entry.message
        if message.delivery_count or message.redelivered:
            message = message.replace(delivery_count=0, redelivered=False)
        if not export.write_lock.wait(None, stop=self._stopping):
            return "requeue"  # the bridge stops while the dropbox is write-locked
        try:
            export.write(message)
        except DestinationFull:
            return "requeue"  # write-locked just now
        except InvalidMessage as exc:
            self._log_refusal(export, message, exc.reason)
            return "reject"
        except OSError as exc:
            log.error("dropbox export to %s: %s: will retry", self.mount.root, exc)
            return "requeue"
        return "ack"

    @staticmethod
    def _log_refusal(export: _Export, message: Message, reason: str) -> None:
        """Say why a message is dead-lettered instead of written: the first refusal,
        then at most one line a minute, with how many went unlogged in between."""
        now = time.monotonic()
        if export.refused_at is not None and now - export.refused_at < _REFUSALS_LOGGED_EVERY:
            export.unlogged += 1
            return
        since = f" ({export.unlogged} more since the last such line)" if export.unlogged else ""
        log.warning(
            "dropbox export of %s from %s: %s: to the dead-letter queue%s; further refusals "
            "are counted, not logged, for a minute",
            message.id,
            export.address,
            reason,
            since,
        )
        export.refused_at, export.unlogged = now, 0

    def _settle(self, consumer: BrokerConsumer, seq: int, outcome: str) -> None:
        session = self._session
        if session is None or consumer.closed:
            return
        try:
            if outcome == "ack":
                session.ack(consumer, seq, cumulative=False)
            else:
                session.nack(consumer, seq, requeue=outcome == "requeue")
            session.add_credit(consumer, 1)
        except ChuteError as exc:
            log.warning("dropbox export: settling %d: %s", seq, exc.reason)


class _ExportReceiver:
    """The core pushes export deliveries here (on the loop)."""

    def __init__(self, bridge: DropboxBridge, export: _Export) -> None:
        self.bridge = bridge
        self.export = export

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.bridge._delivered(self.export, consumer, entry)


def start_bridges(server: BridgeHost, mounts: Sequence[DropboxMount]) -> list[DropboxBridge]:
    """Start one bridge per ``[[dropbox]]`` table of the server's configuration."""
    bridges: list[DropboxBridge] = []
    try:
        for mount in mounts:
            bridge = DropboxBridge(server, mount)
            bridge.start()
            bridges.append(bridge)
    except BaseException:
        for bridge in bridges:
            bridge._stopping.set()
            bridge._handoff.put(None)
        raise
    return bridges


async def stop_bridges(bridges: list[DropboxBridge]) -> None:
    for bridge in bridges:
        with contextlib.suppress(Exception):
            await bridge.stop()
