"""What AMQP declares, over chute's destinations: queues (with their x-arguments) and
the exchanges' bindings, as one channel asks for them.

A declared queue ``N`` is chute's ``queue:N`` (:mod:`chute.amqp.names` escapes what
chute's names cannot carry), shared with every protocol; ``x-queue-type: stream``
makes ``stream:N``. What AMQP adds to a queue (exclusive to a connection, deleted with
its last consumer, its x-arguments) is kept in the broker's
:class:`~chute.core.rules.exchanges.Exchanges` (``queues``), so every connection sees it.

Pure: no sockets. Used from the broker's loop only.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chute.amqp import names
from chute.amqp.codes import (
    ACCESS_REFUSED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    RESOURCE_LOCKED,
    AmqpError,
)
from chute.amqp.dead_letter import DeadLetterExchange
from chute.core.model.address import Kind, parse
from chute.core.model.queue import QueueChannel
from chute.core.model.settings import Overflow
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.access import Action
from chute.core.rules.exchanges import Exchanges, QueueDeclaration, bridged
from chute.errors import ChuteError, InvalidAddress, NotFound

if TYPE_CHECKING:
    from chute.core.rules.broker import Broker

log = logging.getLogger("chute.amqp")

_OVERFLOW = {
    "drop-head": Overflow.DROP_OLDEST,
    "reject-publish": Overflow.REJECT,
    "reject-publish-dlx": Overflow.DEAD_LETTER,
}


def generated_name() -> str:
    """A server-named queue's name, RabbitMQ's shape: ``amq.gen-`` and 22 base64url chars."""
    return "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def address_of(name: str, declaration: QueueDeclaration | None = None) -> str:
    """The chute address of AMQP queue ``name``.

    Raises:
        AmqpError: 406 for a name chute cannot carry.
    """
    try:
        chute_name = names.to_chute(name)
    except InvalidAddress as exc:
        raise AmqpError(PRECONDITION_FAILED, exc.reason) from None
    kind = "stream" if declaration is not None and declaration.stream else "queue"
    return f"{kind}:{chute_name}"


def amqp_name(address: str) -> str:
    """The AMQP name of a chute queue address."""
    return names.to_amqp(parse(address).name)


class Declarations:
    """One connection's view of the AMQP entities (see the module docstring)."""

    def __init__(self, core: BrokerConnection) -> None:
        self.core = core
        self.broker = core.broker
        self.exchanges: Exchanges = core.broker.exchanges

    def find(self, name: str) -> tuple[str, QueueDeclaration | None]:
        """The address of queue ``name`` and its declaration, whoever made it.

        Raises:
            AmqpError: 404 it does not exist, 405 another connection's exclusive queue.
        """
        declaration = self.exchanges.queues.get(name)
        address = address_of(name, declaration)
        found = self.broker.find(address)
        if found is None:
            stream = self.broker.find(f"stream:{names.to_chute(name)}")
            if stream is None:
                raise AmqpError(NOT_FOUND, f"no queue '{name}' in vhost '/'")
            return str(stream.address), declaration
        self.check_exclusive(name, declaration)
        return address, declaration

    def check_exclusive(self, name: str, declaration: QueueDeclaration | None) -> None:
        if declaration is not None and declaration.owner not in (None, self.core.id):
            raise AmqpError(
                RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '/'. It "
                "could be originally declared on another connection or the exclusive "
                "property value does not match that of the original declaration.",
            )

    def declare_queue(
        self,
        name: str,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any] | None,
    ) -> tuple[str, str, int, int]:
        """Declare (or check) a queue; returns its name, address, ready messages and
        consumers.

        Raises:
            AmqpError: 404 passive and missing, 405 another's exclusive queue, 406 an
                inequivalent redeclare or a bad argument, 403 not permitted.
        """
        if passive:
            address, _ = self.find(name)
            return (name, address, *self._counts(address))
        if not name:
            name = generated_name()
        elif (
            name.startswith("amq.")
            and name not in self.exchanges.queues
            and self.broker.find(address_of(name)) is None
        ):
            raise AmqpError(
                ACCESS_REFUSED,
                f"queue name '{name}' contains reserved prefix 'amq.*': choose another name",
            )
        args = dict(arguments or {})
        declaration = QueueDeclaration(
            durable=durable,
            auto_delete=auto_delete,
            owner=self.core.id if exclusive else None,
            arguments=tuple(sorted((k, _hashable(v)) for k, v in args.items())),
            stream=str(args.get("x-queue-type", "")) == "stream",
        )
        known = self.exchanges.queues.get(name)
        if known is not None:
            self.check_exclusive(name, known)
            _check_equivalent(name, known, declaration)
            address = address_of(name, known)
            if self.broker.find(address) is not None:
                self.used(name)
                return (name, address, *self._counts(address))
        address = address_of(name, declaration)
        if self.broker.find(address) is None:
            self.core.authorize(Action.CREATE, address)
        dest = self.broker.destination(address, maker=self.core.login)
        apply_arguments(self.broker, dest, args)
        self.exchanges.declare_queue(name, declaration)
        return (name, address, *self._counts(address))

    def used(self, name: str) -> None:
        """Queue ``name`` was consumed, got from or declared again: its ``x-expires``
        starts again."""
        expiries = self.exchanges.sweeper
        if isinstance(expiries, QueueExpiries):
            expiries.used(name)

    def _counts(self, address: str) -> tuple[int, int]:
        dest = self.broker.find(address)
        if isinstance(dest, QueueChannel):
            return dest.ready + dest.pager.count, len(dest.router.consumers)
        return 0, 0

    def delete_queue(self, name: str, *, if_unused: bool, if_empty: bool) -> int:
        """Delete queue ``name`` (a missing one: 0, as AMQP allows); its bindings go too.

        Raises:
            AmqpError: 405 another's exclusive queue, 406 if-unused/if-empty unmet, 403.
        """
        try:
            address, _ = self.find(name)
        except AmqpError as exc:
            if exc.reply_code == NOT_FOUND:
                return 0
            raise
        dest = self.broker.find(address)
        if isinstance(dest, QueueChannel):
            if if_unused and dest.router.consumers:
                raise AmqpError(PRECONDITION_FAILED, f"queue '{name}' in vhost '/' in use")
            if if_empty and dest.ready + dest.pager.count:
                raise AmqpError(PRECONDITION_FAILED, f"queue '{name}' in vhost '/' is not empty")
        count = self.core.delete(address, force=True)
        self.forget(name, address)
        return count

    def forget(self, name: str, address: str) -> None:
        """Queue ``name`` is gone: its declaration, bindings and topic bridges too."""
        self.exchanges.forget_queue(name)
        self.exchanges.dead_letters.pop(address, None)
        for exchange, binding in self.exchanges.unbind_queue(address):
            if bridged(exchange, binding.key):
                self._unbridge(address, binding.key)

    def purge(self, name: str) -> int:
        address, _ = self.find(name)
        if parse(address).kind is Kind.STREAM:
            raise AmqpError(NOT_IMPLEMENTED, "queue.purge is not supported by stream queues")
        return self.core.purge(address)

    # -- bindings --------------------------------------------------------------------------

    def bind(self, queue: str, exchange: str, key: str, arguments: Mapping[str, Any]) -> None:
        address, declaration = self.find(queue)
        self.core.authorize(Action.CREATE, address)
        found = self.exchanges.get(exchange) if exchange else None
        durable = declaration is None or (declaration.durable and declaration.owner is None)
        binding = self.exchanges.bind(
            exchange, address, key, dict(arguments or {}), durable=durable
        )
        if found is not None and bridged(found, binding.key):
            topic = address_of(key).replace("queue:", "topic:", 1)
            self.core.callback(topic, _bridge_name(address, key), address)

    def unbind(self, queue: str, exchange: str, key: str, arguments: Mapping[str, Any]) -> None:
        address, _ = self.find(queue)
        found = self.exchanges.exchanges.get(exchange)
        removed = self.exchanges.unbind(exchange, address, key, dict(arguments or {}))
        if removed is not None and found is not None and bridged(found, key):
            self._unbridge(address, key)

    def _unbridge(self, address: str, key: str) -> None:
        with contextlib.suppress(NotFound):  # a bridge already gone is fine
            self.core.unsubscribe(_bridge_name(address, key))

    def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        exchange = self.exchanges.delete(name, if_unused=if_unused)
        if exchange is None:
            return
        for binding in exchange.bindings:
            if bridged(exchange, binding.key):
                self._unbridge(binding.queue, binding.key)


class QueueExpiries:
    """The queues declared with ``x-expires``: each is deleted (its messages and bindings
    too) once it went that long without a consumer, a ``basic.get`` or a redeclare, as
    in RabbitMQ; an exclusive one goes with its connection instead. Swept on the
    broker's tick (a few times a second), so a queue goes up to a tick late."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._watched: dict[str, list[int]] = {}  # name -> [after_ms, last used (ms)]
        self._deleter: Declarations | None = None

    def watch(self, name: str, after_ms: int) -> None:
        self._watched[name] = [after_ms, self.broker.clock()]

    def used(self, name: str) -> None:
        watched = self._watched.get(name)
        if watched is not None:
            watched[1] = self.broker.clock()

    def sweep(self, now: int) -> None:
        if not self._watched:
            return
        queues = self.broker.exchanges.queues
        for name, watched in list(self._watched.items()):
            declaration = queues.get(name)
            dest = self.broker.find(address_of(name, declaration)) if declaration else None
            if dest is None:
                del self._watched[name]  # deleted already
                continue
            if getattr(getattr(dest, "router", None), "consumers", None):
                watched[1] = now  # in use
                continue
            if now - watched[1] < watched[0] or declaration is None or declaration.owner:
                continue
            del self._watched[name]
            if self._deleter is None:  # the broker's own: may delete any queue
                self._deleter = Declarations(BrokerConnection(self.broker, protocol="amqp"))
            try:
                count = self._deleter.delete_queue(name, if_unused=False, if_empty=False)
            except ChuteError as exc:
                log.warning("AMQP queue %r (x-expires) not deleted: %s", name, exc.reason)
                continue
            log.info(
                "AMQP queue %r deleted: unused for its x-expires (%d ms); %d messages went",
                name,
                watched[0],
                count,
            )


def apply_arguments(broker: Broker, dest: object, args: Mapping[str, Any]) -> None:
    """Apply to queue (or stream) ``dest`` the x-arguments chute's queue settings carry.

    Raises:
        AmqpError: 406 for a bad argument.
    """
    if not isinstance(dest, QueueChannel | Stream):
        return
    settings = dest.settings
    changes: dict[str, Any] = {}
    for key, field in (("x-max-length", "max_messages"), ("x-max-length-bytes", "max_bytes")):
        if key in args:
            changes[field] = _natural(key, args[key])
    if "x-max-age" in args and isinstance(dest, Stream):
        changes["max_age_ms"] = _age_ms(str(args["x-max-age"]))
    overflow = args.get("x-overflow")
    if overflow is not None:
        policy = _OVERFLOW.get(str(overflow))
        if policy is None:
            raise AmqpError(
                PRECONDITION_FAILED,
                f"invalid arg 'x-overflow': {overflow!r}: use drop-head, reject-publish or "
                "reject-publish-dlx",
            )
        changes["overflow"] = policy
    elif "max_messages" in changes or "max_bytes" in changes:
        changes["overflow"] = Overflow.DROP_OLDEST  # RabbitMQ's default: drop-head
    dlx = args.get("x-dead-letter-exchange")
    if dlx is not None and not isinstance(dest, Stream):
        routing_key = args.get("x-dead-letter-routing-key")
        if str(dlx) == "" and routing_key:
            changes["dead_letter"] = address_of(str(routing_key))
        broker.exchanges.dead_letters[str(dest.address)] = DeadLetterExchange(
            broker.exchanges,
            broker,
            str(dlx),
            None if routing_key is None else str(routing_key),
        )
    if "x-message-ttl" in args:
        _natural("x-message-ttl", args["x-message-ttl"])
    if (
        "x-max-priority" in args
        and not 1 <= _natural("x-max-priority", args["x-max-priority"]) <= 255
    ):
        raise AmqpError(PRECONDITION_FAILED, "invalid arg 'x-max-priority': must be from 1 to 255")
    if not isinstance(args.get("x-single-active-consumer", False), bool):
        raise AmqpError(
            PRECONDITION_FAILED, "invalid arg 'x-single-active-consumer': must be a boolean"
        )
    if "x-expires" in args:
        after = _natural("x-expires", args["x-expires"])
        if after == 0:
            raise AmqpError(PRECONDITION_FAILED, "invalid arg 'x-expires': must be above 0")
        expiries = broker.exchanges.sweeper
        if not isinstance(expiries, QueueExpiries):
            expiries = broker.exchanges.sweeper = QueueExpiries(broker)
        expiries.watch(amqp_name(str(dest.address)), after)
    if changes:
        dest.settings = dataclasses.replace(settings, **changes)


def restore_declarations(broker: Broker) -> None:
    """Once the broker recovered: apply again what the declares of durable queues said
    (their x-arguments), as the store kept them (:meth:`Exchanges.restore`); the
    declaration of a queue deleted since (by another protocol) goes."""
    for name, declaration in list(broker.exchanges.queues.items()):
        dest = broker.find(address_of(name, declaration))
        if dest is None:
            broker.exchanges.forget_queue(name)
            continue
        try:
            apply_arguments(broker, dest, dict(declaration.arguments))
        except AmqpError as exc:
            log.warning("AMQP queue %r: its stored arguments not applied: %s", name, exc)


def _bridge_name(address: str, key: str) -> str:
    """The callback subscription that bridges ``topic:key`` to a bound queue."""
    return f"amqp.{parse(address).name}.{names.to_chute(key)}"[:200]


def _natural(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AmqpError(
            PRECONDITION_FAILED, f"invalid arg '{key}': {value!r} is not a non-negative integer"
        )
    return value


def _age_ms(text: str) -> int:
    units = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}
    if text and text[-1] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]] * 1000
    raise AmqpError(PRECONDITION_FAILED, f"invalid arg 'x-max-age': {text!r} (e.g. 7D, 12h)")


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _check_equivalent(name: str, known: QueueDeclaration, wanted: QueueDeclaration) -> None:
    for what, mine, theirs in (
        ("durable", known.durable, wanted.durable),
        ("auto_delete", known.auto_delete, wanted.auto_delete),
        ("exclusive", known.owner is not None, wanted.owner is not None),
    ):
        if mine != theirs:
            raise AmqpError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{what}' for queue '{name}' in vhost '/': received "
                f"{theirs!r} but current is {mine!r}",
            )
    mine_args, their_args = dict(known.arguments), dict(wanted.arguments)
    for key in sorted(set(mine_args) | set(their_args)):
        if key.startswith("x-") and mine_args.get(key) != their_args.get(key):
            raise AmqpError(
                PRECONDITION_FAILED,
                f"inequivalent arg '{key}' for queue '{name}' in vhost '/': received "
                f"{their_args.get(key)!r} but current is {mine_args.get(key)!r}",
            )
