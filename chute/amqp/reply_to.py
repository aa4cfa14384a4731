"""Direct reply-to (RabbitMQ's ``amq.rabbitmq.reply-to``): RPC replies without a declared
reply queue.

A requester consumes the pseudo-queue :data:`PSEUDO_QUEUE` with ``no-ack`` and publishes
its requests with ``reply_to`` set to it; the broker rewrites that ``reply_to`` to a name
of the requester's channel (:data:`PSEUDO_QUEUE` ``.`` and 22 random base64url
characters), and a reply published to the default exchange with that name as routing
key reaches the requester's consumer.

On chute's side that name is a queue (``queue:amq.rabbitmq.reply-to.…``), exclusive to
the requester's connection and deleted with its consumer (when it is cancelled, or
its channel or connection closes): a reply once the requester is gone is unroutable
(a ``mandatory`` one comes back with ``basic.return``), as in RabbitMQ. It is made by
the broker, so the requester needs no ``create`` permission for it.

Pure: no sockets. Used from the broker's loop only.
"""

from __future__ import annotations

import base64
import secrets
from typing import Final

from chute.amqp.codes import PRECONDITION_FAILED, AmqpError
from chute.amqp.entities import Declarations, address_of
from chute.core.rules.exchanges import QueueDeclaration

PSEUDO_QUEUE: Final = "amq.rabbitmq.reply-to"


def open_queue(entities: Declarations, no_ack: bool, taken: str | None) -> str:
    """Make the reply queue of a channel consuming :data:`PSEUDO_QUEUE`; returns its name.

    Raises:
        AmqpError: 406 an acknowledging consumer, or a second reply consumer on a channel.
    """
    if not no_ack:
        raise AmqpError(
            PRECONDITION_FAILED,
            f"reply consumer cannot acknowledge: consume '{PSEUDO_QUEUE}' with no_ack=true",
            (60, 20),
        )
    if taken is not None:
        raise AmqpError(
            PRECONDITION_FAILED,
            "reply consumer already set on this channel: cancel it first",
            (60, 20),
        )
    token = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
    name = f"{PSEUDO_QUEUE}.{token}"
    core = entities.core
    entities.broker.destination(address_of(name), maker=core.login)
    entities.exchanges.queues[name] = QueueDeclaration(
        durable=False, auto_delete=True, owner=core.id
    )
    return name


def reply_name(mine: str | None) -> str:
    """What a publish's ``reply_to`` of :data:`PSEUDO_QUEUE` becomes on a channel whose
    reply queue is ``mine``.

    Raises:
        AmqpError: 406 the channel has no reply consumer.
    """
    if mine is None:
        raise AmqpError(
            PRECONDITION_FAILED,
            f"fast reply consumer does not exist: consume '{PSEUDO_QUEUE}' with no_ack=true "
            "on this channel before publishing with it as reply_to",
            (60, 40),
        )
    return mine
