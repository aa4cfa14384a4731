"""Where a message published to an AMQP exchange with a routing key goes: the chute
addresses it reaches, each with what AMQP declared of that queue (its ``x-message-ttl``,
``x-max-priority``, ``x-single-active-consumer``).

The default exchange (``""``) reaches the queue named by the key, if it exists; every
other exchange routes by its bindings (:class:`~chute.core.rules.exchanges.Exchanges`),
and ``amq.topic`` reaches chute's ``topic:KEY`` too while it has subscribers. Used for
publishes and for dead letters alike.

Pure: no sockets. Used from the broker's loop only.
"""

from __future__ import annotations

from typing import Any

from chute.amqp import names
from chute.core.model.address import parse
from chute.core.model.registry import Registry
from chute.core.model.topic import Topic
from chute.core.rules.exchanges import DEFAULT, TOPIC_BRIDGE, Exchanges, QueueDeclaration

Target = tuple[str, QueueDeclaration | None]


def route(
    exchanges: Exchanges, broker: Registry, exchange: str, key: str, headers: Any
) -> list[Target]:
    """The addresses a message published to ``exchange`` with ``key`` reaches.

    Raises:
        NotFound: no such exchange.
        InvalidAddress: a key chute cannot carry as a queue's name (default exchange).
    """
    queues = exchanges.queues
    if exchange == DEFAULT:
        if not key:
            return []
        declaration = queues.get(key)
        kind = "stream" if declaration is not None and declaration.stream else "queue"
        address = f"{kind}:{names.to_chute(key)}"
        return [(address, declaration)] if broker.find(address) is not None else []
    addresses = exchanges.route(exchange, key, headers)
    out = [(a, queues.get(names.to_amqp(parse(a).name)) if queues else None) for a in addresses]
    if exchange == TOPIC_BRIDGE and key:
        found = broker.find(f"topic:{names.to_chute(key)}")
        if isinstance(found, Topic) and found.subscriptions:
            out.append((str(found.address), None))
    return out


def queue_ttl(declaration: QueueDeclaration | None) -> int:
    """A queue's ``x-message-ttl`` in ms (0: none; a TTL of 0 is 1 ms: gone unless
    delivered at once)."""
    if declaration is None or not any(k == "x-message-ttl" for k, _ in declaration.arguments):
        return 0
    return declaration.number("x-message-ttl") or 1


def single_active(declaration: QueueDeclaration | None) -> bool:
    """Whether a queue was declared with ``x-single-active-consumer``: each of its
    consumers is one of chute's exclusive ones, so the first attached receives and the
    others stand by, taking over in the order they came as it goes."""
    return declaration is not None and any(
        k == "x-single-active-consumer" and v is True for k, v in declaration.arguments
    )
