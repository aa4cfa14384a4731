"""AMQP's exchanges over chute's destinations: which queues a message published to an
exchange with a routing key (and headers) reaches.

An exchange is a routing table in front of chute's queues; it stores nothing. Its
type decides how a binding's key matches (RabbitMQ's rules):

- ``direct``: the routing key equals the binding key;
- ``fanout``: every bound queue;
- ``topic``: the binding key is a pattern of ``.``-separated words where ``*`` is
  one word and ``#`` zero or more;
- ``headers``: the binding's arguments match the message's headers, all of them
  (``x-match: all``, the default) or any (``x-match: any``); the ``-with-x``
  forms count ``x-`` arguments too.

The default exchange (``""``) routes a key to the queue of that name and takes no
bindings. ``amq.direct``, ``amq.fanout``, ``amq.topic``, ``amq.headers`` and
``amq.match`` always exist. ``amq.topic`` meets chute's topics the way RabbitMQ's
STOMP plugin does: a message published there with key K also goes to
``topic:K``, and a binding with a plain key (no ``*`` or ``#``) is *bridged*: the
queue subscribes to ``topic:K`` (so a message sent to the topic from any protocol
reaches it, once) instead of matching in this table.

Durability: an exchange declared durable is kept in the store (a definition of kind
``exchange``), and so is a binding of a durable queue to a durable exchange (kind
``binding``) and what the declare of a durable, not exclusive queue said (kind
``declaration``: its flags and x-arguments, which the AMQP layer applies to the queue
again once the broker recovered); all come back on restart (:meth:`Exchanges.restore`).
Bridged bindings of ``amq.topic`` are durable as the topic subscriptions they are.

Pure: no sockets, no files; used from the broker's loop only.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import enum
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Protocol

from chute.core.model.store import QueueDefinition, QueueKind, Store
from chute.errors import AccessDenied, ChuteError, NotFound
from chute.message import Message

log = logging.getLogger("chute.broker")

DEFAULT: Final = ""
TOPIC_BRIDGE: Final = "amq.topic"
RESERVED_PREFIX: Final = "amq."


class ExchangeError(ChuteError):
    """A declare that does not match the exchange already there, or a delete refused."""

    code = "precondition-failed"


class ExchangeType(enum.Enum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"


@dataclass(frozen=True, slots=True)
class Binding:
    """A queue (its chute address) bound to an exchange with a key and arguments."""

    queue: str
    key: str
    arguments: tuple[tuple[str, Any], ...] = ()


@dataclass(slots=True)
class Exchange:
    name: str
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    bindings: dict[Binding, None] = field(default_factory=dict)  # in binding order


def bridged(exchange: Exchange, key: str) -> bool:
    """A binding of ``key`` to ``exchange`` is a subscription of ``topic:key``."""
    return exchange.name == TOPIC_BRIDGE and "*" not in key and "#" not in key


class DeadLettering(Protocol):
    """Where a queue's dead letters go through an exchange (AMQP's
    ``x-dead-letter-exchange``, made by ``chute.amqp.dead_letter``)."""

    def divert(
        self, queue: str, message: Message, reason: str, now: int
    ) -> list[tuple[str, Message]]:
        """The addresses ``message``, which left ``queue`` unconsumed for ``reason`` (a
        ``Reason`` value) at ``now`` (ms), goes to, each with the copy it gets there
        (none: it is dropped)."""
        ...


class Sweeper(Protocol):
    """What the broker's tick asks of AMQP's queues (``x-expires``: deleting the unused)."""

    def sweep(self, now: int) -> None: ...


class Exchanges:
    """Every exchange of the broker's one virtual host (``/``)."""

    def __init__(self, store: Callable[[], Store] | None = None) -> None:
        self._store = store  # the broker's record sink, for durable exchanges and bindings
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, QueueDeclaration] = {}
        """What AMQP declares said of queues, by AMQP name (``chute.amqp.entities``)."""
        self.dead_letters: dict[str, DeadLettering] = {}
        """Queues (by chute address) whose dead letters go through an exchange."""
        self.sweeper: Sweeper | None = None
        """Called on every tick of the broker once a queue was declared with ``x-expires``."""
        for name, kind in (
            ("amq.direct", ExchangeType.DIRECT),
            ("amq.fanout", ExchangeType.FANOUT),
            (TOPIC_BRIDGE, ExchangeType.TOPIC),
            ("amq.headers", ExchangeType.HEADERS),
            ("amq.match", ExchangeType.HEADERS),
        ):
            self.exchanges[name] = Exchange(name, kind)

    def get(self, name: str) -> Exchange:
        """The exchange ``name``.

        Raises:
            NotFound: there is none (the default exchange is never looked up here).
        """
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise NotFound(f"no exchange '{name}' in vhost '/'")
        return exchange

    def declare(
        self,
        name: str,
        kind: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
    ) -> Exchange:
        """Declare an exchange (``passive``: only check that it exists).

        Raises:
            AccessDenied: the default exchange, or a new name with the ``amq.`` prefix.
            NotFound: passive, and it does not exist.
            ExchangeError: an unknown type, or it exists with other properties.
        """
        if name == DEFAULT:
            raise AccessDenied("operation not permitted on the default exchange")
        found = self.exchanges.get(name)
        if passive:
            if found is None:
                raise NotFound(f"no exchange '{name}' in vhost '/'")
            return found
        try:
            exchange_type = ExchangeType(kind)
        except ValueError:
            raise ExchangeError(
                f"invalid exchange type '{kind}': use direct, fanout, topic or headers"
            ) from None
        if found is not None:
            for what, mine, theirs in (
                ("type", found.type.value, exchange_type.value),
                ("durable", found.durable, durable),
                ("auto_delete", found.auto_delete, auto_delete),
                ("internal", found.internal, internal),
            ):
                if mine != theirs and not name.startswith(RESERVED_PREFIX):
                    raise ExchangeError(
                        f"inequivalent arg '{what}' for exchange '{name}' in vhost '/': "
                        f"received {theirs!r} but current is {mine!r}"
                    )
            return found
        if name.startswith(RESERVED_PREFIX):
            raise AccessDenied(
                f"exchange name '{name}' contains reserved prefix 'amq.*': choose another name"
            )
        exchange = Exchange(name, exchange_type, durable, auto_delete, internal)
        self.exchanges[name] = exchange
        if durable:
            self._define(_exchange_definition(exchange))
        return exchange

    def delete(self, name: str, *, if_unused: bool = False) -> Exchange | None:
        """Delete an exchange and its bindings (a missing one: None, as AMQP allows).

        Raises:
            AccessDenied: the default exchange or an ``amq.`` one.
            ExchangeError: ``if_unused`` and it has bindings.
        """
        if name == DEFAULT or name.startswith(RESERVED_PREFIX):
            raise AccessDenied(f"exchange '{name}' cannot be deleted")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return None
        if if_unused and exchange.bindings:
            raise ExchangeError(f"exchange '{name}' in vhost '/' in use")
        self._forget(exchange)
        return exchange

    def _forget(self, exchange: Exchange) -> None:
        del self.exchanges[exchange.name]
        for binding in exchange.bindings:
            self._undefine_binding(exchange, binding)
        if exchange.durable:
            self._undefine(_exchange_key(exchange.name))

    def bind(
        self,
        name: str,
        queue: str,
        key: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        durable: bool = False,
    ) -> Binding:
        """Bind ``queue`` (a chute address) to exchange ``name`` (kept in the store if the
        queue is ``durable`` and so is the exchange).

        Raises:
            AccessDenied: the default exchange. NotFound: no such exchange.
        """
        if name == DEFAULT:
            raise AccessDenied("operation not permitted on the default exchange")
        exchange = self.get(name)
        binding = Binding(queue, key, tuple(sorted((arguments or {}).items())))
        if binding not in exchange.bindings:
            exchange.bindings[binding] = None
            if durable and exchange.durable and not bridged(exchange, key):
                self._define(_binding_definition(exchange, binding))
        return binding

    def unbind(
        self, name: str, queue: str, key: str, arguments: Mapping[str, Any] | None = None
    ) -> Binding | None:
        """Remove a binding (None: there was none). An auto-delete exchange whose last
        binding goes is deleted.

        Raises:
            AccessDenied: the default exchange.
        """
        if name == DEFAULT:
            raise AccessDenied("operation not permitted on the default exchange")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return None
        binding = Binding(queue, key, tuple(sorted((arguments or {}).items())))
        if binding not in exchange.bindings:
            return None
        del exchange.bindings[binding]
        self._undefine_binding(exchange, binding)
        self._maybe_auto_delete(exchange)
        return binding

    def unbind_queue(self, queue: str) -> list[tuple[Exchange, Binding]]:
        """Remove every binding of ``queue`` (the queue was deleted); returns them."""
        removed: list[tuple[Exchange, Binding]] = []
        for exchange in list(self.exchanges.values()):
            for binding in [b for b in exchange.bindings if b.queue == queue]:
                del exchange.bindings[binding]
                self._undefine_binding(exchange, binding)
                removed.append((exchange, binding))
            if removed:
                self._maybe_auto_delete(exchange)
        return removed

    def declare_queue(self, name: str, declaration: QueueDeclaration) -> None:
        """What a declare of AMQP queue ``name`` said; kept in the store if the queue is
        durable and not exclusive (an exclusive one goes with its connection)."""
        self.queues[name] = declaration
        if declaration.durable and declaration.owner is None:
            self._define(_declaration_definition(name, declaration))

    def forget_queue(self, name: str) -> QueueDeclaration | None:
        """AMQP queue ``name`` is gone: its declaration goes (from the store too)."""
        declaration = self.queues.pop(name, None)
        if declaration is not None and declaration.durable and declaration.owner is None:
            self._undefine(_declaration_key(name))
        return declaration

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not exchange.bindings and exchange.name in self.exchanges:
            self._forget(exchange)

    # -- durability ------------------------------------------------------------------------

    def _define(self, definition: QueueDefinition) -> None:
        if self._store is not None:
            self._store().define(definition)

    def _undefine(self, key: str) -> None:
        if self._store is not None:
            self._store().undefine(key)

    def _undefine_binding(self, exchange: Exchange, binding: Binding) -> None:
        if exchange.durable and not bridged(exchange, binding.key):
            self._undefine(_binding_key(exchange, binding))

    def restore(self, definitions: Iterable[QueueDefinition]) -> None:
        """Bring back the durable exchanges, bindings and queue declarations the store
        kept (exchanges first)."""
        ordered = sorted(definitions, key=lambda d: d.kind is QueueKind.BINDING)
        for definition in ordered:
            try:
                data = json.loads(definition.selector or "{}", object_hook=_tagged)
                if definition.kind is QueueKind.DECLARATION:
                    self.queues[data["name"]] = QueueDeclaration(
                        durable=True,
                        auto_delete=bool(data.get("auto_delete")),
                        arguments=_tuples(data.get("arguments", [])),
                        stream=bool(data.get("stream")),
                    )
                elif definition.kind is QueueKind.EXCHANGE:
                    name = data["name"]
                    self.exchanges[name] = Exchange(
                        name,
                        ExchangeType(data["type"]),
                        True,
                        bool(data.get("auto_delete")),
                        bool(data.get("internal")),
                    )
                else:
                    exchange = self.exchanges[data["exchange"]]
                    arguments = tuple((k, v) for k, v in data.get("arguments", []))
                    binding = Binding(data["queue"], data["key"], arguments)
                    exchange.bindings[binding] = None
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipped a stored AMQP %s: %s", definition.kind.value, exc)

    def route(self, name: str, key: str, headers: Mapping[str, Any] | None = None) -> list[str]:
        """The queues (chute addresses, each once, in binding order) a message published to
        exchange ``name`` with routing ``key`` reaches through this table; bridged
        bindings of ``amq.topic`` are reached through the topic instead.

        Raises:
            NotFound: no such exchange.
        """
        exchange = self.get(name)
        out: dict[str, None] = {}
        kind = exchange.type
        for binding in exchange.bindings:
            if binding.queue in out:
                continue
            if kind is ExchangeType.FANOUT:
                hit = True
            elif kind is ExchangeType.DIRECT:
                hit = binding.key == key
            elif kind is ExchangeType.TOPIC:
                hit = not bridged(exchange, binding.key) and topic_matches(binding.key, key)
            else:
                hit = headers_match(dict(binding.arguments), headers or {})
            if hit:
                out[binding.queue] = None
        return list(out)


def topic_matches(pattern: str, key: str) -> bool:
    """Whether routing ``key`` matches topic binding ``pattern`` (``*`` one word, ``#`` zero
    or more)."""
    return _words_match(tuple(pattern.split(".")), tuple(key.split(".")))


@lru_cache(maxsize=8192)
def _words_match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head = pattern[0]
    if head == "#":
        return any(_words_match(pattern[1:], words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head in ("*", words[0])) and _words_match(pattern[1:], words[1:])


def headers_match(arguments: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """A headers exchange's match of a binding's ``arguments`` against message ``headers``."""
    mode = str(arguments.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    wanted = {
        k: v for k, v in arguments.items() if k != "x-match" and (with_x or not k.startswith("x-"))
    }
    if not wanted:
        return mode.startswith("all")
    hits = [k in headers and (v is None or headers[k] == v) for k, v in wanted.items()]
    return any(hits) if mode.startswith("any") else all(hits)


@dataclass(frozen=True, slots=True)
class QueueDeclaration:
    """What an AMQP declare said of a queue beyond chute's queue itself."""

    durable: bool = True
    auto_delete: bool = False
    owner: str | None = None
    """The connection id of an exclusive queue's declarer (None: not exclusive)."""
    arguments: tuple[tuple[str, Any], ...] = ()
    stream: bool = False

    def number(self, key: str) -> int:
        """The integer argument ``key`` (0: absent or not an integer)."""
        for name, value in self.arguments:
            if name == key and isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0


def _exchange_key(name: str) -> str:
    return "amqp-exchange:" + hashlib.sha256(name.encode()).hexdigest()[:40]


def _exchange_definition(exchange: Exchange) -> QueueDefinition:
    data = {
        "name": exchange.name,
        "type": exchange.type.value,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
    }
    return QueueDefinition(
        _exchange_key(exchange.name), QueueKind.EXCHANGE, selector=json.dumps(data)
    )


def _binding_data(exchange: Exchange, binding: Binding) -> str:
    return json.dumps(
        {
            "exchange": exchange.name,
            "queue": binding.queue,
            "key": binding.key,
            "arguments": [list(pair) for pair in binding.arguments],
        },
        default=str,
        sort_keys=True,
    )


def _binding_key(exchange: Exchange, binding: Binding) -> str:
    digest = hashlib.sha256(_binding_data(exchange, binding).encode()).hexdigest()[:40]
    return "amqp-binding:" + digest


def _binding_definition(exchange: Exchange, binding: Binding) -> QueueDefinition:
    return QueueDefinition(
        _binding_key(exchange, binding),
        QueueKind.BINDING,
        selector=_binding_data(exchange, binding),
    )


def _declaration_key(name: str) -> str:
    return "amqp-queue:" + hashlib.sha256(name.encode()).hexdigest()[:40]


def _declaration_definition(name: str, declaration: QueueDeclaration) -> QueueDefinition:
    data = {
        "name": name,
        "auto_delete": declaration.auto_delete,
        "arguments": declaration.arguments,
        "stream": declaration.stream,
    }
    return QueueDefinition(
        _declaration_key(name),
        QueueKind.DECLARATION,
        selector=json.dumps(data, default=_tag, sort_keys=True),
    )


def _tag(value: object) -> object:
    """What JSON cannot hold of an AMQP table's values, tagged (:func:`_tagged` reads it)."""
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$time": value.isoformat()}
    return {"$text": str(value)}


def _tagged(data: dict[str, Any]) -> object:
    if len(data) == 1:
        (tag, text), *_ = data.items()
        if tag == "$bytes":
            return base64.b64decode(text)
        if tag == "$decimal":
            return decimal.Decimal(text)
        if tag == "$time":
            return datetime.datetime.fromisoformat(text)
        if tag == "$text":
            return text
    return data


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples a declaration's arguments are made of."""
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    return value
