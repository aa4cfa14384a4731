"""chute: a message broker you can read.

    import chute
    with chute.connect("chute://127.0.0.1:5445") as conn, conn.session(ack="client") as s:
        s.send("queue:orders", b"...", persistent=False)
        c = s.consumer("queue:orders", prefetch=100)
        m = c.receive(timeout=1.0)
        if m is not None:
            m.ack()

``chute.connect("dropbox:///srv/mq")`` gives the same API with no broker, over
a DropboxMQ directory (``chute.dropbox.client``; docs/dropbox.md), and
``chute.aio`` the same for asyncio. ``chute.Connection``, ``chute.Session`` and
``chute.Consumer`` are that API, declared once (:mod:`chute.client.api`).
"""

from chute.client.api import Connection, Consumer, Session
from chute.client.blocking import connect as _connect_broker
from chute.client.received import Received
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
    TransactionLost,
)
from chute.message import BodyKind, Byte, Float, Int, Long, Message, Short
from chute.version import __version__


def connect(
    url: str = "chute://127.0.0.1:5445",
    *,
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 10.0,
    heartbeat: float = 0.0,
    tls_ca: str | None = None,
    tls_verify: bool = True,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> Connection:
    """Connect to a broker (``chute://host:port``, ``chutes://`` for TLS, ``ws(s)://`` or
    ``http(s)://host:port/chute`` through its HTTP port) or open a
    dropbox root (``dropbox:///path``); both give the same :class:`Connection` API.

    The arguments are those of :func:`chute.client.blocking.connect`; a dropbox
    ignores ``login``, ``passcode`` and ``heartbeat`` (file permissions guard it)
    and takes its other options in the URL (:mod:`chute.dropbox.options`).

    Raises:
        ConnectError: cannot reach the broker or use the root, or refused; TLS
            options given for a dropbox.
        AuthenticationFailed: the broker rejected the credentials.
        RequestTimeout: the broker did not answer in time.
    """
    if url[:8].lower() == "dropbox:":
        if tls_ca is not None or not tls_verify or tls_cert is not None or tls_key is not None:
            raise ConnectError(
                "tls_ca, tls_verify, tls_cert and tls_key apply to brokers over TLS, not a dropbox"
            )
        from chute.dropbox.client import connect as connect_dropbox  # noqa: PLC0415

        return connect_dropbox(
            url,
            client_id=client_id,
            login=login,
            passcode=passcode,
            timeout=timeout,
            heartbeat=heartbeat,
        )
    return _connect_broker(
        url,
        client_id=client_id,
        login=login,
        passcode=passcode,
        timeout=timeout,
        heartbeat=heartbeat,
        tls_ca=tls_ca,
        tls_verify=tls_verify,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )


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
    "TransactionLost",
    "__version__",
    "connect",
]
