"""chute: a message broker you can read.

    import chute
    with chute.connect("chute://127.0.0.1:5445") as conn, conn.session(ack="client") as s:
        s.send("queue:orders", b"...", persistent=False)
        c = s.consumer("queue:orders", prefetch=100)
        m = c.receive(timeout=1.0)
        if m is not None:
            m.ack()

``chute.aio`` has the same API for asyncio.
"""

from chute.client import Connection, Consumer, Received, Session, connect
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
