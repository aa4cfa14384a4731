"""The broker process: the core, its store and the listeners around it.

:class:`BrokerServer` owns the event loop's side of chute: it builds the
:class:`~chute.core.rules.broker.Broker`, opens the native TCP listener (``port``), its
TLS twin (``tls_port``), the STOMP ones (``stomp_port``, ``stomp_tls_port``) and
the HTTP one (``http_port``: STOMP over WebSocket, the admin API, metrics;
HTTPS and WSS with ``http_tls``), each unless its port is 0, runs the expiry
sweep, and stops
gracefully: listeners close first, then every connection, so consumers'
unacknowledged messages go back to their queues before the store closes. Every
listener accepts through :mod:`chute.server.listener`, where
:mod:`chute.server.limits` counts and limits every connection (and closes one
that does not log in in time); the TLS listeners share one context (the HTTP
port may ask for client certificates its own way), and every
connection has a front from :mod:`chute.server.accept` (where a handshake's
failure, or TLS spoken to a plain port, is logged). It is the one
implementation of the interfaces its drivers declare
(:class:`~chute.server.stream.ServerHost`, :class:`~chute.dropbox.bridge.BridgeHost`);
nothing imports this module but :mod:`chute.server.process`, which runs it for the
CLI, and the CLI hands it what the HTTP port serves (:class:`~chute.admin.site.Site`,
made with the server: the admin side sits above the server, which never imports it).

Starting: the HTTP listener opens first, and answers only ``/healthz``,
``/readyz`` and ``/metrics`` (everything else: 503) while the store opens and
the broker recovers on a thread of their own, off the loop; nothing else touches
the broker meanwhile (the loop only reads a
:class:`~chute.store.progress.RecoveryProgress`, logs it every few seconds and
shows it on ``/readyz``). Once every queue holds what it held, the other
listeners open and the server is :attr:`BrokerServer.ready`. A node of ``chute serve
--nodes`` (``config.nodes``) opens its HTTP listener with the others: the port is
shared, and the nodes already running answer there while it recovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import signal
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from chute.amqp.entities import restore_declarations
from chute.config import ServerConfig
from chute.core.model.store import Store, TxOp
from chute.core.operations import looking
from chute.core.rules.access import Access, LoginThrottle, PasswordCheck
from chute.core.rules.broker import Broker
from chute.core.rules.destinations import Limits
from chute.dropbox.bridge import DropboxBridge, start_bridges, stop_bridges
from chute.server import smq
from chute.server.accept import Accepting, Front
from chute.server.amqp import AmqpConnection, amqp_refusal
from chute.server.limits import ConnectionLimits
from chute.server.listener import Listener, Refusal, bind
from chute.server.native import NativeConnection, native_refusal
from chute.server.node import ClusterNode
from chute.server.stomp import StompConnection, stomp_refusal
from chute.server.stream import StreamConnection
from chute.server.tls import ProtocolFactory, server_contexts
from chute.server.turns import Contenders
from chute.server.watchdog import LoopWatchdog
from chute.store.journal import Journal
from chute.store.memory import MemoryStore
from chute.store.progress import RecoveryProgress

if TYPE_CHECKING:  # aiohttp is imported only when the HTTP listener is on
    from chute.ha.role import Live
    from chute.server.http import HttpListener, HttpSite
    from chute.server.peers import PeerLinks

    MakeSite = Callable[["BrokerServer"], HttpSite]
    """What the HTTP port serves, made for the server (:class:`chute.admin.site.Site`)."""

log = logging.getLogger("chute.server")

RESOURCE_CHECK_S = 0.1  # how often admission re-reads memory and disk (chute.core.rules.admission)
RECOVERY_LOG_S = 2.0  # how often a recovery under way logs how far it is
_T = TypeVar("_T")
PASSWORD_WORKERS = 2
"""Threads verifying password hashes: each argon2 check takes ~0.1 s of CPU and 64 MiB,
so a flood of logins waits its turn here instead of stalling the loop or the memory."""


class BrokerServer:
    """Not thread-safe: everything runs on ``self.loop`` (but the recovery: see the module
    docstring).

    Given no ``store``, :meth:`start` opens the configured one (off the loop), and
    :attr:`broker` exists from then on; given one, the broker is made at once. With
    ``http_port`` on, :meth:`start` needs ``site``: what the HTTP port serves.
    """

    def __init__(
        self, config: ServerConfig, store: Store | None = None, *, site: MakeSite | None = None
    ) -> None:
        self.config = config
        self._site = site
        self.store: Store | None = store  # None until start() opens the configured one
        self._broker = None if store is None else self._make_broker(store)
        self.recovery = RecoveryProgress()  # read by the loop while recovery runs
        self.ready = False  # recovered, every listener open
        self.connections: set[StreamConnection] = set()
        self.listeners: list[Listener] = []
        self.http: HttpListener | None = None  # http_port: STOMP over WebSocket, admin, metrics
        # every connection, from its accept to its loss
        self.limits = ConnectionLimits(config.limits)
        self.accepting = Accepting()  # connections not yet handed to their driver
        self.contenders = Contenders()  # who else wants the loop, when a turn ends early
        self.tls_context: ssl.SSLContext | None = None  # every TLS listener's (start makes it)
        self.https_context: ssl.SSLContext | None = None  # the HTTP port's (its client certs)
        self.bridges: list[DropboxBridge] = []  # [[dropbox]] mounts (docs/dropbox.md)
        self.node: ClusterNode | None = None  # [cluster]: this broker as a node (docs/cluster.md)
        self.ha: Live | None = None  # this process as its node's live (docs/ha.md)
        self.started = time.time()
        self._stopping: asyncio.Event | None = None
        self._sync_requests: list[Callable[[BaseException | None], None]] = []
        self._sync_seals: list[Callable[[], None]] = []
        self.loop_thread = threading.get_ident()  # where the loop runs (set again in start)
        self._sweeper: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.watchdog: LoopWatchdog | None = None  # start makes it
        self._password_pool: ThreadPoolExecutor | None = None  # made on the first hash login
        self.loop: asyncio.AbstractEventLoop = asyncio.get_event_loop_policy().get_event_loop()

    @property
    def peers(self) -> PeerLinks | None:
        return None if self.node is None else self.node.links

    @property
    def broker(self) -> Broker:
        """The core broker (made once the store is open, in :meth:`start`).

        Raises:
            RuntimeError: the store is not open yet.
        """
        broker = self._broker
        if broker is None:
            raise RuntimeError("the broker is not made yet: start() opens the store first")
        return broker

    def _make_broker(self, store: Store) -> Broker:
        config = self.config
        return Broker(
            store,
            config.resolver(),
            auto_create=config.by_use.auto_create,
            predefined=[a for a in config.destinations if "*" not in a],
            prepared_timeout_ms=config.sessions.prepared_timeout_ms,
            # paging moves memory to the journal: with the memory store it would only copy
            memory_limit=config.memory.max_memory if config.storage.store == "journal" else 0,
            memory_high_watermark=config.memory.high_watermark,
            memory_low_watermark=config.memory.low_watermark,
            block_timeout_ms=config.memory.block_timeout_ms,
            max_subscription_bytes=config.memory.max_subscription_bytes,
            flow_backlog=config.memory.flow_backlog,
            max_cursor_lease_ms=config.sessions.max_cursor_lease_ms,
            dedup_window=config.sessions.dedup_window,
            dedup_producers=config.sessions.dedup_producers,
            limits=Limits(
                config.by_use.max_destinations,
                config.by_use.max_destinations_per_user,
                config.by_use.auto_delete_after_ms,
            ),
            access=Access(
                config.users,
                config.roles,
                throttle=LoginThrottle(
                    config.limits.max_login_failures, config.limits.login_failure_window_ms / 1000
                ),
            ),
        )

    async def start(self) -> list[tuple[str, str, int]]:
        """Open the HTTP listener, recover, open the others; returns (name, host, port)
        of each one actually bound, once the server is ready.

        Raises:
            OSError: a port could not be bound (with the port in the message), or the
                TLS certificate, key or CA file could not be loaded.
            StoreError: the journal could not be opened (in use, the disk full).
            RuntimeError: ``http_port`` is on, but the server was given no ``site``.
        """
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self._stopping = asyncio.Event()
        config = self.config
        if config.tls_listening:
            self.tls_context, self.https_context = server_contexts(config)
        for warning in config.warnings():
            log.warning("configuration: %s", warning)
        # a node of --nodes opens the shared HTTP port once recovered, as the others
        http = await self._listen_http() if config.listen.http_port and not config.nodes else None
        self.watchdog = LoopWatchdog(self.loop, self.loop_thread)
        self.watchdog.start()
        try:
            bound = await self._recover_and_listen(http)
        except BaseException:
            self.watchdog.close()
            await self._close_listeners()
            raise
        self.recovery.finish()
        self.ready = True
        self._sweeper = asyncio.create_task(self._sweep_expired(), name="chute-expiry")
        self._watcher = asyncio.create_task(self._watch_resources(), name="chute-admission")
        return bound

    async def _listen_http(self) -> tuple[str, str, int]:
        """Open the HTTP listener (while recovering it answers health and metrics only)."""
        from chute.server.http import HttpListener, http_refusal  # noqa: PLC0415 - aiohttp

        config = self.config
        if self._site is None:
            raise RuntimeError("http_port is on, but the server was given no site to serve")
        self.http = HttpListener(self, self._site(self))
        https = config.http.tls
        name = "https" if https else "http"
        host, port = await self.http.start(
            lambda server: self._listen(
                name,
                config.listen.http_port,
                self._front(name, server, https, self.https_context),
                None if https else http_refusal,
                budget=True,
            )
        )
        return name, host, port

    async def _close_listeners(self) -> None:
        """Starting failed: close what opened (the store is the caller's to close)."""
        for server in self.listeners:
            server.close()
        if self.http is not None:
            await self.http.stop()

    async def _recover(self) -> None:
        """Open the store and recover the broker off the loop, logging how it goes."""
        progress = self.recovery
        progress.started = time.monotonic()
        store = self.store
        where = (
            f"the journal in {store.directory}"
            if isinstance(store, Journal)
            else f"the journal in {self.config.storage.data_dir / 'journal'}"
            if store is None and self.config.storage.store == "journal"
            else "the memory store (nothing to read)"
        )
        log.info("recovering from %s", where)
        reporter = asyncio.create_task(self._report_recovery(), name="chute-recovery-log")
        try:
            if store is None:
                store = self.store = await _off_loop(lambda: open_store(self.config, progress))
            if self._broker is None:
                self._broker = self._make_broker(store)  # its system queues: defined on the loop
            if isinstance(store, Journal):
                store.on_unstored = self._unstored
            broker = self._broker
            restored = await _off_loop(lambda: broker.recover(progress.restored))
        finally:
            reporter.cancel()
        seconds = time.monotonic() - progress.started
        mib = progress.bytes_read / (1 << 20)
        log.info(
            "recovered %d messages in %d destinations in %.2f s (%.1f MiB read, %.1f MiB/s)",
            restored,
            len(broker.queues) + len(broker.topics),
            seconds,
            mib,
            mib / seconds if seconds > 0 else 0.0,
        )
        if restored:
            release_free_memory()  # recovery's garbage: a paged backlog was decoded whole

    async def _report_recovery(self) -> None:
        """Log how far the recovery is, every ``RECOVERY_LOG_S`` while it runs."""
        while True:
            await asyncio.sleep(RECOVERY_LOG_S)
            log.info("recovering: %s", self.recovery.describe())

    async def _recover_and_listen(
        self, http: tuple[str, str, int] | None
    ) -> list[tuple[str, str, int]]:
        """Recover, then open every listener but the HTTP one (``http``, already open,
        is listed after the TCP ones, where it always was)."""
        config = self.config
        await self._recover()
        restore_declarations(self.broker)  # the x-arguments of durable AMQP queues
        if self.ha is not None and isinstance(self.store, Journal):  # before any client writes
            self.ha.replication.attach(self.store)
        if config.clustered:  # the ledgers taken back before any link is up
            self.node = ClusterNode.make(self)
            if self.ha is not None:
                self.node.lease = self.ha.elector.lease_after
        self.broker.admission.check()  # a full disk waits producers now
        self.bridges = start_bridges(
            self, self.config.dropbox
        )  # before the listeners: a bad mount stops us early
        bound: list[tuple[str, str, int]] = []
        native: ProtocolFactory = lambda: NativeConnection(self)  # noqa: E731
        stomp: ProtocolFactory = lambda: StompConnection(self)  # noqa: E731
        amqp: ProtocolFactory = lambda: AmqpConnection(self)  # noqa: E731
        for name, port, make, tls, refusal in (
            ("native", config.listen.port, native, False, native_refusal),
            ("native-tls", config.listen.tls_port, native, True, None),
            ("stomp", config.listen.stomp_port, stomp, False, stomp_refusal),
            ("stomp-tls", config.listen.stomp_tls_port, stomp, True, None),
            ("amqp", config.listen.amqp_port, amqp, False, amqp_refusal),
            ("amqp-tls", config.listen.amqp_tls_port, amqp, True, None),
            # a node of chute serve --nodes: its own port, besides the shared ones
            (
                "native-node",
                config.nodes.port if config.nodes else 0,
                native,
                False,
                native_refusal,
            ),
        ):
            if port:
                server = self._listen(name, port, self._front(name, make, tls), refusal)
                sock = server.sockets[0].getsockname()
                bound.append((name, sock[0], sock[1]))
        if self.node is not None:
            dialed = "native-tls" if config.cluster.tls else "native"
            native_bound = next(((h, p) for n, h, p in bound if n == dialed), None)
            await self.node.start(native_bound)
        if http is not None:
            bound.append(http)
        elif config.listen.http_port:  # a node of --nodes: the other nodes answered meanwhile
            bound.append(await self._listen_http())
        if self.config.smq is not None:  # Simple-message-queue's source and sink listeners
            self.broker.destination(self.config.smq.queue, create=True)
            for name, port, factory in smq.listeners(self, self.config.smq):
                server = self._listen(name, port, Accepting.plain(name, factory), None)
                host, bound_port = server.sockets[0].getsockname()[:2]
                bound.append((name, host, bound_port))
                log.info(
                    "%s listener for %s on %s:%d", name, self.config.smq.queue, host, bound_port
                )
        return bound

    def _front(
        self,
        name: str,
        factory: ProtocolFactory,
        tls: bool,
        context: ssl.SSLContext | None = None,
    ) -> Front:
        """``factory`` behind :mod:`chute.server.accept`'s front: the handshake on a TLS
        listener (``context``, by default every TLS listener's), the check for TLS
        spoken to a plain one."""
        if not tls:
            return self.accepting.plain(name, factory)
        context = context or self.tls_context
        if context is None:
            raise RuntimeError("no TLS context: start() makes it before the listeners")
        return self.accepting.tls(name, factory, context)

    def _listen(
        self,
        name: str,
        port: int,
        front: Front,
        refusal: Refusal | None,
        *,
        budget: bool = False,
    ) -> Listener:
        """Listen on ``host:port`` through the accept loop every listener shares
        (:mod:`chute.server.listener`: the connection limits, running out of descriptors)."""
        host = self.config.listen.host
        try:  # the nodes of chute serve --nodes share every client port
            sockets = bind(
                host, port, reuse_port=self.config.nodes is not None and name != "native-node"
            )
        except OSError as exc:
            hint = " (is another broker running?)" if exc.errno == errno.EADDRINUSE else ""
            raise OSError(
                exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}{hint}"
            ) from None
        listener = Listener(name, sockets, front, self.limits, refusal=refusal, budget=budget)
        listener.start()
        self.listeners.append(listener)
        return listener

    def request_sync(
        self,
        callback: Callable[[BaseException | None], None],
        seal: Callable[[], None] | None = None,
    ) -> None:
        """``callback(error)`` once everything recorded so far is durable (maybe on the
        store's thread, or on the loop's before this returns to it).

        Requests are gathered until the loop's ready callbacks ran (so the producers
        whose data arrived together share one fsync), then either synced right here
        when the journal's writer is idle (``inline_sync``: a lone producer waits for
        one fsync and no thread hand-off), or handed to the writer thread. ``seal``
        is called when the requests are taken, just before the sync is asked for:
        a connection gathering its own answers under one request stops adding to it
        then (what it records later may not be covered).
        """
        self._sync_requests.append(callback)
        if seal is not None:
            self._sync_seals.append(seal)
        if len(self._sync_requests) == 1:
            self.loop.call_soon(self._sync_gathered)

    def verify_password(self, check: PasswordCheck, done: Callable[[], None]) -> None:
        """Run ``check`` on a worker thread (argon2 releases the GIL), then ``done()`` on
        the loop."""
        if self._password_pool is None:
            self._password_pool = ThreadPoolExecutor(
                PASSWORD_WORKERS, thread_name_prefix="chute-password"
            )

        def verified(future: asyncio.Future[None]) -> None:
            if not future.cancelled() and future.exception() is not None:
                log.error("verifying a password failed: %s", future.exception())
            done()  # without a result the core verifies on the loop itself

        self.loop.run_in_executor(self._password_pool, check.run).add_done_callback(verified)

    def _sync_gathered(self) -> None:
        requests, self._sync_requests = self._sync_requests, []
        seals, self._sync_seals = self._sync_seals, []
        self.contenders.sync_started()
        for seal in seals:
            seal()
        if self.config.storage.inline_sync and self.broker.store.sync_inline(requests):
            return
        for callback in requests:
            self.broker.sync(callback)

    def _unstored(self, ops: list[TxOp]) -> None:
        """The journal refused ``ops`` (on its writer's thread, or on this loop's in an inline
        sync) and is about to fail the syncs that cover them: the broker takes their
        messages back first, so no held delivery of one goes out (``chute.core.rules.unstored``)."""
        if threading.get_ident() == self.loop_thread:
            self.broker.unstored(ops)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.broker.unstored, ops)

    async def _sweep_expired(self) -> None:
        interval = max(self.config.sessions.expiry_interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                count = self.broker.expire_due()
            except Exception:  # a bug in the sweep must not end the broker
                log.exception("expiry sweep failed")
                continue
            if count:
                log.debug("expired %d messages", count)

    async def _watch_resources(self) -> None:
        """Re-evaluate the broker's memory and the journal's free space a few times a
        second: admission opens (waiting producers go on) once both allow."""
        admission = self.broker.admission
        while True:
            await asyncio.sleep(RESOURCE_CHECK_S)
            try:
                admission.check()
            except Exception:  # a bug here must not end the broker
                log.exception("checking memory and disk failed")

    def stats(self) -> dict[str, Any]:
        stats = looking.stats(self.broker)
        stats["sockets"] = self.limits.stats()
        stats["uptime_s"] = round(time.time() - self.started, 1)
        return stats

    def request_stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    def handle_signals(self) -> None:
        """SIGTERM and SIGINT stop the broker gracefully (before anyone is told it listens)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(sig, self.request_stop)

    async def serve_until_stopped(self) -> None:
        if self._stopping is None:
            raise RuntimeError("start() the server before serving")
        self.handle_signals()
        await self._stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        """Stop accepting, close every connection (unacked messages go back), close the store."""
        self.ready = False  # /readyz: stopping
        log.info(
            "stopping: closing %d listeners and %d connections",
            len(self.listeners),
            len(self.connections),
        )
        await stop_bridges(self.bridges)  # their files settled while the broker still runs
        if self.node is not None:  # the others stop sending here first
            await self.node.stop()
        for server in self.listeners:
            server.close()
        self.accepting.close()  # handshakes under way, connections that never spoke
        for conn in list(self.connections):
            conn.flush()
            if conn.transport is not None:
                conn.transport.close()
        for server in self.listeners:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await server.wait_closed()
        if self.http is not None:
            await self.http.stop()  # its WebSockets' STOMP connections end here
        for conn in list(self.connections):  # transports that did not report connection_lost
            conn.connection_lost(None)
        if self.watchdog is not None:
            self.watchdog.close()
        for task in (self._sweeper, self._watcher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.limits.close()
        if self._password_pool is not None:
            self._password_pool.shutdown(wait=False, cancel_futures=True)
        self.contenders.close()
        if self._broker is not None:
            self._broker.close()
        log.info("stopped")


def open_store(config: ServerConfig, progress: RecoveryProgress | None = None) -> Store:
    """The store the configuration asks for: the journal in ``data_dir`` by default
    (``progress`` follows its recovery).

    Raises:
        StoreError: the journal's directory is locked by another broker; DiskFull: its
            disk cannot hold one more segment.
        OSError: the data directory cannot be created.
    """
    if config.storage.store == "memory":
        return MemoryStore()
    return Journal(
        config.storage.data_dir / "journal",
        sync=config.storage.sync,
        batch_ms=config.storage.sync_batch_ms,
        segment_size=config.storage.segment_size,
        disk_free_limit=config.storage.disk_free_limit,
        progress=progress,
    )


async def _off_loop(work: Callable[[], _T]) -> _T:
    """``work()`` on a thread of its own, awaited on the loop (which meanwhile serves).

    A daemon thread, not an executor's: a broker stopped during a long recovery
    exits without waiting for it.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def succeeded(result: _T) -> None:
        if not future.done():
            future.set_result(result)

    def failed(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop as it is
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(failed, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(succeeded, result)

    threading.Thread(target=run, name="chute-recovery", daemon=True).start()
    return await future


def release_free_memory() -> None:
    """Give the C allocator's free pages back to the system (glibc's ``malloc_trim``).

    Message bodies live in malloc'd blocks; after recovery frees a large backlog's
    decoded copies (the queues keep only what fits in ``max_memory``), glibc
    keeps the freed heap unless asked. Elsewhere this does nothing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return
