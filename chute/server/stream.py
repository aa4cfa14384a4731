"""What every protocol driver over a byte stream shares (native, STOMP, later WebSocket).

A :class:`StreamConnection` owns the transport side of one client: its
lifecycle, the output queue written with one ``transport.write`` per loop
iteration (a write per message would cost a syscall per message), back
pressure (reading pauses while the transport's write buffer is full), the
hop back onto the event loop when the store's sync calls back from its
writer thread, and the wait of a send under the ``block`` overflow policy
(reading pauses and later input waits, so the client's order is kept).

Delivery marks: a persistent message delivered for an ack must come back
``redelivered`` after a crash, so its delivery mark (``Store.delivered``)
must be durable before the delivery leaves. A driver calls
:meth:`mark_delivery` after queueing such a delivery; the next flush then
asks the store for a sync first and writes once it calls back, holding
everything queued behind it, so the client's order is kept. One sync covers
every delivery of a flush, and the store groups it with the producers'.

Subclasses parse their protocol in :meth:`_process` and write encoded bytes
with :meth:`queue_bytes`. Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from chute.core.broker import WouldBlock
from chute.core.queue import QueueChannel
from chute.core.session import Connection
from chute.errors import ChuteError, DestinationFull

if TYPE_CHECKING:
    from chute.server.app import BrokerServer

log = logging.getLogger("chute.server")

FLOW_MAX_PAUSE = 0.5  # seconds: a flow-control pause never lasts longer than this

SyncedCallback = Callable[[BaseException | None], None]
Retry = Callable[[ChuteError | None], None]
"""Called when a blocked send may go again (None) or gave up (the error to report)."""


class StreamConnection(asyncio.Protocol):
    """One client's transport plumbing; see the module docstring."""

    protocol_name = "native"  # for log lines

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.broker = server.broker
        self.transport: asyncio.Transport | None = None
        self.core: Connection | None = None
        self.peer = "?"
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._last_mark = -1  # index in _out of the last delivery whose mark is not yet durable
        self._held = 0  # leading items of _out waiting for a sync of their marks
        self._sync_batch: list[SyncedCallback] | None = None  # then()s awaiting one sync
        self._closing = False
        self._blocked = False  # a send waits for room under the block policy
        self._flow_paused = False  # producer flow control: a destination's backlog is high
        self._flow_timer: asyncio.TimerHandle | None = None
        self._paused = False  # the transport's write buffer is full
        self._last_read = self._last_write = time.monotonic()
        self._heartbeat: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.server.connections.add(self)
        log.debug("%s connection from %s", self.protocol_name, self.peer)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._flow_timer is not None:
            self._flow_timer.cancel()
        self.server.connections.discard(self)
        if self.core is not None:
            self.core.close()  # in-flight messages go back; open transactions roll back
            log.info("%s client %s (%s) disconnected", self.protocol_name, self.core.id, self.peer)
        self.transport = None

    def pause_writing(self) -> None:
        self._paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if (
            self.transport is not None
            and not self._blocked
            and not self._flow_paused
            and not self._closing
        ):
            self.transport.resume_reading()
        self._writable()

    # -- for subclasses ---------------------------------------------------------------

    def _process(self) -> None:
        """Handle every whole unit of input buffered (unless a blocked send holds us)."""
        raise NotImplementedError

    def _writable(self) -> None:
        """The transport takes writes again, or a flush just went out."""

    def queue_bytes(self, data: bytes) -> None:
        """Write ``data`` with everything else queued in this loop iteration."""
        self._out.append(data)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.server.loop.call_soon(self.flush)

    def mark_delivery(self) -> None:
        """The item just queued is a delivery whose mark must be durable before it leaves."""
        self._last_mark = len(self._out) - 1

    def flush(self, *, force: bool = False) -> None:
        """Write everything queued, in one write (after a sync, if deliveries are marked)."""
        self._flush_scheduled = False
        out = self._out
        if not force:
            if self._held:
                return  # a sync is on its way: everything waits, in order
            if self._last_mark >= 0:
                self._held = len(out)
                self._last_mark = -1
                self._after_sync(self._marks_synced)
                return
        else:
            self._held = 0
            self._last_mark = -1
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(data)
                self._last_write = time.monotonic()
        self._writable()

    def _marks_synced(self, error: BaseException | None) -> None:
        if error is not None:
            log.warning(
                "%s %s: delivery marks not durable (%s); delivering anyway",
                self.protocol_name,
                self.peer,
                error,
            )
        held, self._held = self._held, 0
        if not held:
            return  # a forced flush already wrote them
        out = self._out
        data = b"".join(out[:held])
        del out[:held]
        if self._last_mark >= 0:
            self._last_mark -= held
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self._last_write = time.monotonic()
        if out:
            self.flush()
        else:
            self._writable()

    def _close_after_flush(self) -> None:
        self._closing = True
        self.flush(force=True)
        if self.transport is not None:
            self.transport.close()

    def _after_sync(self, then: SyncedCallback) -> None:
        """Run ``then(error)`` on the loop once everything recorded so far is durable.

        The ``then``s of one loop iteration share one sync request and run together,
        in order; what they queue goes out in one flush after the last of them (a
        producer pipelining persistent sends gets its confirmations in one write).
        """
        batch = self._sync_batch
        if batch is None:
            batch = self._sync_batch = []
            server = self.server
            loop = server.loop

            def synced(error: BaseException | None) -> None:  # maybe on the store's thread
                if threading.get_ident() == server.loop_thread:
                    self._synced(batch, error)
                elif not loop.is_closed():
                    loop.call_soon_threadsafe(self._synced, batch, error)

            server.request_sync(synced, self._seal_sync)
        batch.append(then)

    def _seal_sync(self) -> None:
        self._sync_batch = None

    def _synced(self, thens: list[SyncedCallback], error: BaseException | None) -> None:
        # A closing connection still gets its last answers (a DISCONNECT's receipt);
        # only a lost transport has no one left to answer.
        if self.transport is None:
            return
        for then in thens:
            then(error)
        self.flush()

    def _block_until_room(self, exc: WouldBlock, retry: Retry) -> None:
        """Hold this connection until ``exc.address`` has room or ``exc.timeout_ms`` passes."""
        self._blocked = True
        if self.transport is not None:
            self.transport.pause_reading()
        loop = self.server.loop
        timer: asyncio.TimerHandle | None = None

        def wake() -> None:
            if timer is not None:
                timer.cancel()
            loop.call_soon(self._unblock, retry, None)

        def give_up() -> None:
            self.broker.cancel_wait(exc.address, wake)
            reason = f"{exc.reason}; no room within {exc.timeout_ms} ms (overflow = block)"
            self._unblock(retry, DestinationFull(reason))

        self.broker.wait_for_room(exc.address, wake)
        timer = loop.call_later(exc.timeout_ms / 1000, give_up)

    def _unblock(self, retry: Retry, error: ChuteError | None) -> None:
        if self._closing:
            return
        self._blocked = False
        retry(error)  # may block again
        if not self._blocked and not self._closing:
            if self.transport is not None and not self._paused and not self._flow_paused:
                self.transport.resume_reading()
            self._process()

    # -- producer flow control ---------------------------------------------------------

    def _check_flow(self) -> None:
        """After a read: pause reading while a queue this client just sent to holds a backlog
        past ``flow_backlog`` although it has consumers (they cannot keep up).

        The client's sends then wait in TCP buffers instead of in the broker's memory and
        journal, and the consumers get the CPU. Never for a queue this connection itself
        consumes from (its acks must still be read); at most ``FLOW_MAX_PAUSE`` at a time.
        """
        pressure = self.broker.pressure
        if not pressure:
            return
        queues = list(dict.fromkeys(pressure))
        pressure.clear()
        if self._flow_paused or self._closing or self.transport is None or self.core is None:
            return
        own = {id(c) for s in self.core.sessions for c in s.consumers.values()}
        queues = [q for q in queues if not any(id(c) in own for c in q.router.consumers)]
        if not queues:
            return
        self._flow_paused = True
        self.transport.pause_reading()
        waiting = set(queues)

        def relieved(queue: QueueChannel) -> None:
            waiting.discard(queue)
            if not waiting:
                self._end_flow_pause()

        for queue in queues:
            queue.flow_waiters.append(functools.partial(relieved, queue))
        self._flow_timer = self.server.loop.call_later(FLOW_MAX_PAUSE, self._end_flow_pause)

    def _end_flow_pause(self) -> None:
        if not self._flow_paused:
            return
        self._flow_paused = False
        if self._flow_timer is not None:
            self._flow_timer.cancel()
            self._flow_timer = None
        if (
            self.transport is not None
            and not self._paused
            and not self._blocked
            and not self._closing
        ):
            self.transport.resume_reading()
