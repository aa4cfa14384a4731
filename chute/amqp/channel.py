"""One AMQP channel over the core: its consumers, delivery tags, publishes, confirms and
transaction.

Mapping onto the core: a channel is a core session (individual acks) holding its
consumers; ``tx.select`` adds a transacted core session that its publishes, acks,
nacks and rejects go through until ``tx.commit`` or ``tx.rollback`` (as STOMP's
transactions do). Delivery tags count from 1 per channel and are shared by
``basic.deliver`` and ``basic.get-ok``; ``multiple`` settles every tag up to one.

Credit: a consumer's window is the channel's ``basic.qos`` prefetch (0: 65535); a
``no-ack`` consumer's is given back as its deliveries are written (:meth:`written`),
an acking consumer's as it settles. ``basic.get`` is a consumer of the channel's own,
given one credit for the call and none otherwise.

Publisher confirms: every publish of a confirm-mode channel is numbered from 1 and
confirmed once the store synced (a message not stored is confirmed at the same sync,
in order). One sync callback covers every publish made until that sync is under way
(:meth:`Channel.sync_sealed`), and it confirms them together: one ``basic.ack`` with
``multiple`` for each run of accepted publishes, and ``basic.nack`` for a publish a
destination refused. An unroutable ``mandatory`` publish
gets ``basic.return`` (312) before its confirm.

``basic.cancel`` stops a consumer at once; what it was delivered and not yet settled
stays settleable, and goes back to its queue if the channel closes first.

Pure: no sockets; what goes out goes through the :class:`Writer` the driver gives.
Used from the broker's loop only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, Protocol

from pamqp import base, commands

from chute.amqp import codec
from chute.amqp.codes import (
    ACCESS_REFUSED,
    INTERNAL_ERROR,
    NO_ROUTE,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AmqpError,
    from_chute,
)
from chute.amqp.entities import Declarations
from chute.amqp.properties import (
    EXCHANGE_PROPERTY,
    ROUTING_KEY_PROPERTY,
    scaled,
    shared_content,
    to_message,
    to_properties,
)
from chute.amqp.reply_to import PSEUDO_QUEUE, open_queue, reply_name
from chute.amqp.routing import queue_ttl as queue_ttl_of
from chute.amqp.routing import route, single_active
from chute.core.model.address import Kind, parse
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.exchanges import DEFAULT
from chute.core.rules.routing import WouldBlock
from chute.errors import ChuteError, DestinationFull

UNLIMITED_WINDOW: Final = 65535
"""The credit of a consumer on a channel without a prefetch count."""


class Writer(Protocol):
    """What a channel needs of its connection's driver."""

    frame_max: int
    cancel_notify: bool

    def write(self, data: bytes) -> None: ...

    def after_sync(self, then: Callable[[BaseException | None], None]) -> None: ...

    def delivered(self, consumer: BrokerConsumer, entry: Entry, size: int) -> None: ...

    def now(self) -> int: ...

    def fail(self, channel: int, error: AmqpError) -> None: ...


class AmqpConsumer:
    """One ``basic.consume`` (or a channel's ``basic.get``): the core consumer's receiver."""

    __slots__ = (
        "address",
        "channel",
        "consumer",
        "early",
        "got",
        "no_ack",
        "owed",
        "queue",
        "stream",
        "tag",
    )

    def __init__(
        self, channel: Channel, tag: str, queue: str, address: str, *, no_ack: bool
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.queue = queue  # its AMQP name
        self.address = address
        self.no_ack = no_ack
        self.stream = parse(address).kind is Kind.STREAM
        self.consumer: BrokerConsumer | None = None
        self.owed = 0  # no-ack: deliveries written whose credit is not given back yet
        self.got: Entry | None = None  # a basic.get's delivery
        # deliveries made as the consumer opened, before its consume-ok went out
        self.early: list[Entry] | None = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.consumer = consumer
        if self.early is not None:
            self.early.append(entry)
            return
        self.channel.deliver(self, consumer, entry)

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        self.channel.cancelled_by_broker(self)


class Channel:
    """See the module docstring."""

    def __init__(self, number: int, core: BrokerConnection, writer: Writer) -> None:
        self.number = number
        self.core = core
        self.writer = writer
        self.entities = Declarations(core)
        self.session = core.session(AckMode.INDIVIDUAL)
        self.tx: BrokerSession | None = None
        self.confirming = False
        self.closing = False  # sent channel.close: only close and close-ok count now
        self.prefetch = 0
        self.consumers: dict[str, AmqpConsumer] = {}
        self.stopped: dict[int, AmqpConsumer] = {}  # cancelled, with deliveries unsettled
        self.unacked: OrderedDict[int, tuple[AmqpConsumer, BrokerConsumer, int]] = OrderedDict()
        self.last_queue = ""
        self.reply_queue: str | None = None  # direct reply-to: this channel's reply queue
        self._next_tag = 1
        self._next_consumer = 1
        self._published = 0  # confirm mode: the number of the last publish
        self._outcomes: list[tuple[int, bool]] = []  # confirms not yet written
        # the last publish the sync asked for next covers (None: no sync asked for yet)
        self._covered: list[int] | None = None
        self._getters: dict[tuple[str, bool], AmqpConsumer] = {}
        self._credited: set[BrokerConsumer] = set()
        self._owing: set[AmqpConsumer] = set()

    # -- frames out --------------------------------------------------------------------

    def send(self, method: base.Frame) -> None:
        self.writer.write(codec.AmqpCodec.method(self.number, method))

    # -- publishing --------------------------------------------------------------------

    def publish(self, method: commands.Basic.Publish, props: Any, body: bytes) -> None:
        """A ``basic.publish`` with its content.

        Raises:
            WouldBlock: the broker or a destination has no room now (retry the publish).
            AmqpError: the publish is refused (its channel or connection closes).
        """
        if method.immediate:
            raise AmqpError(NOT_IMPLEMENTED, "immediate=true is not supported", (60, 40))
        exchange = method.exchange or DEFAULT
        key = method.routing_key or ""
        message, ttl = to_message(props, body)
        if message.reply_to == PSEUDO_QUEUE:
            message.reply_to = reply_name(self.reply_queue)
        try:
            targets = route(self.entities.exchanges, self.core.broker, exchange, key, props.headers)
        except ChuteError as exc:
            raise from_chute(exc, (60, 40)) from None
        if exchange != DEFAULT:
            message.properties[EXCHANGE_PROPERTY] = exchange
            message.properties[ROUTING_KEY_PROPERTY] = key
        session = self.tx or self.session
        delivered = False
        refused: ChuteError | None = None
        for address, declaration in targets:
            queue_ttl = queue_ttl_of(declaration)
            life = min(t for t in (ttl, queue_ttl) if t) if (ttl or queue_ttl) else 0
            top = declaration.number("x-max-priority") if declaration is not None else 0
            each = message.replace(priority=scaled(props.priority, top)) if top else message
            try:
                session.send(address, each, ttl=life)
                delivered = True
            except WouldBlock:
                if not delivered:
                    raise  # nothing sent yet: the whole publish waits and comes again
                refused = DestinationFull(f"{address} not reached: the broker holds producers")
            except DestinationFull as exc:  # x-overflow reject-publish
                refused = exc
        if not delivered and method.mandatory and refused is None:
            self._return(exchange, key, props, body)
        if self.confirming:
            self._published += 1
            self._outcomes.append((self._published, refused is None))
            covered = self._covered
            if covered is None:  # the first publish the coming sync covers
                covered = self._covered = [0]
                self.writer.after_sync(lambda error: self._confirm(covered[0], error))
            covered[0] = self._published

    def _return(self, exchange: str, key: str, props: Any, body: bytes) -> None:
        head = codec.basic_return(self.number, NO_ROUTE, "NO_ROUTE", exchange, key)
        self.writer.write(
            head + codec.content(self.number, _plain(props), body, self.writer.frame_max)
        )

    def _confirm(self, seq: int, error: BaseException | None) -> None:
        if self.closing:
            return
        outcomes = self._outcomes
        upto = 0
        while upto < len(outcomes) and outcomes[upto][0] <= seq:
            upto += 1
        batch, self._outcomes = outcomes[:upto], outcomes[upto:]
        run_start: int | None = None
        last_ok = 0
        for number, ok in batch:
            if ok and error is None:
                if run_start is None:
                    run_start = number
                last_ok = number
                continue
            if run_start is not None:
                self.send(commands.Basic.Ack(last_ok, multiple=last_ok > run_start))
                run_start = None
            self.send(commands.Basic.Nack(number, multiple=False, requeue=False))
        if run_start is not None:
            self.send(commands.Basic.Ack(last_ok, multiple=last_ok > run_start))

    def sync_sealed(self) -> None:
        """The sync asked for is under way: what is published from now on waits for the
        next one."""
        self._covered = None

    def confirm_select(self, nowait: bool) -> None:
        if self.tx is not None:
            raise AmqpError(
                PRECONDITION_FAILED,
                "cannot switch from tx to confirm mode: use another channel",
                (85, 10),
            )
        self.confirming = True
        if not nowait:
            self.send(commands.Confirm.SelectOk())

    # -- consuming ---------------------------------------------------------------------

    def consume(self, method: commands.Basic.Consume) -> None:
        queue = method.queue or self.last_queue
        if not queue:
            raise AmqpError(NOT_FOUND, "no queue named and none declared on this channel")
        tag = method.consumer_tag or f"amq.ctag-{self.number}.{self._next_consumer}"
        if tag in self.consumers:
            raise AmqpError(
                NOT_ALLOWED,
                f"attempt to reuse consumer tag '{tag}' on channel {self.number}",
                (60, 20),
            )
        if queue == PSEUDO_QUEUE:
            queue = self.reply_queue = open_queue(self.entities, method.no_ack, self.reply_queue)
        address, declaration = self.entities.find(queue)
        reader = AmqpConsumer(self, tag, queue, address, no_ack=method.no_ack)
        args = method.arguments or {}
        offset = args.get("x-stream-offset")
        if reader.stream:
            if not self.prefetch:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    "consumer prefetch count is not set for stream queue: send basic.qos first",
                    (60, 20),
                )
            if method.no_ack:
                raise AmqpError(
                    PRECONDITION_FAILED,
                    "a stream queue's consumer must acknowledge (no_ack=false)",
                    (60, 20),
                )
            if offset is not None and not isinstance(offset, int | str):
                offset = int(getattr(offset, "timestamp", lambda: 0)() * 1000)
                offset = f"timestamp={offset}"
        elif offset is not None:
            offset = None
        consumer_id = self._next_consumer
        self._next_consumer += 1
        try:
            reader.consumer = self.session.consumer(
                consumer_id,
                address,
                reader,
                prefetch=self.prefetch or UNLIMITED_WINDOW,
                exclusive=method.exclusive or single_active(declaration),
                ack_mode=AckMode.AUTO if method.no_ack and not reader.stream else None,
                offset=offset if reader.stream else None,
            )
        except ChuteError as exc:
            if queue == self.reply_queue:  # a reply queue no consumer came to
                self._maybe_auto_delete(queue)
            code = from_chute(exc, (60, 20))
            if "exclusive" in exc.reason:
                code = AmqpError(ACCESS_REFUSED, f"queue '{queue}' in vhost '/' in exclusive use")
            raise code from None
        self.consumers[tag] = reader
        self.entities.used(queue)
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(tag))
        early, reader.early = reader.early or [], None
        consumer = reader.consumer
        for entry in early:  # what it was pushed as it opened, after its consume-ok
            self.deliver(reader, consumer, entry)

    def cancel(self, tag: str, nowait: bool) -> None:
        reader = self.consumers.pop(tag, None)
        if reader is not None and reader.consumer is not None:
            consumer = reader.consumer
            if any(r is reader for r, _, _ in self.unacked.values()):
                BrokerSession.stop(consumer)
                self.stopped[consumer.id] = reader
            else:
                self._close_consumer(reader)
        if not nowait:
            self.send(commands.Basic.CancelOk(tag))

    def _close_consumer(self, reader: AmqpConsumer) -> None:
        if reader.consumer is not None:
            self.session.close_consumer(reader.consumer)
            self.stopped.pop(reader.consumer.id, None)
        self._maybe_auto_delete(reader.queue)

    def _maybe_auto_delete(self, queue: str) -> None:
        if queue == self.reply_queue:
            self.reply_queue = None
        declaration = self.entities.exchanges.queues.get(queue)
        if declaration is None or not declaration.auto_delete:
            return
        address = self.entities.find(queue)[0] if declaration else ""
        dest = self.core.broker.find(address)
        if dest is not None and not getattr(getattr(dest, "router", None), "consumers", True):
            self.entities.delete_queue(queue, if_unused=False, if_empty=False)

    def cancelled_by_broker(self, reader: AmqpConsumer) -> None:
        """The broker closed ``reader``'s consumer (its queue was deleted)."""
        if self.consumers.get(reader.tag) is reader:
            del self.consumers[reader.tag]
            if self.writer.cancel_notify and not self.closing:
                self.send(commands.Basic.Cancel(reader.tag, nowait=True))
        for tag in [t for t, (r, _, _) in self.unacked.items() if r is reader]:
            del self.unacked[tag]

    def qos(self, method: commands.Basic.Qos) -> None:
        if method.prefetch_size:
            raise AmqpError(NOT_IMPLEMENTED, "prefetch_size != 0 is not supported", (60, 10))
        change = method.prefetch_count - self.prefetch
        self.prefetch = method.prefetch_count
        for reader in self.consumers.values():  # a changed prefetch applies to them all
            consumer = reader.consumer
            if consumer is None or reader.no_ack:
                continue
            if not self.prefetch:
                consumer.credit = UNLIMITED_WINDOW
            else:
                consumer.credit = max(consumer.credit + change, 0)
            self._credited.add(consumer)
        self.send(commands.Basic.QosOk())

    def deliver(self, reader: AmqpConsumer, consumer: BrokerConsumer, entry: Entry) -> None:
        """Write ``entry``'s delivery to ``reader`` (a consumer's, or a ``basic.get``'s)."""
        tag = self._next_tag
        self._next_tag += 1
        if not reader.no_ack or reader.stream:
            self.unacked[tag] = (reader, consumer, entry.seq)
        message = entry.message
        frame_max = self.writer.frame_max
        if reader.stream or message.expiration:  # a header or property of this delivery's own
            props = to_properties(message, self.writer.now())
            if reader.stream:
                headers = props.setdefault("headers", {})
                headers["x-stream-offset"] = entry.seq
            content = codec.content(self.number, props, message.body, frame_max)
        else:
            content = shared_content(self.number, message, frame_max)
        exchange = message.properties.get(EXCHANGE_PROPERTY)
        key = message.properties.get(ROUTING_KEY_PROPERTY)
        redelivered = entry.redelivered or entry.delivery_count > 1
        if reader is self._getters.get((reader.address, reader.no_ack)):
            reader.got = entry
            dest = consumer.queue
            left = getattr(dest, "ready", 0)
            head = codec.get_ok(
                self.number,
                tag,
                redelivered,
                str(exchange or ""),
                str(key if key is not None else reader.queue),
                max(left, 0),
            )
        else:
            head = codec.deliver(
                self.number,
                reader.tag,
                tag,
                redelivered,
                str(exchange or ""),
                str(key if key is not None else reader.queue),
            )
        data = head + content
        self.writer.write(data)
        if reader.no_ack and not reader.stream:
            reader.owed += 1
            self._owing.add(reader)
        self.writer.delivered(consumer, entry, len(data))

    def written(self) -> None:
        """The deliveries queued were written: give no-ack consumers their credit back."""
        owing, self._owing = self._owing, set()
        for reader in owing:
            if reader.consumer is not None and reader.owed and reader.tag in self.consumers:
                BrokerSession.add_credit(reader.consumer, reader.owed)
            reader.owed = 0

    def push_credited(self) -> None:
        """Push the consumers the settlements of one read gave credit."""
        credited, self._credited = self._credited, set()
        for consumer in credited:
            BrokerSession.push(consumer)

    def get(self, method: commands.Basic.Get) -> None:
        queue = method.queue or self.last_queue
        address, _ = self.entities.find(queue)
        if parse(address).kind is Kind.STREAM:
            raise AmqpError(NOT_IMPLEMENTED, "basic.get not supported by stream queues", (60, 70))
        key = (address, bool(method.no_ack))
        getter = self._getters.get(key)
        if getter is None:
            getter = AmqpConsumer(self, "", queue, address, no_ack=method.no_ack)
            getter.early = None
            consumer_id = self._next_consumer
            self._next_consumer += 1
            self._getters[key] = getter  # its first delivery may come as it opens
            try:
                getter.consumer = self.session.consumer(
                    consumer_id,
                    address,
                    getter,
                    prefetch=1,
                    ack_mode=AckMode.AUTO if method.no_ack else None,
                )
            except ChuteError as exc:
                del self._getters[key]
                raise from_chute(exc, (60, 70)) from None
        else:
            assert getter.consumer is not None  # noqa: S101 (opened above)
            BrokerSession.add_credit(getter.consumer, 1)
        consumer = getter.consumer
        assert consumer is not None  # noqa: S101
        self.entities.used(queue)
        got, getter.got = getter.got, None
        consumer.credit = 0  # nothing more than what this get took
        if got is None:
            self.send(commands.Basic.GetEmpty())

    # -- settling ------------------------------------------------------------------------

    def _tags(self, tag: int, multiple: bool, method: tuple[int, int]) -> list[int]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                return list(unacked)
            if tag not in unacked and not any(t < tag for t in unacked):
                raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
            return [t for t in unacked if t <= tag]
        if tag not in unacked:
            raise AmqpError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
        return [tag]

    def ack(self, tag: int, multiple: bool) -> None:
        session = self.tx or self.session
        for number in self._tags(tag, multiple, (60, 80)):
            reader, consumer, seq = self.unacked.pop(number)
            if reader.stream or consumer.closed:
                self._settled(reader, consumer)
                continue
            try:
                session.ack(consumer, seq, cumulative=False)
            except ChuteError as exc:
                raise from_chute(exc, (60, 80)) from None
            self._settled(reader, consumer)

    def nack(self, tag: int, multiple: bool, requeue: bool, method: tuple[int, int]) -> None:
        session = self.tx or self.session
        for number in self._tags(tag, multiple, method):
            reader, consumer, seq = self.unacked.pop(number)
            if not reader.stream and not consumer.closed:
                try:
                    session.nack(consumer, seq, requeue=requeue)
                except ChuteError as exc:
                    raise from_chute(exc, method) from None
            self._settled(reader, consumer)

    def _settled(self, reader: AmqpConsumer, consumer: BrokerConsumer) -> None:
        if consumer.id in self.stopped:
            if not any(r is reader for r, _, _ in self.unacked.values()):
                self._close_consumer(reader)
            return
        if not consumer.closed and reader.tag in self.consumers:
            consumer.credit += 1
            self._credited.add(consumer)

    def recover(self, requeue: bool) -> None:
        if not requeue:
            raise AmqpError(NOT_IMPLEMENTED, "basic.recover with requeue=false", (60, 110))
        for number in list(self.unacked):
            reader, consumer, seq = self.unacked.pop(number)
            if not reader.stream and not consumer.closed:
                self.session.nack(consumer, seq, requeue=True)
            self._settled(reader, consumer)

    # -- transactions ----------------------------------------------------------------------

    def tx_select(self) -> None:
        if self.confirming:
            raise AmqpError(
                PRECONDITION_FAILED,
                "cannot switch from confirm to tx mode: use another channel",
                (90, 10),
            )
        if self.tx is None:
            self.tx = self.core.session(AckMode.INDIVIDUAL, transacted=True)
        self.send(commands.Tx.SelectOk())

    def tx_commit(self) -> None:
        tx = self._require_tx((90, 20))
        try:
            tx.commit()
        except ChuteError as exc:
            raise from_chute(exc, (90, 20)) from None

        def committed(error: BaseException | None) -> None:
            if self.closing:
                return
            if error is not None:
                self.writer.fail(self.number, AmqpError(INTERNAL_ERROR, f"not stored: {error}"))
                return
            self.send(commands.Tx.CommitOk())

        self.writer.after_sync(committed)

    def tx_rollback(self) -> None:
        tx = self._require_tx((90, 30))
        tx.rollback()
        self.send(commands.Tx.RollbackOk())

    def _require_tx(self, method: tuple[int, int]) -> BrokerSession:
        if self.tx is None:
            raise AmqpError(
                PRECONDITION_FAILED, "channel is not transactional: send tx.select first", method
            )
        return self.tx

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """The channel ends: unsettled deliveries go back, an open transaction rolls back,
        auto-delete queues whose last consumer this was go."""
        queues = {r.queue for r in self.consumers.values()} | {
            r.queue for r in self.stopped.values()
        }
        self.consumers.clear()
        self.stopped.clear()
        self.unacked.clear()
        self._getters.clear()
        self._owing.clear()
        self._credited.clear()
        if self.tx is not None:
            self.tx.close()
        self.session.close()
        for queue in queues:
            try:
                self._maybe_auto_delete(queue)
            except AmqpError:
                continue


def _plain(props: Any) -> dict[str, Any]:
    return {name: getattr(props, name, None) for name, _ in codec.PROPERTY_FLAGS}
