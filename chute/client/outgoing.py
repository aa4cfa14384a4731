"""What a producer's messages become on the wire: their content blocks.

:func:`content_of` checks and encodes one message's fields (the body, the
producer's headers, typed properties; a new id unless one is given), for
``send``; :func:`contents_of` does it for each item of a ``send_many`` and groups
the blocks into runs, one SendMany packet each. The common message of ``send``
(bytes body, nothing else) skips both: :func:`chute.protocol.splice.plain_send_encoder`
packs its whole packet at once.

Pure functions: safe on any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, NamedTuple

from chute.content import encode_fields
from chute.errors import InvalidMessage, LocalProtocolError
from chute.message import (
    DEFAULT_PRIORITY,
    BodyKind,
    Message,
    check_id,
    check_priority,
    check_properties,
    new_message_id,
)
from chute.protocol.packets import SEND_MANY_MAX

SEND_MANY_BYTES: Final = 1 << 20
"""Content bytes one SendMany packet carries at most: a longer run of messages goes in
several, so the broker handles one while the next is encoded."""


class SendOptions(NamedTuple):
    """What a send says of its message besides the address and body: ``send``'s
    keyword arguments (:meth:`chute.client.api.Session.send` documents each), as one
    value from the session through the link to :meth:`ClientProtocol.send
    <chute.client.protocol.ClientProtocol.send>` and :func:`content_of`, which take
    any :data:`SendFields`: a session's hot path passes the plain tuple of its
    fields, in this order (a plain tuple is made and unpacked faster than a
    subclass), other callers a ``SendOptions``."""

    priority: int = DEFAULT_PRIORITY
    ttl: int = 0
    properties: Mapping[str, Any] | None = None
    persistent: bool = True
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    id: str | None = None
    kind: BodyKind | None = None


SendFields = tuple[
    int,
    int,
    Mapping[str, Any] | None,
    bool,
    str | None,
    str | None,
    str | None,
    str | None,
    BodyKind | None,
]
"""The fields of a :class:`SendOptions`, in its order, as a plain tuple."""

DEFAULT_OPTIONS: Final = SendOptions()
"""``send``'s defaults: a persistent message, priority 4, no expiry, no headers."""


def content_of(body: bytes | str, options: SendFields = DEFAULT_OPTIONS) -> bytes:
    """One message's content block: a ``str`` body as UTF-8 ``text`` (unless
    ``options.kind`` says otherwise), a new id if ``options.id`` is None (``ttl`` is
    the packet's, not the content's).

    Raises:
        InvalidMessage: a bad body, priority, id or property, or a field the wire
            cannot carry (over 64 KiB, ...).
    """
    priority, _ttl, properties, persistent, correlation_id, reply_to, type, id, kind = options
    data: bytes
    if body.__class__ is bytes:
        data = body
        kind = kind or BodyKind.BYTES
    elif isinstance(body, str):
        data = body.encode()
        kind = kind or BodyKind.TEXT
    elif isinstance(body, bytearray | memoryview):
        data = bytes(body)
        kind = kind or BodyKind.BYTES
    else:
        raise InvalidMessage(f"body must be bytes or str, not {body.__class__.__name__}")
    if priority.__class__ is not int or not 0 <= priority <= 9:
        check_priority(priority)
    try:
        return encode_fields(
            data,
            new_message_id() if id is None else check_id(id),
            priority,
            persistent,
            kind,
            correlation_id,
            reply_to,
            type,
            check_properties(properties) if properties else None,
        )
    except LocalProtocolError as exc:
        raise InvalidMessage(exc.reason) from exc


def send_item(item: bytes | str | Message, ttl: int = 0) -> tuple[bytes | str, SendOptions]:
    """The body and options one of ``send_many``'s ``messages`` is sent with: a body
    with ``send``'s defaults, a Message with its fields (a new id if it has none);
    ``ttl`` either way.

    Raises:
        InvalidMessage: an item of another type.
    """
    if isinstance(item, Message):
        return item.body, SendOptions(
            item.priority,
            ttl,
            item.properties,
            item.persistent,
            item.correlation_id,
            item.reply_to,
            item.type,
            item.id or None,
            item.kind,
        )
    if isinstance(item, bytes | str):
        return item, DEFAULT_OPTIONS._replace(ttl=ttl) if ttl else DEFAULT_OPTIONS
    raise InvalidMessage(
        f"send_many takes bytes, str or Message items, not {item.__class__.__name__}"
    )


def contents_of(messages: Iterable[bytes | str | Message]) -> Iterator[list[bytes]]:
    """The content blocks of ``messages`` (a body with ``send``'s defaults; a Message
    with its fields, a new id if it has none), in runs of at most
    :data:`SEND_MANY_BYTES` and :data:`~chute.protocol.packets.SEND_MANY_MAX`
    messages: one SendMany each.

    Raises:
        InvalidMessage: a bad item or field (before the run holding it is yielded).
    """
    run: list[bytes] = []
    size = 0
    for item in messages:
        content = content_of(*send_item(item))
        if run and (size + len(content) > SEND_MANY_BYTES or len(run) == SEND_MANY_MAX):
            yield run
            run, size = [], 0
        run.append(content)
        size += len(content)
    if run:
        yield run
