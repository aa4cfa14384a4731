"""MESSAGE frames as bytes, built for speed: the broker's hot path on every delivery.

:func:`chute.stomp.adapter.message_frame` says *what* a MESSAGE frame holds and
:meth:`chute.stomp.codec.StompCodec.send` how a frame is written; doing both for
each delivery costs a header list, a :class:`~chute.stomp.frames.Frame` and the
escaping of every header. A :class:`MessageEncoder` writes the same bytes
(the unit tests compare them) from three pre-encoded parts:

* the subscription's: ``MESSAGE``, ``destination``, ``subscription`` and the
  ``ack`` prefix, escaped once when the subscription opens;
* the message's: ``message-id``, ``priority`` … properties, ``content-length``,
  encoded once per message. The last message encoded is remembered, so a
  topic's fan-out (the same message object delivered to every subscription in
  a row) encodes it once, not once per subscriber;
* the delivery's: ``ack``, ``redelivered`` and ``chute-delivery-count``, a
  constant for a first delivery, and on a stream's subscription
  ``x-stream-offset`` (the entry's sequence number is the message's offset);

then one ``b"".join`` with the body and the NUL.

STOMP 1.0 cannot escape header text: a header of the message whose name or
value holds a line break (or whose name holds ``:``) is left out, as
:func:`~chute.stomp.adapter.message_frame` does.

Pure: no I/O, and safe to share between threads (the memo is one tuple,
replaced whole).
"""

from __future__ import annotations

from typing import Final

from chute.message import BodyKind, Message
from chute.stomp.adapter import (
    DELIVERY_COUNT_HEADER,
    STREAM_OFFSET_HEADER,
    optional_headers,
    property_headers,
)
from chute.stomp.headers import escape

_FIRST_DELIVERY: Final = f"redelivered:false\n{DELIVERY_COUNT_HEADER}:1\n".encode()
_MEMO_MAX_BODY: Final = 64 << 10
"""A message whose body is larger is not remembered (the memo keeps it alive)."""

# (message, escaped, message-id bytes, header block bytes) of the last message encoded
_last: tuple[Message | None, bool, bytes, bytes] = (None, False, b"", b"")


def _header_text(text: str, escaped: bool) -> str:
    return escape(text) if escaped else text


def _message_parts(message: Message, escaped: bool) -> tuple[bytes, bytes]:
    """The message's ``message-id`` value and its headers from ``priority`` to the blank line."""
    global _last  # a one-entry memo, see the module docstring
    last = _last
    if last[0] is message and last[1] is escaped:
        return last[2], last[3]
    body = message.body
    text = (
        f"priority:{message.priority}\ntimestamp:{message.timestamp}\n"
        f"expires:{message.expiration}\npersistent:{'true' if message.persistent else 'false'}\n"
    )
    if (
        message.properties
        or message.correlation_id is not None
        or message.reply_to is not None
        or message.type is not None
        or message.kind is BodyKind.TEXT
    ):
        lines = _lines(optional_headers(message), escaped)
        if message.properties:
            version = "1.2" if escaped else "1.0"
            lines.extend(_lines(property_headers(message.properties, version), escaped))
        if lines:
            text += "\n".join(lines) + "\n"
    block = f"{text}content-length:{len(body)}\n\n".encode()
    message_id = (escape(message.id) if escaped else message.id).encode()
    if len(body) <= _MEMO_MAX_BODY:
        _last = (message, escaped, message_id, block)
    return message_id, block


def _lines(headers: list[tuple[str, str]], escaped: bool) -> list[str]:
    if escaped:
        return [f"{escape(name)}:{escape(value)}" for name, value in headers]
    return [
        f"{name}:{value}"
        for name, value in headers
        if not (":" in name or "\n" in name or "\r" in name or "\n" in value or "\r" in value)
    ]


class MessageEncoder:
    """The MESSAGE frames of one subscription, as bytes.

    Args:
        destination: the subscription's destination, as the client wrote it.
        subscription: the subscription's id.
        ack_prefix: for a client or client-individual subscription, the ack id
            of a delivery without its sequence number (the ``ack`` header is
            ``ack_prefix`` followed by the entry's sequence number); None for
            ``ack:auto``, whose frames have no ``ack`` header.
        version: the connection's STOMP version (1.0 does not escape).
        stream: the subscription reads a stream: each frame carries
            ``x-stream-offset``, the entry's sequence number (see :attr:`whole`).
    """

    __slots__ = ("_ack", "_escaped", "_head", "_offset", "_sub", "whole")

    def __init__(
        self,
        destination: str,
        subscription: str,
        ack_prefix: str | None,
        version: str,
        *,
        stream: bool = False,
    ) -> None:
        escaped = version != "1.0"
        self._escaped = escaped
        self._head = (
            f"MESSAGE\ndestination:{_header_text(destination, escaped)}\nmessage-id:".encode()
        )
        self._sub = f"\nsubscription:{_header_text(subscription, escaped)}\n".encode()
        self._ack = None if ack_prefix is None else f"ack:{ack_prefix}".encode()
        self._offset = f"{STREAM_OFFSET_HEADER}:".encode() if stream else None
        self.whole = False
        """The subscription reads every partition of a stream: each message's
        ``x-stream-offset`` property (set by its reader) is its offset."""

    def encode(self, message: Message, seq: int, delivery_count: int, redelivered: bool) -> bytes:
        """The bytes of the MESSAGE frame delivering ``message`` (entry ``seq``).

        Raises:
            UnicodeEncodeError: a header holds a lone surrogate (the caller falls
                back to the general encoder, which reports it).
        """
        message_id, block = _message_parts(message, self._escaped)
        if redelivered or delivery_count != 1:
            delivery = (
                f"redelivered:{'true' if redelivered or delivery_count > 1 else 'false'}\n"
                f"{DELIVERY_COUNT_HEADER}:{delivery_count}\n"
            ).encode()
        else:
            delivery = _FIRST_DELIVERY
        if self._offset is not None:
            # a reader of every partition of a stream: the offset is the message's in its
            # partition (the property its reader set), the entry's number its delivery's
            offset = int(message.properties[STREAM_OFFSET_HEADER]) if self.whole else seq
            delivery = b"%s%s%d\n" % (delivery, self._offset, offset)
        ack = self._ack
        if ack is None:
            return b"".join(
                (self._head, message_id, self._sub, delivery, block, message.body, b"\x00")
            )
        return b"".join(
            (
                self._head,
                message_id,
                self._sub,
                ack,
                b"%d\n" % seq,
                delivery,
                block,
                message.body,
                b"\x00",
            )
        )
