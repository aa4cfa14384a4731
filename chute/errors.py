"""Every error chute raises on purpose, under one root.

Errors carry a stable ``code`` (a short kebab-case string) so that a wire
protocol can transport them and a client can rebuild the same class on the
other side (see :func:`error_for_code`). The message is written for the person
who will read it: what went wrong and, where it helps, what to do.
"""

from __future__ import annotations

from typing import ClassVar


class ChuteError(Exception):
    """Root of every deliberate chute error."""

    code: ClassVar[str] = "internal-error"

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else self.code


class InvalidAddress(ChuteError, ValueError):
    """A destination address or name breaks the naming rules."""

    code = "invalid-address"


class InvalidMessage(ChuteError, ValueError):
    """A message field has a value the model does not allow."""

    code = "invalid-message"


class InvalidSelector(ChuteError, ValueError):
    """A JMS selector could not be parsed."""

    code = "invalid-selector"


class DestinationFull(ChuteError):
    """A bounded destination refused a message (overflow policy ``reject``/``block``)."""

    code = "destination-full"


class NotFound(ChuteError, LookupError):
    """A destination, subscription, consumer or transaction does not exist."""

    code = "not-found"


class DestinationDeleted(NotFound):
    """The destination a consumer consumed from was deleted: the consumer is closed."""

    code = "destination-deleted"


class AccessDenied(ChuteError):
    """The connection's user may not do this."""

    code = "access-denied"


class AuthenticationFailed(ChuteError):
    """Login or passcode rejected."""

    code = "authentication-failed"


class ConsumerError(ChuteError):
    """A consumer operation was invalid (unknown delivery, wrong ack mode, ...)."""

    code = "consumer-error"


class TransactionError(ChuteError):
    """A transaction operation was invalid in the transaction's current state."""

    code = "transaction-error"


class TransactionLost(TransactionError):
    """A transaction in progress was lost with the node its connection moved from (the
    connection's URL lists several nodes, or a backup took its node over): it was rolled
    back there, and the session goes on on the new node; retry the transaction."""


class StoreError(ChuteError):
    """The store could not make a record durable."""

    code = "store-error"


class ConfigError(ChuteError, ValueError):
    """The configuration file or a command-line setting is invalid."""

    code = "config-error"


class ProtocolError(ChuteError):
    """A wire protocol rule was broken."""

    code = "protocol-error"


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol does not allow.

    ``code`` names the rule; the connection cannot continue after it.
    """

    def __init__(self, reason: str, code: str = "protocol-error") -> None:
        super().__init__(reason)
        self.error_code = code


class ConnectError(ChuteError, ConnectionError):
    """The client could not connect, or lost its connection."""

    code = "connect-error"


class ClientIdInUse(ConnectError):
    """Another live connection has this client id (JMS: one at a time)."""

    code = "client-id-in-use"


class WrongProtocol(ConnectError):
    """The server at the address speaks another protocol (a STOMP or HTTP port)."""

    code = "wrong-protocol"


class NotLive(ConnectError):
    """The process reached is a backup of its node (high availability): it takes no
    client work; the reason names the node's live. A client given several addresses
    moves on to the next."""

    code = "not-live"


class TooLarge(ChuteError):
    """The answer to a request would not fit in one packet (ask for it in pages)."""

    code = "too-large"


class RequestTimeout(ChuteError, TimeoutError):
    """A blocking request got no response in time."""

    code = "timeout"


_BY_CODE: dict[str, type[ChuteError]] = {
    cls.code: cls
    for cls in (
        ChuteError,
        InvalidAddress,
        InvalidMessage,
        InvalidSelector,
        DestinationFull,
        NotFound,
        DestinationDeleted,
        AccessDenied,
        AuthenticationFailed,
        ConsumerError,
        TransactionError,
        StoreError,
        ConfigError,
        ProtocolError,
        ConnectError,
        ClientIdInUse,
        WrongProtocol,
        NotLive,
        TooLarge,
        RequestTimeout,
    )
}


def error_for_code(code: str, reason: str) -> ChuteError:
    """Rebuild the error a peer reported, falling back to :class:`ChuteError`."""
    cls = _BY_CODE.get(code, ChuteError)
    err = cls(reason)
    return err
