"""chute: a message broker you can read.

    import chute
    with chute.connect("chute://127.0.0.1:5445") as conn, conn.session(ack="client") as s:
        s.send("queue:orders", b"...", persistent=False)
        c = s.consumer("queue:orders", prefetch=100)
        m = c.receive(timeout=1.0)
        if m is not None:
            m.ack()

``chute.aio`` has the same API for asyncio. ``chute.connect("dropbox:///srv/mq")``
gives the same blocking API with no broker, over a DropboxMQ directory
(``chute.dropbox.client``; docs/dropbox.md).
"""

from typing import Any

from chute.client import Connection, Consumer, Received, Session
from chute.client import connect as _connect_broker
from chute.dropbox.client import DropboxConnection
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ChuteError,
    ConnectError,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    InvalidMessage,
    InvalidSelector,
    NotFound,
    ProtocolError,
    RequestTimeout,
    TransactionError,
)
from chute.message import BodyKind, Byte, Float, Int, Long, Message, Short

__version__ = "0.1.0"


def connect(url: str = "chute://127.0.0.1:5445", **options: Any) -> Any:
    """Connect to a broker (``chute://host:port``) or open a dropbox root
    (``dropbox:///path``); both give the same session, producer and consumer API.

    Returns a :class:`chute.client.blocking.Connection` or a
    :class:`chute.dropbox.client.DropboxConnection`. Typed ``Any`` on purpose:
    which one depends on the URL's text, which a type checker cannot see; for
    precise types call :func:`chute.client.connect` or
    :func:`chute.dropbox.client.connect` directly. See those for the options
    and what they raise.
    """
    if url[:8].lower() == "dropbox:":
        from chute.dropbox.client import connect as connect_dropbox  # noqa: PLC0415

        return connect_dropbox(url, **options)
    return _connect_broker(url, **options)


__all__ = [
    "AccessDenied",
    "AuthenticationFailed",
    "BodyKind",
    "Byte",
    "ChuteError",
    "ConnectError",
    "Connection",
    "Consumer",
    "ConsumerError",
    "DestinationFull",
    "DropboxConnection",
    "Float",
    "Int",
    "InvalidAddress",
    "InvalidMessage",
    "InvalidSelector",
    "Long",
    "Message",
    "NotFound",
    "ProtocolError",
    "Received",
    "RequestTimeout",
    "Session",
    "Short",
    "TransactionError",
    "__version__",
    "connect",
]
