"""What every protocol driver over a byte stream shares (native, STOMP, Simple-message-queue;
over TCP, TLS, a WebSocket or HTTP requests).

A :class:`StreamConnection` owns the transport side of one client: its
lifecycle, the output queue written with one ``transport.write`` per loop
iteration (a write per message would cost a syscall per message), back
pressure (reading pauses while the transport's write buffer is full), the
hop back onto the event loop when the store's sync calls back from its
writer thread, and the wait of a send under the ``block`` overflow policy
(reading pauses and later input waits, so the client's order is kept).

Delivery marks: a persistent delivery leaves only once its mark is durable
(:meth:`mark_delivery`; the rules are in :mod:`chute.server.marks`).

Reading: whether the connection reads is one explicit state, the set of
:class:`Hold` reasons that stop it (a full write buffer, a send blocked for
room, producer flow control (:mod:`chute.server.flow`), closing, a password being
verified, a turn used up);
:meth:`_hold` and :meth:`_release` change it and :meth:`_decide_reading` alone pauses
or resumes the transport.

Turns: a connection acts on its input in turns (:meth:`_may_act`), and yields the
loop as soon as another connection has input or a sync's answer waits to hop onto
the loop (the rules are in :mod:`chute.server.turns`).

What every protocol shares besides: the login (a :class:`~chute.server.login.Login`:
the core's one gate, a password hash verified off the loop while input waits),
what changes once a client logged in (:meth:`_past_login`: its connection's
:class:`~chute.server.limits.Ticket` stops the login deadline, and the codec
takes frames up to ``max_packet_size`` instead of ``max_login_frame_size``),
closing with the protocol's error when a limit says so (:meth:`close_with_error`),
and its :class:`~chute.server.liveness.Liveness` (heart-beats, and for a client
without them ``idle_timeout_ms``).

Subclasses parse their protocol in :meth:`_process` and write encoded bytes
with :meth:`queue_bytes`. What a driver needs of the server around it is
:class:`~chute.server.host.ServerHost`. Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Final, cast

from chute.core.model.consumer import BrokerConsumer, Entry
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.connlog import CONNECTIONS
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError
from chute.server.flow import ProducerFlow
from chute.server.host import Retry, ServerHost, SyncedCallback
from chute.server.limits import Ticket
from chute.server.liveness import Liveness
from chute.server.login import Login
from chute.server.marks import DeliveryMarks
from chute.server.tls import certificate_user
from chute.server.turns import ASKING_S, TURN_BUFFER, TURN_LOOK, TURN_S

log = logging.getLogger("chute.server")


class Hold:
    """Why a connection does not read now, as bits of one int (reading resumes once none
    is left). Plain ints, not an ``enum.Flag``: :attr:`StreamConnection.acting` is
    asked once per packet, and a Flag's ``&`` costs a Python call."""

    WRITE_BUFFER_FULL: Final = 1  # the transport's write buffer is full: the peer is slow
    BLOCKED_SEND: Final = 2  # a send waits for room (overflow = block); later input waits
    FLOW_CONTROL: Final = 4  # a destination this client sends to has a backlog
    CLOSING: Final = 8  # the connection ends: nothing more is read or acted on
    LOGIN: Final = 16  # its password is being verified off the loop; later input waits
    TURN: Final = 32  # it used its turn of the loop; the rest waits for its next turn
    LINK_BACKLOG: Final = 64  # a cluster link's answers wait on the store (chute.server.peers)


DELIVERY_BATCH: Final = 1 << 20
"""Bytes of deliveries a connection queues before they are written (then its consumers
wait for the write): a loop iteration's worth for a fast client, a bound for any."""

NOT_ACTING: Final = Hold.BLOCKED_SEND | Hold.CLOSING | Hold.LOGIN | Hold.TURN
"""Holds under which input already read waits too (only reading stops for the others)."""
_NOT_WRITABLE: Final = Hold.WRITE_BUFFER_FULL | Hold.CLOSING


class StreamConnection(asyncio.Protocol):
    """One client's transport plumbing; see the module docstring."""

    protocol_name = "native"  # for log lines

    def __init__(self, server: ServerHost) -> None:
        self.server = server
        self.broker = server.broker
        self.transport: asyncio.Transport | None = None
        self.core: BrokerConnection | None = None
        self.peer = "?"
        self.certificate_user: str | None = None
        """The user a verified TLS client certificate names (set as the connection is made)."""
        self.ticket: Ticket | None = None
        """What the connection limits know of this connection (None: not accepted by a
        listener, as in tests; a WebSocket's is its HTTP connection's)."""
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._marks = DeliveryMarks()  # of deliveries in _out
        self._delivering = 0  # bytes of deliveries queued since the last write
        self._deliveries_held = False  # the core holds this connection's consumers
        self._sync_waiters: list[SyncedCallback] | None = None  # then()s awaiting one sync
        self._holds = 0  # Hold bits
        self._reading = True  # what the transport was last told
        self._turn_fresh = False  # the turn running has not acted yet
        self._look_at = 0.0  # when the turn running next asks who else wants the loop
        self._fd = -1  # the socket's, watched by the server's Contenders (-1: none)
        self._watched = False
        self._asked_at = time.monotonic()  # when it last asked for an answer (a login will)
        self.flow = ProducerFlow(
            server.loop,
            functools.partial(self._hold, Hold.FLOW_CONTROL),
            functools.partial(self._release, Hold.FLOW_CONTROL),
        )
        self.liveness = Liveness(self, server.loop, server.config.sessions.idle_timeout_ms / 1000)
        self._login = Login(self, server)

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.certificate_user = certificate_user(self.transport)
        sock = self.transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        self._decide_reading()  # its socket is watched from now on
        if self.ticket is None:
            self.ticket = self.server.limits.ticket_of(transport)
        if self.ticket is not None:
            self.ticket.driver = self
        self.server.connections.add(self)
        log.debug("%s connection from %s", self.protocol_name, self.peer)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._holds |= Hold.CLOSING
        self.liveness.stop()
        self.flow.stop()
        self.server.connections.discard(self)
        if self._watched:
            self._watched = False
            self.server.contenders.unwatch(self._fd)
        if self.core is not None:
            self.core.close()  # in-flight messages go back; open transactions roll back
            CONNECTIONS.disconnected(log, self.core.id, protocol=self.protocol_name, peer=self.peer)
        self.transport = None
        self.drop_unfinished()
        self.server.limits.partial.forget(self)

    def drop_unfinished(self) -> None:
        """Drop the input not acted on (the connection closes): what a frame begun holds
        goes now, not when the garbage collector breaks the connection's cycles. A
        driver whose codec buffers input drops it here."""

    def unfinished(self) -> int:
        """Bytes received and not acted on yet (a packet or frame in progress, mostly)."""
        return self._buffered()

    def pause_writing(self) -> None:
        self._hold(Hold.WRITE_BUFFER_FULL)
        self._decide_delivering()

    def resume_writing(self) -> None:
        self._release(Hold.WRITE_BUFFER_FULL)
        self._decide_delivering()
        self._writable()

    # -- how much is delivered before it is written ----------------------------------------

    def note_delivery(self, size: int) -> None:
        """A delivery of ``size`` bytes was queued: past :data:`DELIVERY_BATCH` bytes
        queued and not written, the core stops delivering to this connection until they
        are (credit alone would let a client that grants much make the broker buffer
        all of it at once)."""
        self._delivering += size
        if self._delivering > DELIVERY_BATCH and not self._deliveries_held:
            self._decide_delivering()

    def _wrote(self) -> None:
        """Queued output went to the transport."""
        self._delivering = 0
        if self._deliveries_held:
            self._decide_delivering()

    def _decide_delivering(self) -> None:
        """Hold or release this connection's consumers: held while the transport cannot
        write more or a batch of deliveries waits to be written."""
        held = bool(self._holds & Hold.WRITE_BUFFER_FULL) or self._delivering > DELIVERY_BATCH
        if held is not self._deliveries_held and self.core is not None:
            self._deliveries_held = held
            self.core.hold_deliveries(held)

    # -- the read state ---------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """The connection is ending: nothing more is read or acted on."""
        return bool(self._holds & Hold.CLOSING)

    @property
    def acting(self) -> bool:
        """Input already read may be acted on (no send is blocked, not closing)."""
        return not self._holds & NOT_ACTING

    @property
    def between_turns(self) -> bool:
        """It yielded the loop with input left to act on, in its next turn."""
        return bool(self._holds & Hold.TURN)

    @property
    def writable(self) -> bool:
        """The transport takes writes (its buffer is not full) and the connection is open."""
        return not self._holds & _NOT_WRITABLE

    def _turn(self) -> float:
        """Start a turn: when it ends at the latest (``time.perf_counter()``). A turn
        always acts on its first unit of input, so every turn makes progress."""
        self._turn_fresh = True
        now = time.perf_counter()
        self._look_at = now + TURN_LOOK
        return now + TURN_S

    def _may_act(self, turn_ends: float) -> bool:
        """Whether to act on the next unit of input now: :attr:`acting`, and the turn that
        ends at ``turn_ends`` is not over, nor anyone else waiting for the loop (asked
        every ``TURN_LOOK``). Else the connection yields (``Hold.TURN``): its next turn
        comes in the loop's next iteration, after every other connection ready now had
        its own, and meanwhile it reads on only while it buffers little."""
        if self._holds & NOT_ACTING:
            return False
        if self._turn_fresh:
            self._turn_fresh = False
            return True
        now = time.perf_counter()
        if now < turn_ends:
            if now < self._look_at:
                return True
            if not self.server.contenders.waiting(self._fd):
                self._look_at = now + TURN_LOOK
                return True
        self._holds |= Hold.TURN
        self._decide_reading()
        self.server.loop.call_soon(self._next_turn)
        return False

    def _next_turn(self) -> None:
        if not self._holds & Hold.TURN or self.closing:
            return
        if self.server.contenders.due(self._fd):
            self.server.loop.call_soon(self._next_turn)  # after the syncs and answers
            return
        self._holds &= ~Hold.TURN
        self._act()
        self._decide_reading()

    def _act(self) -> None:
        """Act on the input buffered (after a read, or in a new turn): now, or, while
        the connection waits for its next turn, only decide whether it reads on. Then
        producer flow control: what it sent may have made a backlog; and whether its
        socket is still watched (:data:`~chute.server.turns.ASKING_S`)."""
        if self._holds & Hold.TURN:
            self._decide_reading()
            return
        self._process()
        self._check_flow()
        self._decide_reading()

    def _check_flow(self) -> None:
        """Producer flow control after a turn (:mod:`chute.server.flow`)."""
        live = not self._holds & Hold.CLOSING and self.transport is not None
        self.flow.check(self.broker, self.core if live else None)

    def _asked(self) -> None:
        """The input just acted on waits for an answer: for a while, this client's next
        input ends the turn of a connection acting (:mod:`chute.server.turns`)."""
        self._asked_at = time.monotonic()

    def _hold(self, reason: int) -> None:
        self._holds |= reason
        self._decide_reading()

    def _release(self, reason: int) -> None:
        self._holds &= ~reason
        self._decide_reading()

    def _decide_reading(self) -> None:
        """Pause or resume the transport's reading to match the holds: the one place that
        tells the transport."""
        transport = self.transport
        holds = self._holds
        reading = not holds or (holds == Hold.TURN and self._buffered() <= TURN_BUFFER)
        watched = (  # its input makes the one acting yield
            not holds and self._fd >= 0 and time.monotonic() - self._asked_at < ASKING_S
        )
        if watched is not self._watched:
            self._watched = watched
            if watched:
                self.server.contenders.watch(self._fd)
            else:
                self.server.contenders.unwatch(self._fd)
        if reading is self._reading or transport is None or transport.is_closing():
            return
        self._reading = reading
        if reading:
            transport.resume_reading()
        else:
            transport.pause_reading()

    # -- what every protocol shares -----------------------------------------------------

    def _past_login(self) -> None:
        """The client logged in (or, on a listener without logins, connected): its
        ticket stops the login deadline, the codec takes ``max_packet_size``, and an
        idle client may be closed (``idle_timeout_ms``)."""
        if self.ticket is not None:
            self.ticket.logged_in()
        self._lift_login_limit()
        self.liveness.watch_idle()

    def _lift_login_limit(self) -> None:
        """Let the codec take packets or frames up to ``max_packet_size`` (until login
        it took ``max_login_frame_size``: :attr:`LimitSettings.login_frame_size`)."""

    def close_with_error(self, code: str, reason: str) -> None:
        """Tell the client ``reason`` in this protocol's error and close (a limit: the
        login deadline, too much before login, idle); see :class:`LoginDriver`."""
        if self.closing or self.transport is None:
            return
        self._holds |= Hold.CLOSING
        error = self._error_bytes(code, reason)
        if error:
            self._out.append(error)
        self._close_after_flush()

    def closed_by_broker(self, reason: str) -> None:
        """The broker closes this client's connection (an operator did:
        :func:`chute.core.operations.manage.close_connection`): say ``reason`` and close. The
        broker closes the core connection itself."""
        self.close_with_error("connection-closed", reason)

    def _error_bytes(self, code: str, reason: str) -> bytes:
        """A connection-level error in this protocol (b"": it has none)."""
        return b""

    def _log_protocol_error(self, reason: str, code: str) -> None:
        """A protocol violation, logged once per flood while the client is not logged in
        (anyone can send garbage), else each time."""
        if self.core is None:
            self.server.limits.error_before_login(self.peer, self.protocol_name, reason, code)
        else:
            log.warning(
                "%s protocol error from %s: %s (%s); closing",
                self.protocol_name,
                self.peer,
                reason,
                code,
            )

    # -- what its Login needs (chute.server.login.LoggingIn) --------------------------

    def hold_for_login(self) -> None:
        self._hold(Hold.LOGIN)

    def login_verified(self, again: Callable[[], None]) -> None:
        self._holds &= ~Hold.LOGIN
        again()
        if self.acting:
            self._decide_reading()
            self._process()
        else:
            self.flush()

    def logged_in(self, core: BrokerConnection) -> None:
        self.core = core
        core.on_closed_by_broker = self.closed_by_broker
        self._past_login()

    # -- what its Liveness needs (chute.server.liveness.Watched) ----------------------

    @property
    def gone(self) -> bool:
        return self.closing or self.transport is None

    @property
    def on_hold(self) -> bool:
        return bool(self._holds)

    @property
    def blocked(self) -> bool:
        """Not read because its producer waits: a send waits for room (the broker's memory
        or disk, a destination with ``overflow = "block"``) or for consumers to catch up
        with its backlog (flow control). What the admin API counts as blocked."""
        return bool(self._holds & (Hold.BLOCKED_SEND | Hold.FLOW_CONTROL))

    @property
    def input_held(self) -> bool:
        # what the broker holds it for (a send waiting for room, flow control, a login):
        # not a full write buffer, which a dead client causes too
        return bool(self._holds & ~(Hold.WRITE_BUFFER_FULL | Hold.CLOSING))

    def write_heartbeat(self) -> None:
        self._out.append(self._heartbeat_bytes())
        self.flush()

    def give_up(self, silent_for: float) -> None:
        log.warning(
            "%s client %s sent nothing for %.1f s; closing",
            self.protocol_name,
            self.core.id if self.core else self.peer,
            silent_for,
        )
        if self.transport is not None:
            self.transport.abort()

    def close_idle(self, quiet: float) -> None:
        self.server.limits.idle_closed(self.peer, self.protocol_name, quiet)
        self.close_with_error(
            "idle-timeout",
            f"nothing sent or received for {quiet:.0f} s (server.idle_timeout_ms)",
        )

    def _heartbeat_bytes(self) -> bytes:
        """One heart-beat in this protocol."""
        raise NotImplementedError

    # -- for subclasses ---------------------------------------------------------------

    def _process(self) -> None:
        """Handle the whole units of input buffered, in turns: ``while
        self._may_act(turn_ends)``, with ``turn_ends = self._turn()`` taken first."""
        raise NotImplementedError

    def _buffered(self) -> int:
        """Bytes of input read but not handled yet."""
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

    def mark_delivery(self, consumer: BrokerConsumer, entry: Entry) -> None:
        """The item just queued is the delivery of ``entry`` to ``consumer``, whose mark
        must be durable before it leaves."""
        self._marks.mark(len(self._out) - 1, consumer, entry)

    def flush(self, *, force: bool = False) -> None:
        """Write everything queued, in one write (after a sync, if deliveries are marked)."""
        self._flush_scheduled = False
        out = self._out
        if not force:
            if self._marks.held:
                return  # a sync is on its way: everything waits, in order
            if self._marks.unsynced:
                self._marks.hold(len(out))
                self._after_sync(self._marks_synced)
                return
        else:
            self._marks.forget()
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(data)
                self.liveness.last_write = time.monotonic()
            self._wrote()
        self._writable()

    def _marks_synced(self, error: BaseException | None) -> None:
        out = self._out
        released = self._marks.release(out)
        if released is None:
            return  # a forced flush already wrote them
        data, dropped = released
        if error is not None:
            log.warning(
                "%s %s: delivery marks not durable (%s); delivering the stored messages "
                "anyway, dropping %d deliveries of messages that were not stored",
                self.protocol_name,
                self.peer,
                error,
                dropped,
            )
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.liveness.last_write = time.monotonic()
        self._wrote()
        if out:
            self.flush()
        else:
            self._writable()

    def _close_after_flush(self) -> None:
        self._holds |= Hold.CLOSING
        self.flush(force=True)
        if self.transport is not None:
            self.transport.close()

    def _after_sync(self, then: SyncedCallback) -> None:
        """Run ``then(error)`` on the loop once everything recorded so far is durable.

        The ``then``s of one loop iteration share one sync request and run together,
        in order; what they queue goes out in one flush after the last of them (a
        producer pipelining persistent sends gets its confirmations in one write).
        """
        batch = self._sync_waiters
        if batch is None:
            batch = self._sync_waiters = []
            server = self.server
            loop = server.loop
            contenders = server.contenders

            def synced(error: BaseException | None) -> None:  # maybe on the store's thread
                if threading.get_ident() == server.loop_thread:
                    self._synced(batch, error)
                elif not loop.is_closed():
                    contenders.hop_coming()  # the connection acting now yields to it
                    loop.call_soon_threadsafe(self._hopped, batch, error)

            server.request_sync(synced, self._seal_sync)
            contenders.sync_asked(self._fd)
        batch.append(then)

    def _seal_sync(self) -> None:
        self._sync_waiters = None

    def _hopped(self, thens: list[SyncedCallback], error: BaseException | None) -> None:
        self.server.contenders.hop_arrived()
        self._synced(thens, error)

    def _synced(self, thens: list[SyncedCallback], error: BaseException | None) -> None:
        # A closing connection still gets its last answers (a DISCONNECT's receipt);
        # only a lost transport has no one left to answer.
        if self.transport is None:
            return
        for then in thens:
            then(error)
        self.flush()

    def _block_until_room(self, exc: WouldBlock, retry: Retry) -> None:
        """Hold this connection until ``exc.address`` has room (the whole broker, for no
        address: its memory or disk, :mod:`chute.core.rules.admission`) or ``exc.timeout_ms``
        passes."""
        self._hold(Hold.BLOCKED_SEND)
        loop = self.server.loop
        timer: asyncio.TimerHandle | None = None

        def wake() -> None:
            if timer is not None:
                timer.cancel()
            loop.call_soon(self._unblock, retry, None)

        def give_up() -> None:
            self.broker.cancel_wait(exc.address, wake)
            self._unblock(retry, exc.gave_up())

        self.broker.wait_for_room(exc.address, wake)
        timer = loop.call_later(exc.timeout_ms / 1000, give_up)

    def _unblock(self, retry: Retry, error: ChuteError | None) -> None:
        if self.closing:
            return
        self._holds &= ~Hold.BLOCKED_SEND
        retry(error)  # may block again
        if self.acting:
            self._decide_reading()
            self._process()
