"""Dead-lettering through an exchange (``x-dead-letter-exchange``,
``x-dead-letter-routing-key``), with the ``x-death`` header RabbitMQ writes.

A queue declared with a dead-letter exchange sends what leaves it unconsumed (rejected
or nacked without requeue, expired, pushed out by ``x-max-length``/``x-max-length-bytes``
with ``drop-head`` or ``reject-publish-dlx``, delivered ``max_deliveries`` times)
through that exchange: with the dead-letter routing key when one is set, else with the
keys it was published with. Unroutable there, it is dropped (as in RabbitMQ).

Each dead-lettering updates the message's header ``x-death``, an array of tables, newest
first, one per (queue, reason): ``count`` (long), ``reason`` (``rejected``, ``expired``,
``maxlen``, ``delivery_limit``), ``queue``, ``time`` (timestamp of the first time),
``exchange`` and ``routing-keys`` (as published); and ``x-first-death-queue``,
``-reason``, ``-exchange`` (set once) and ``x-last-death-queue``, ``-reason``,
``-exchange`` (every time). A message is not dead-lettered into a queue it already died
in unless it was rejected somewhere on the way (an expiry loop): RabbitMQ drops such
cycles too.

Pure: no sockets. Used from the broker's loop only.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any, Final

from chute.amqp import names
from chute.amqp.codec import table
from chute.amqp.properties import (
    EXCHANGE_PROPERTY,
    HEADERS_PROPERTY,
    ROUTING_KEY_PROPERTY,
    to_properties,
)
from chute.amqp.routing import queue_ttl, route
from chute.core.model.address import parse
from chute.core.model.registry import Registry
from chute.core.rules.exchanges import DEFAULT, Exchanges
from chute.errors import ChuteError
from chute.message import Message

_REASONS: Final = {
    "rejected": "rejected",
    "expired": "expired",
    "overflow": "maxlen",
    "dropped-oldest": "maxlen",
    "max-deliveries": "delivery_limit",
}


@dataclass(frozen=True, slots=True)
class DeadLetterExchange:
    """One queue's dead-letter exchange and routing key (None: the message's own)."""

    exchanges: Exchanges
    broker: Registry
    exchange: str
    key: str | None

    def divert(
        self, queue: str, message: Message, reason: str, now: int
    ) -> list[tuple[str, Message]]:
        name = names.to_amqp(parse(queue).name)
        why = _REASONS.get(reason, reason)
        props = dict(message.properties)
        published_to = str(props.get(EXCHANGE_PROPERTY, DEFAULT))
        keys = [str(props.get(ROUTING_KEY_PROPERTY, name))]
        headers = dict(to_properties(message, now).get("headers") or {})
        deaths = _deaths(headers.get("x-death"))
        same = next((d for d in deaths if d.get("queue") == name and d.get("reason") == why), None)
        if same is not None:
            deaths.remove(same)
            same["count"] = int(same.get("count") or 0) + 1
        else:
            same = {
                "count": 1,
                "reason": why,
                "queue": name,
                "time": datetime.datetime.fromtimestamp(now // 1000, tz=datetime.UTC),
                "exchange": published_to,
                "routing-keys": keys,
            }
        deaths.insert(0, same)
        headers["x-death"] = deaths
        for end in ("first", "last"):
            for part, value in (("queue", name), ("reason", why), ("exchange", published_to)):
                field = f"x-{end}-death-{part}"
                if end == "last" or field not in headers:
                    headers[field] = value
                    props[field] = value
        props[HEADERS_PROPERTY] = base64.b64encode(table(headers)).decode()
        key = self.key if self.key is not None else keys[0]
        props[EXCHANGE_PROPERTY] = self.exchange
        props[ROUTING_KEY_PROPERTY] = key
        copy = message.replace(properties=props)
        try:
            found = route(self.exchanges, self.broker, self.exchange, key, headers)
        except ChuteError:
            found = []  # a dead-letter exchange gone, or a key no queue can have
        rejected = any(d.get("reason") == "rejected" for d in deaths)
        died_in = {d.get("queue") for d in deaths}
        out = []
        for address, declaration in found:
            if not rejected and names.to_amqp(parse(address).name) in died_in:
                continue  # a cycle with no rejection: dropped, as RabbitMQ does
            ttl = queue_ttl(declaration)  # the target queue's x-message-ttl applies from now
            out.append((address, copy.replace(expiration=now + ttl) if ttl else copy))
        return out


def _deaths(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    return [dict(d) for d in value if isinstance(d, dict)]
