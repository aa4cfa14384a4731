"""AMQP 0-9-1 over a stream: one :class:`AmqpConnection` per client.

The same thin-driver shape as :mod:`chute.server.stomp`: bytes go into the sans-IO
:class:`~chute.amqp.codec.AmqpCodec`, methods become calls on the connection's
channels (:class:`~chute.amqp.channel.Channel`, the pure mapping onto the core), and
everything one read produces is written with one ``transport.write``.

The handshake: the protocol header, then ``connection.start`` (mechanisms ``PLAIN``
and ``AMQPLAIN``, and ``EXTERNAL`` for a verified TLS client certificate), whose
``start-ok`` logs in through the same :class:`~chute.server.login.Login` as every
protocol; ``connection.tune`` (``channel_max`` 2047, ``frame_max`` 131072, heartbeat
60 s) and the client's ``tune-ok``, whose values rule; ``connection.open`` of the one
virtual host ``/``.

Errors: a soft reply code (403-406, 311-313) closes the channel with ``channel.close``,
after which only its ``close`` and ``close-ok`` count; a hard one closes the connection
with ``connection.close``, after which only ``close-ok`` counts, and the socket closes
once it comes (or a second later). A refused login gets ``connection.close`` 403. An
unknown protocol header gets AMQP 0-9-1's header back and a close. Nothing a client
sends can stop the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from pamqp import base, commands

from chute.amqp import codec
from chute.amqp.channel import Channel
from chute.amqp.codec import PROTOCOL_HEADER, AmqpCodec, Content, HeartbeatEvent, Method
from chute.amqp.codes import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    AmqpError,
    from_chute,
)
from chute.amqp.entities import Declarations
from chute.amqp.handshake import credentials, start
from chute.core.model.consumer import BrokerConsumer, Entry
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError
from chute.sansio import NEED_DATA, NeedData
from chute.server.host import ServerHost
from chute.server.stream import StreamConnection

log = logging.getLogger("chute.amqp")

CHANNEL_MAX: Final = 2047
FRAME_MAX: Final = 131072
HEARTBEAT_S: Final = 60
CLOSE_OK_WAIT_S: Final = 1.0


class AmqpConnection(StreamConnection):
    """One AMQP client connection. Lives on the server's event loop only."""

    protocol_name = "AMQP"

    def __init__(self, server: ServerHost) -> None:
        super().__init__(server)
        self.codec = AmqpCodec(max_frame_size=max(server.config.limits.login_frame_size, 4096))
        self.frame_max = FRAME_MAX
        self.channel_max = CHANNEL_MAX
        self.cancel_notify = False
        self.blocked_notify = False  # the client takes connection.blocked/unblocked
        self._told_blocked = False  # sent connection.blocked, unblocked not yet
        self.channels: dict[int, Channel] = {}
        self._tuned = False
        self._opened = False
        self._closing_hard = False  # sent connection.close: waiting for close-ok
        self._started = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.liveness.last_read = time.monotonic()
        if self.closing:
            return
        self.codec.receive_data(data)
        self._act()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._told_blocked:
            self.broker.cancel_wait(None, self._tell_unblocked)
        self._end_channels()
        super().connection_lost(exc)

    def drop_unfinished(self) -> None:
        self.codec.discard()

    def _buffered(self) -> int:
        return self.codec.buffered

    # -- frames ----------------------------------------------------------------------------

    def _process(self) -> None:
        codec_ = self.codec
        if not self._started:
            ok = codec_.read_protocol_header()
            if ok is NEED_DATA:
                return
            self._started = True
            if ok is not True:
                self.server.limits.error_before_login(
                    self.peer, self.protocol_name, "not AMQP 0-9-1's protocol header", "header"
                )
                self._out.append(PROTOCOL_HEADER)
                self._close_after_flush()
                return
            self._send(0, start(self.certificate_user is not None))
        turn = self._turn()
        while self._may_act(turn) and not self.closing:
            try:
                event = codec_.next_event()
            except AmqpError as exc:
                self._hard(exc)
                break
            if isinstance(event, NeedData):
                break
            if isinstance(event, HeartbeatEvent):
                continue
            self._handle(event)
        for channel in self.channels.values():
            channel.push_credited()
        self.flush()

    def _handle(self, event: Method | Content) -> None:
        number = event.channel
        try:
            if self._closing_hard:
                if isinstance(event, Method) and isinstance(
                    event.method, commands.Connection.CloseOk | commands.Connection.Close
                ):
                    self._close_after_flush()
                return
            if number == 0:
                if isinstance(event, Content):
                    raise AmqpError(COMMAND_INVALID, "content on channel 0")
                self._on_connection(event.method)
                return
            if not self._opened:
                raise AmqpError(CHANNEL_ERROR, "a channel frame before connection.open")
            self._on_channel(number, event)
        except WouldBlock as exc:
            if exc.address is None:
                self._tell_blocked(exc.reason)
            self._block_until_room(exc, self._retry(event))
        except AmqpError as exc:
            self._refuse(number, exc)
        except ChuteError as exc:
            method = event.method if isinstance(event, Method) else None
            self._refuse(number, from_chute(exc, codec.ids(method) if method else (60, 40)))

    def _retry(self, event: Method | Content) -> Callable[[ChuteError | None], None]:
        def retry(error: ChuteError | None) -> None:
            if error is not None:
                self._refuse(event.channel, from_chute(error, (60, 40)))
                return
            self._handle(event)
            self.flush()

        return retry

    def _tell_blocked(self, reason: str) -> None:
        """The broker holds this publisher for its memory or disk: say so (once), and
        say ``connection.unblocked`` once it admits producers again."""
        if not self.blocked_notify or self._told_blocked:
            return
        self._told_blocked = True
        text = reason.encode()[:255].decode(errors="ignore")
        self._send(0, commands.Connection.Blocked(text))
        self.flush()
        self.broker.wait_for_room(None, self._tell_unblocked)

    def _tell_unblocked(self) -> None:
        self._told_blocked = False
        if self.transport is None or self._closing_hard:
            return
        self._send(0, commands.Connection.Unblocked())
        self.flush()

    # -- channel 0 -------------------------------------------------------------------------

    def _on_connection(self, method: base.Frame) -> None:
        if isinstance(method, commands.Connection.StartOk) and self.core is None:
            self._on_start_ok(method)
        elif isinstance(method, commands.Connection.TuneOk) and self.core is not None:
            self._on_tune_ok(method)
        elif isinstance(method, commands.Connection.Open) and self._tuned and not self._opened:
            if method.virtual_host not in ("/", ""):
                raise AmqpError(
                    NOT_ALLOWED,
                    f"vhost '{method.virtual_host}' not found: this broker has one, '/'",
                    (10, 40),
                )
            self._opened = True
            self._send(0, commands.Connection.OpenOk())
        elif isinstance(method, commands.Connection.Close):
            self._end_channels()
            self._send(0, commands.Connection.CloseOk())
            self._close_after_flush()
        elif isinstance(method, commands.Connection.CloseOk):
            self._close_after_flush()
        else:
            raise AmqpError(
                COMMAND_INVALID, f"{method.name} is not expected now", codec.ids(method)
            )

    def _on_start_ok(self, method: commands.Connection.StartOk) -> None:
        capabilities = (method.client_properties or {}).get("capabilities")
        told = capabilities if isinstance(capabilities, dict) else {}
        self.cancel_notify = bool(told.get("consumer_cancel_notify"))
        self.blocked_notify = bool(told.get("connection.blocked"))
        login, passcode = credentials(method.mechanism, method.response)
        core = self._login.attempt(login, passcode, None, lambda: self._on_start_ok(method))
        if core is None:
            return  # the password is verified off the loop; this method comes again
        if isinstance(core, ChuteError):
            self._hard(
                AmqpError(
                    ACCESS_REFUSED,
                    f"Login was refused using authentication mechanism {method.mechanism}: "
                    f"{core.reason}",
                    (10, 11),
                )
            )
            return
        self._send(
            0,
            commands.Connection.Tune(
                channel_max=CHANNEL_MAX, frame_max=FRAME_MAX, heartbeat=HEARTBEAT_S
            ),
        )

    def _on_tune_ok(self, method: commands.Connection.TuneOk) -> None:
        self.frame_max = min(method.frame_max or FRAME_MAX, FRAME_MAX)
        self.channel_max = min(method.channel_max or CHANNEL_MAX, CHANNEL_MAX)
        self.codec.max_frame_size = max(self.frame_max, 4096)
        self.codec.max_body = self.server.config.limits.max_packet_size
        if method.heartbeat:
            self.liveness.start_heartbeat(method.heartbeat / 2, 2 * method.heartbeat)
        self._tuned = True

    def _lift_login_limit(self) -> None:
        """The frame size stays the negotiated ``frame_max`` (set at ``tune-ok``)."""

    # -- channels --------------------------------------------------------------------------

    def _on_channel(self, number: int, event: Method | Content) -> None:
        method = event.method
        channel = self.channels.get(number)
        if isinstance(method, commands.Channel.Open):
            if channel is not None:
                raise AmqpError(CHANNEL_ERROR, f"channel {number} is open already", (20, 10))
            if number > self.channel_max:
                raise AmqpError(
                    NOT_ALLOWED,
                    f"channel {number} is over channel_max {self.channel_max}",
                    (20, 10),
                )
            assert self.core is not None  # noqa: S101 (opened)
            self.channels[number] = Channel(number, self.core, self)
            self._send(number, commands.Channel.OpenOk())
            return
        if channel is None:
            raise AmqpError(CHANNEL_ERROR, f"channel {number} is not open: send channel.open first")
        if channel.closing:
            if isinstance(method, commands.Channel.CloseOk | commands.Channel.Close):
                del self.channels[number]
                if isinstance(method, commands.Channel.Close):
                    self._send(number, commands.Channel.CloseOk())
            return
        if isinstance(event, Content):
            channel.publish(event.method, event.properties, event.body)
            return
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise AmqpError(
                NOT_IMPLEMENTED if method.synchronous else COMMAND_INVALID,
                f"{method.name} is not supported",
                codec.ids(method),
            )
        handler(self, channel, method)

    def _refuse(self, number: int, error: AmqpError) -> None:
        channel = self.channels.get(number)
        if error.hard or channel is None:
            self._hard(error)
            return
        log.info(
            "AMQP %s channel %d closed: %d %s",
            self.peer,
            number,
            error.reply_code,
            error.text,
        )
        self._send(
            number,
            commands.Channel.Close(error.reply_code, error.reply_text, *error.method),
        )
        channel.closing = True
        channel.close()

    def _hard(self, error: AmqpError) -> None:
        if self._closing_hard:
            return
        if self.core is None:
            self._log_protocol_error(error.text, error.error_code)
        else:
            log.warning(
                "AMQP %s: closing the connection: %d %s",
                self.peer,
                error.reply_code,
                error.text,
            )
        self._closing_hard = True
        self._end_channels()
        self._send(0, commands.Connection.Close(error.reply_code, error.reply_text, *error.method))
        self.flush(force=True)
        self.server.loop.call_later(CLOSE_OK_WAIT_S, self._close_after_flush)

    def _end_channels(self) -> None:
        channels = list(self.channels.values())
        self.channels.clear()
        for channel in channels:
            if not channel.closing:
                channel.closing = True
                channel.close()
        core = self.core
        if core is None:
            return
        declarations = Declarations(core)
        mine = [n for n, d in core.broker.exchanges.queues.items() if d.owner == core.id]
        for name in mine:  # exclusive queues die with their connection
            try:
                declarations.delete_queue(name, if_unused=False, if_empty=False)
            except ChuteError as exc:
                log.warning("AMQP %s: exclusive queue %r not deleted: %s", self.peer, name, exc)

    # -- what a Channel needs (chute.amqp.channel.Writer) ------------------------------------

    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._schedule_flush()

    def after_sync(self, then: Callable[[BaseException | None], None]) -> None:
        self._after_sync(then)

    def _seal_sync(self) -> None:
        super()._seal_sync()
        for channel in self.channels.values():
            channel.sync_sealed()

    def delivered(self, consumer: BrokerConsumer, entry: Entry, size: int) -> None:
        self.note_delivery(size)
        if consumer.queue.marked(consumer, entry):
            self.mark_delivery(consumer, entry)

    def now(self) -> int:
        return self.broker.clock()

    def fail(self, channel: int, error: AmqpError) -> None:
        self._refuse(channel, error)
        self.flush()

    def _send(self, channel: int, method: base.Frame) -> None:
        self._out.append(AmqpCodec.method(channel, method))

    def _writable(self) -> None:
        if self.writable:
            for channel in self.channels.values():
                channel.written()

    def _heartbeat_bytes(self) -> bytes:
        return codec.HEARTBEAT_FRAME

    def _error_bytes(self, code: str, reason: str) -> bytes:
        return AmqpCodec.method(
            0, commands.Connection.Close(CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}", 0, 0)
        )


# -- handlers by method ---------------------------------------------------------------------


def _exchange_declare(conn: AmqpConnection, channel: Channel, m: commands.Exchange.Declare) -> None:
    channel.entities.exchanges.declare(
        m.exchange,
        m.exchange_type,
        passive=m.passive,
        durable=m.durable,
        auto_delete=m.auto_delete,
        internal=m.internal,
    )
    if not m.nowait:
        channel.send(commands.Exchange.DeclareOk())


def _exchange_delete(conn: AmqpConnection, channel: Channel, m: commands.Exchange.Delete) -> None:
    channel.entities.delete_exchange(m.exchange, if_unused=m.if_unused)
    if not m.nowait:
        channel.send(commands.Exchange.DeleteOk())


def _exchange_bind(conn: AmqpConnection, channel: Channel, m: base.Frame) -> None:
    raise AmqpError(
        NOT_IMPLEMENTED, "exchange-to-exchange bindings are not supported", codec.ids(m)
    )


def _queue_declare(conn: AmqpConnection, channel: Channel, m: commands.Queue.Declare) -> None:
    name, _, messages, consumers = channel.entities.declare_queue(
        m.queue,
        passive=m.passive,
        durable=m.durable,
        exclusive=m.exclusive,
        auto_delete=m.auto_delete,
        arguments=m.arguments,
    )
    channel.last_queue = name
    if not m.nowait:
        conn.write(codec.declare_ok(channel.number, name, messages, consumers))


def _queue_bind(conn: AmqpConnection, channel: Channel, m: commands.Queue.Bind) -> None:
    channel.entities.bind(m.queue or channel.last_queue, m.exchange, m.routing_key, m.arguments)
    if not m.nowait:
        channel.send(commands.Queue.BindOk())


def _queue_unbind(conn: AmqpConnection, channel: Channel, m: commands.Queue.Unbind) -> None:
    channel.entities.unbind(m.queue or channel.last_queue, m.exchange, m.routing_key, m.arguments)
    channel.send(commands.Queue.UnbindOk())


def _queue_purge(conn: AmqpConnection, channel: Channel, m: commands.Queue.Purge) -> None:
    count = channel.entities.purge(m.queue or channel.last_queue)
    if not m.nowait:
        channel.send(commands.Queue.PurgeOk(count))


def _queue_delete(conn: AmqpConnection, channel: Channel, m: commands.Queue.Delete) -> None:
    count = channel.entities.delete_queue(
        m.queue or channel.last_queue, if_unused=m.if_unused, if_empty=m.if_empty
    )
    if not m.nowait:
        channel.send(commands.Queue.DeleteOk(count))


def _qos(conn: AmqpConnection, channel: Channel, m: commands.Basic.Qos) -> None:
    channel.qos(m)


def _consume(conn: AmqpConnection, channel: Channel, m: commands.Basic.Consume) -> None:
    channel.consume(m)


def _cancel(conn: AmqpConnection, channel: Channel, m: commands.Basic.Cancel) -> None:
    channel.cancel(m.consumer_tag or "", m.nowait)


def _get(conn: AmqpConnection, channel: Channel, m: commands.Basic.Get) -> None:
    channel.get(m)


def _ack(conn: AmqpConnection, channel: Channel, m: commands.Basic.Ack) -> None:
    channel.ack(m.delivery_tag, m.multiple)


def _nack(conn: AmqpConnection, channel: Channel, m: commands.Basic.Nack) -> None:
    channel.nack(m.delivery_tag, m.multiple, m.requeue, (60, 120))


def _reject(conn: AmqpConnection, channel: Channel, m: commands.Basic.Reject) -> None:
    channel.nack(m.delivery_tag or 0, False, m.requeue, (60, 90))


def _recover(conn: AmqpConnection, channel: Channel, m: commands.Basic.Recover) -> None:
    channel.recover(m.requeue)
    channel.send(commands.Basic.RecoverOk())


def _recover_async(conn: AmqpConnection, channel: Channel, m: commands.Basic.RecoverAsync) -> None:
    channel.recover(m.requeue)


def _channel_close(conn: AmqpConnection, channel: Channel, m: commands.Channel.Close) -> None:
    channel.closing = True
    channel.close()
    del conn.channels[channel.number]
    channel.send(commands.Channel.CloseOk())


def _flow(conn: AmqpConnection, channel: Channel, m: commands.Channel.Flow) -> None:
    if not m.active:
        raise AmqpError(NOT_IMPLEMENTED, "channel.flow active=false is not supported", (20, 20))
    channel.send(commands.Channel.FlowOk(active=True))


def _confirm_select(conn: AmqpConnection, channel: Channel, m: commands.Confirm.Select) -> None:
    channel.confirm_select(m.nowait)


def _tx_select(conn: AmqpConnection, channel: Channel, m: commands.Tx.Select) -> None:
    channel.tx_select()


def _tx_commit(conn: AmqpConnection, channel: Channel, m: commands.Tx.Commit) -> None:
    channel.tx_commit()


def _tx_rollback(conn: AmqpConnection, channel: Channel, m: commands.Tx.Rollback) -> None:
    channel.tx_rollback()


_HANDLERS: Final[dict[type[base.Frame], Callable[[AmqpConnection, Channel, Any], None]]] = {
    commands.Exchange.Declare: _exchange_declare,
    commands.Exchange.Delete: _exchange_delete,
    commands.Exchange.Bind: _exchange_bind,
    commands.Exchange.Unbind: _exchange_bind,
    commands.Queue.Declare: _queue_declare,
    commands.Queue.Bind: _queue_bind,
    commands.Queue.Unbind: _queue_unbind,
    commands.Queue.Purge: _queue_purge,
    commands.Queue.Delete: _queue_delete,
    commands.Basic.Qos: _qos,
    commands.Basic.Consume: _consume,
    commands.Basic.Cancel: _cancel,
    commands.Basic.Get: _get,
    commands.Basic.Ack: _ack,
    commands.Basic.Nack: _nack,
    commands.Basic.Reject: _reject,
    commands.Basic.Recover: _recover,
    commands.Basic.RecoverAsync: _recover_async,
    commands.Channel.Close: _channel_close,
    commands.Channel.Flow: _flow,
    commands.Confirm.Select: _confirm_select,
    commands.Tx.Select: _tx_select,
    commands.Tx.Commit: _tx_commit,
    commands.Tx.Rollback: _tx_rollback,
}


def amqp_refusal(code: str, reason: str) -> bytes:
    """A connection refused before a word (a connection limit): AMQP's header back."""
    return PROTOCOL_HEADER
