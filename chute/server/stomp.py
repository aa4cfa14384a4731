"""STOMP over a stream: one :class:`StompConnection` per client.

The same thin-driver shape as :mod:`chute.server.native`: bytes go into the
sans-IO :class:`~chute.stomp.StompCodec`, frames become calls on the
client's :class:`~chute.stomp.session.StompSession` (the pure mapping onto the
core: subscriptions, transactions, acks and credit), and everything one read
produces is written with one ``transport.write``; deliveries caused by other
connections are flushed once per loop iteration.

The per-message path is kept short (``python -m bench.stomp_path`` measures
it): the codec's fast path and memo of header blocks, a
:class:`~chute.stomp.adapter.SendReader` that reads a repeated header tuple
once, a cache of destination → address, a
:class:`~chute.stomp.delivery.MessageEncoder` per subscription that writes
MESSAGE frames from pre-encoded parts, and receipts written without building a
frame. A durable RECEIPT is written and flushed in the loop callback that
reports the store's sync; sockets have TCP_NODELAY.

Errors (STOMP 1.2 §ERROR: "the server MUST then close the connection"): a
:class:`~chute.errors.ChuteError` raised by a frame (a full destination, a
bad selector) and a protocol violation both end the connection the same way.
Reading stops at once and nothing after the failing frame is acted on; once
everything acted on before it is durable (so receipts already owed go out
first, in order), the ERROR frame (with ``receipt-id`` if the frame asked for
a receipt, and a ``code`` header) is written and the connection closed. The
core's connection close then gives unacked messages back and rolls open
transactions back. Nothing a client sends can stop the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable

from chute.core.model.consumer import BrokerConsumer, Entry
from chute.core.rules.access import Action
from chute.core.rules.routing import WouldBlock
from chute.errors import (
    AuthenticationFailed,
    ChuteError,
    LocalProtocolError,
    RemoteProtocolError,
)
from chute.sansio import NeedData
from chute.server.host import Retry, ServerHost
from chute.server.partial import REFUSE_FROM
from chute.server.stream import Hold, StreamConnection
from chute.stomp import heartbeat
from chute.stomp.adapter import (
    STREAM_OFFSET_HEADER,
    AckToken,
    is_temp_queue,
    message_frame,
    negotiate_version,
    require,
    subscribe_options,
    to_address,
)
from chute.stomp.codec import StompCodec
from chute.stomp.frames import HEARTBEAT, SUPPORTED_VERSIONS, Frame
from chute.stomp.session import StompSession, StompSubscription
from chute.stomp.writer import encode_frame
from chute.version import __version__

log = logging.getLogger("chute.stomp")

_SERVER_NAME = f"chute/{__version__}"
_MIN_HEARTBEAT_MS = 1000


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on a TCP transport's socket: a RECEIPT or a MESSAGE leaves at once.

    asyncio and uvloop set it already on the sockets they accept; this makes
    it a property of the STOMP listener rather than of the event loop in use
    (Nagle's algorithm would hold a small frame for up to the peer's delayed ACK:
    ~40 ms on Linux). Other transports (WebSocket, a test's fake) have no socket.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class StompConnection(StreamConnection):
    """One STOMP client connection. Lives on the server's event loop only."""

    protocol_name = "STOMP"

    def __init__(self, server: ServerHost) -> None:
        super().__init__(server)
        # max_packet_size once the client logged in
        self.codec = StompCodec(max_frame_size=server.config.limits.login_frame_size)
        self.stomp: StompSession | None = None  # once CONNECTED
        self._checked: list[tuple[str, str]] | None = None  # a frame in progress let go on
        self._handlers: dict[str, Callable[[Frame], None]] = {
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit,
            "ABORT": self._on_abort,
            "DISCONNECT": self._on_disconnect,
        }

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        _set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.liveness.last_read = time.monotonic()
        if self.closing:
            return  # after an ERROR or DISCONNECT nothing more is read
        try:
            self.codec.receive_data(data)
        except RemoteProtocolError as exc:
            self._protocol_error(exc, None)
            return
        self._act()
        if self.core is not None and not self.closing:
            self._check_unfinished()

    def drop_unfinished(self) -> None:
        self.codec.discard()

    def _buffered(self) -> int:
        return self.codec.buffered

    def _check_unfinished(self) -> None:
        """What is left of the reads is a frame in progress (:mod:`chute.server.partial`):
        a large SEND to a destination this client may not send to is refused from its
        headers, before its body arrives; else its bytes count against the bounds."""
        core = self.core
        assert core is not None  # noqa: S101 (the caller checked)
        codec = self.codec
        size = codec.buffered
        if size >= REFUSE_FROM and not self.broker.access.allows_all:
            head = codec.head
            if head is not None and head[1] is not self._checked:
                command, headers = head
                self._checked = headers
                refused = self._refused_send(headers) if command == "SEND" else None
                if refused is not None:
                    destination, exc = refused
                    self.server.limits.partial.refused(self, destination, size, exc.reason)
                    self._error_and_close(_failed(Frame(command, tuple(headers)), exc))
                    self.drop_unfinished()
                    return
        self.server.limits.partial.update(self, core.login, size, self.broker.memory)

    def _refused_send(self, headers: list[tuple[str, str]]) -> tuple[str, ChuteError] | None:
        """The destination of a SEND with ``headers`` and why it will be refused whatever
        its body (None: it may go on); a temporary queue is left to the frame (using one
        makes it)."""
        destination = next((value for name, value in headers if name == "destination"), None)
        if destination is None or is_temp_queue(destination):
            return None
        try:
            assert self.core is not None  # noqa: S101 (logged in)
            self.core.authorize(Action.SEND, to_address(destination))
        except ChuteError as exc:
            return destination, exc
        return None

    # -- frames -------------------------------------------------------------------------

    def _process(self) -> None:
        """Handle every whole frame buffered, in order, unless a blocked send holds us."""
        codec = self.codec
        frame: Frame | None = None
        turn = self._turn()
        try:
            while self._may_act(turn):
                item = codec.next_frame()
                if isinstance(item, NeedData):
                    break
                if item is HEARTBEAT:
                    continue
                frame = item
                if self.core is None:
                    self._on_connect(frame)
                    continue
                handler = self._handlers.get(frame.command)
                if handler is None:
                    raise RemoteProtocolError(
                        f"a client may not send {frame.command} now", "unexpected-frame"
                    )
                try:
                    handler(frame)
                except ChuteError as exc:
                    if isinstance(exc, RemoteProtocolError):
                        raise
                    self._fail(frame, exc)
        except RemoteProtocolError as exc:
            self._protocol_error(exc, frame)
        if self.stomp is not None and not self.closing:
            self.stomp.push_credited()
        self.flush()

    def _on_connect(self, frame: Frame) -> None:
        if frame.command not in ("CONNECT", "STOMP"):
            raise RemoteProtocolError(
                f"the first frame must be CONNECT or STOMP, not {frame.command}", "not-connected"
            )
        version = negotiate_version(frame.header("accept-version"))
        if version is None:
            supported = ",".join(SUPPORTED_VERSIONS)
            self._write(
                Frame.error(
                    "unsupported protocol version",
                    f"this broker speaks STOMP {supported}",
                    headers=[("version", supported)],
                )
            )
            self._close_after_flush()
            return
        self.codec.version = version
        core = self._login.attempt(
            frame.header("login"),
            frame.header("passcode"),
            frame.header("client-id") or None,
            lambda: self._on_connect(frame),
        )
        if core is None:
            return  # the password is verified off the loop; this frame is handled again
        if isinstance(core, ChuteError):
            hint = (
                "check the login and passcode headers"
                if isinstance(core, AuthenticationFailed)
                else "another connection uses this client-id header's value"
            )
            self._write(Frame.error(core.reason, hint, headers=[("code", core.code)]))
            self._close_after_flush()
            return
        beat = (0, 0)
        if version != "1.0":
            client_beat = heartbeat.parse(frame.header("heart-beat"))
            config_ms = self.server.config.sessions.heartbeat_ms
            if config_ms:
                floor = min(_MIN_HEARTBEAT_MS, config_ms)
                beat = (floor, floor)
            send_ms, expect_ms = heartbeat.negotiate(client_beat, beat)
            self.liveness.start_heartbeat(send_ms / 1000, 2 * expect_ms / 1000)
        self.stomp = StompSession(core, version, self.deliver, self._subscription_cancelled)
        self._write(Frame.connected(version, heart_beat=beat, session=core.id, server=_SERVER_NAME))

    # SEND -------------------------------------------------------------------------------

    def _on_send(self, frame: Frame) -> None:
        try:
            receipt, durable = self._stomp().send(frame)
        except WouldBlock as exc:
            self._block_until_room(exc, self._retry_send(frame))
            return
        if receipt is not None:
            self._answer(receipt, durable=durable)

    def _retry_send(self, frame: Frame) -> Retry:
        def retry(error: ChuteError | None) -> None:
            try:
                if error is not None:
                    raise error
                self._on_send(frame)
            except RemoteProtocolError as exc:
                self._protocol_error(exc, frame)
            except ChuteError as exc:
                self._fail(frame, exc)

        return retry

    # SUBSCRIBE / UNSUBSCRIBE ----------------------------------------------------------------

    def _on_subscribe(self, frame: Frame) -> None:
        self._stomp().subscribe(subscribe_options(frame, self.codec.version))
        self._receipt(frame)

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.header("id")
        if sub_id is None and self.codec.version == "1.0":
            sub_id = frame.header("destination")
        if sub_id is None:
            raise RemoteProtocolError("an UNSUBSCRIBE frame needs an 'id' header", "missing-header")
        name = frame.header("durable-subscription-name") or frame.header(
            "activemq.subscriptionName"
        )
        self._stomp().unsubscribe(sub_id, name)
        self._receipt(frame, durable=bool(name))

    # ACK / NACK and transactions ------------------------------------------------------------

    def _on_ack(self, frame: Frame) -> None:
        receipt, durable = self._stomp().ack(frame)
        if receipt is not None:
            self._answer(receipt, durable=durable)

    def _on_nack(self, frame: Frame) -> None:
        durable = self._stomp().nack(frame)
        self._receipt(frame, durable=durable)

    def _on_begin(self, frame: Frame) -> None:
        self._stomp().begin(require(frame, "transaction"))
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        self._stomp().commit(require(frame, "transaction"))
        self._receipt(frame, durable=True)

    def _on_abort(self, frame: Frame) -> None:
        self._stomp().abort(require(frame, "transaction"))
        self._receipt(frame)

    def _on_disconnect(self, frame: Frame) -> None:
        self._hold(Hold.CLOSING)  # nothing after DISCONNECT is read
        self._stop_deliveries()
        if frame.header("receipt") is None:
            self._close_after_flush()
            return
        self._receipt(frame, durable=True, then_close=True)

    # -- helpers ------------------------------------------------------------------------

    def _stomp(self) -> StompSession:
        if self.stomp is None:
            raise RemoteProtocolError("the first frame must be CONNECT", "not-connected")
        return self.stomp

    def _receipt(self, frame: Frame, *, durable: bool = False, then_close: bool = False) -> None:
        """Answer a ``receipt`` header: at once, or once the store synced if ``durable``."""
        receipt = frame.header("receipt")
        if receipt is not None:
            self._answer(receipt, durable=durable, then_close=then_close)

    def _answer(self, receipt: str, *, durable: bool = False, then_close: bool = False) -> None:
        """Send RECEIPT ``receipt``: at once, or once the store synced if ``durable``.

        A durable receipt is written (and flushed) in the very loop callback
        that reports the sync, with nothing waiting for a later iteration.
        """
        self._asked()
        if not durable:
            self._write_receipt(receipt)
            if then_close:
                self._close_after_flush()
            return
        self._after_sync(lambda error: self._receipted(receipt, error, then_close))

    def _write_receipt(self, receipt: str) -> None:
        try:
            self._out.append(self.codec.send_receipt(receipt))
        except LocalProtocolError as exc:  # a header this version cannot carry
            log.warning("cannot send RECEIPT to %s: %s", self.peer, exc.reason)

    def _receipted(self, receipt: str, error: BaseException | None, then_close: bool) -> None:
        if error is None:
            self._write_receipt(receipt)
        else:
            reason = error.reason if isinstance(error, ChuteError) else str(error)
            self._write(Frame.error("not stored", reason, receipt_id=receipt))
        if then_close:
            self._close_after_flush()

    def _write(self, frame: Frame) -> None:
        try:
            self._out.append(self.codec.send(frame))
        except LocalProtocolError as exc:  # a header this version cannot carry
            log.warning("cannot send %s to %s: %s", frame.command, self.peer, exc.reason)

    def _fail(self, frame: Frame, exc: ChuteError) -> None:
        log.info(
            "STOMP %s from %s failed: %s: %s; closing",
            frame.command,
            self.peer,
            exc.code,
            exc.reason,
        )
        self._error_and_close(_failed(frame, exc))

    def _protocol_error(self, exc: RemoteProtocolError, frame: Frame | None) -> None:
        self._log_protocol_error(exc.reason, exc.error_code)
        self._error_and_close(
            Frame.error(
                exc.reason,
                f"protocol error ({exc.error_code}): {exc.reason}",
                receipt_id=frame.header("receipt") if frame is not None else None,
                headers=[("code", exc.error_code)],
            )
        )

    def _stop_deliveries(self) -> None:
        """No more pushes to a closing connection (an auto-ack delivery counts once pushed)."""
        if self.stomp is not None:
            self.stomp.stop_deliveries()

    def _error_and_close(self, error: Frame) -> None:
        """Stop reading; once what came before is durable, send ``error`` and close."""
        if self.closing:
            return
        self._hold(Hold.CLOSING)
        self._stop_deliveries()
        if self.core is None:  # nothing was acted on: no receipt can be owed
            self._write(error)
            self._close_after_flush()
            return

        def send_error(_: BaseException | None) -> None:
            self._write(error)
            self._close_after_flush()

        self._after_sync(send_error)

    def _subscription_cancelled(self, sub: StompSubscription, error: ChuteError) -> None:
        """The broker closed a subscription (its destination was deleted). STOMP has no
        frame for that but ERROR, after which the connection closes (§ERROR)."""
        log.info("STOMP %s: subscription %r ended: %s; closing", self.peer, sub.id, error.reason)
        self._error_and_close(
            Frame.error(
                error.reason,
                f"subscription {sub.id} ended: {error.reason}",
                headers=[("code", error.code), ("subscription", sub.id)],
            )
        )

    # -- deliveries -------------------------------------------------------------------------

    def deliver(self, sub: StompSubscription, consumer: BrokerConsumer, entry: Entry) -> None:
        """Write the MESSAGE frame of ``entry`` (flushed with this loop iteration's writes)."""
        message = entry.message
        try:
            data = sub.encoder.encode(message, entry.seq, entry.delivery_count, entry.redelivered)
        except UnicodeEncodeError:  # a lone surrogate: the general encoder reports it
            self._write(
                message_frame(
                    message,
                    destination=sub.destination,
                    subscription=sub.id,
                    ack=None if sub.auto else AckToken.make(consumer.id, entry.seq),
                    delivery_count=entry.delivery_count,
                    redelivered=entry.redelivered or entry.delivery_count > 1,
                    version=self.codec.version,
                    stream_offset=(
                        (
                            int(message.properties[STREAM_OFFSET_HEADER])
                            if sub.encoder.whole
                            else entry.seq
                        )
                        if sub.stream
                        else None
                    ),
                )
            )
        else:
            self._out.append(data)
            self.note_delivery(len(data))
        if sub.auto:
            if self.stomp is not None:
                self.stomp.owe(sub)
        elif sub.legacy is not None:
            sub.legacy[message.id] = entry.seq
        if consumer.queue.marked(consumer, entry):
            self.mark_delivery(consumer, entry)  # redelivered after a crash (durability.md)
        if not self._flush_scheduled:
            self._schedule_flush()

    def _writable(self) -> None:
        """Give auto-ack subscriptions back the credit of what was written."""
        if self.writable and self.stomp is not None:
            self.stomp.written()

    def _heartbeat_bytes(self) -> bytes:
        return b"\n"

    def _error_bytes(self, code: str, reason: str) -> bytes:
        self._stop_deliveries()
        return self.codec.send(_error_frame(code, reason))

    def _lift_login_limit(self) -> None:
        self.codec.max_frame_size = self.server.config.limits.max_packet_size


def _failed(frame: Frame, exc: ChuteError) -> Frame:
    """The ERROR frame for ``frame``, which ``exc`` refused."""
    return Frame.error(
        exc.reason,
        f"{frame.command} failed: {exc.code}: {exc.reason}",
        receipt_id=frame.header("receipt"),
        headers=[("code", exc.code)],
    )


def _error_frame(code: str, reason: str) -> Frame:
    return Frame.error(reason, f"{reason} ({code})", headers=[("code", code)])


def stomp_refusal(code: str, reason: str) -> bytes:
    """A connection refused before a word (a connection limit): an ERROR frame."""
    return encode_frame(_error_frame(code, reason), escaped=True, version="1.2")
