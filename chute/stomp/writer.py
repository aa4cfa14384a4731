"""Writing STOMP frames: a :class:`~chute.stomp.frames.Frame` to the bytes a peer reads.

The writing half of :class:`~chute.stomp.codec.StompCodec`, which knows the
negotiated version and calls these. Headers are escaped as STOMP 1.1 and 1.2
require (§Value Encoding) except in CONNECT, STOMP and CONNECTED frames and in
STOMP 1.0, where a header that would need an escape cannot be written.
Pure functions; safe from any thread.
"""

from __future__ import annotations

from chute.errors import LocalProtocolError
from chute.stomp.frames import ALL_COMMANDS, BODY_COMMANDS, UNESCAPED_COMMANDS, Frame
from chute.stomp.headers import escape


def encode_receipt(receipt_id: str, *, escaped: bool, version: str) -> bytes:
    """The bytes of ``Frame.receipt(receipt_id)``, without building the frame.

    Raises:
        LocalProtocolError: as :func:`encode_frame` (a line break in STOMP 1.0).
    """
    if escaped:
        text = escape(receipt_id)
    elif "\n" in receipt_id or "\r" in receipt_id:
        return encode_frame(Frame.receipt(receipt_id), escaped=False, version=version)  # raises
    else:
        text = receipt_id
    try:
        return b"RECEIPT\nreceipt-id:%s\n\n\x00" % text.encode()
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"a header is not valid unicode: {exc}") from None


def encode_frame(frame: Frame, *, escaped: bool, version: str) -> bytes:
    """The bytes of ``frame``.

    Headers are escaped if ``escaped`` (any version but 1.0) and the command
    allows it; the frame is otherwise written as given: ``content-length`` is not
    added (the :class:`Frame` constructors add it) but, if present, must match
    the body.

    Raises:
        LocalProtocolError: the frame cannot be encoded: unknown command, a body
            on a frame that may not have one, a header that cannot be written
            without escaping in an unescaped frame, a wrong ``content-length``,
            a NUL in a body without ``content-length``, or a lone surrogate.
    """
    command = frame.command
    body = frame.body
    if command not in ALL_COMMANDS:
        raise LocalProtocolError(f"{command!r} is not a STOMP command")
    if body and command not in BODY_COMMANDS:
        raise LocalProtocolError(f"a {command} frame may not have a body")
    escaped = escaped and command not in UNESCAPED_COMMANDS
    lines = [command]
    length: str | None = None
    for name, value in frame.headers:
        if not name:
            raise LocalProtocolError("a header name may not be empty")
        if length is None and name == "content-length":
            length = value
        if escaped:
            lines.append(f"{escape(name)}:{escape(value)}")
        elif ":" in name or "\n" in name or "\r" in name or "\n" in value or "\r" in value:
            raise LocalProtocolError(
                f"header {name!r} cannot be written unescaped in a {command} frame"
                f" (STOMP {version})"
            )
        else:
            lines.append(f"{name}:{value}")
    if length is not None:
        if length != str(len(body)):
            raise LocalProtocolError(
                f"content-length {length!r} does not match a body of {len(body)} bytes"
            )
    elif b"\x00" in body:
        raise LocalProtocolError("a body containing NUL needs a content-length header")
    lines.append("\n")
    try:
        head = "\n".join(lines).encode()
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"a header is not valid unicode: {exc}") from None
    return head + body + b"\x00"
