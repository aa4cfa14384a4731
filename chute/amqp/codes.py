"""AMQP 0-9-1's reply codes, and the error that carries one.

The specification classes each code as *soft* (the channel closes: ``channel.close``)
or *hard* (the connection closes: ``connection.close``). Every refusal the driver makes
goes through :class:`AmqpError`, so the class of its code alone decides what closes.
"""

from __future__ import annotations

from typing import Final

from chute.core.rules.exchanges import ExchangeError
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ChuteError,
    ConsumerError,
    DestinationFull,
    InvalidAddress,
    InvalidMessage,
    InvalidSelector,
    NotFound,
    RemoteProtocolError,
    TransactionError,
)

REPLY_SUCCESS: Final = 200
CONTENT_TOO_LARGE: Final = 311
NO_ROUTE: Final = 312
NO_CONSUMERS: Final = 313
CONNECTION_FORCED: Final = 320
INVALID_PATH: Final = 402
ACCESS_REFUSED: Final = 403
NOT_FOUND: Final = 404
RESOURCE_LOCKED: Final = 405
PRECONDITION_FAILED: Final = 406
FRAME_ERROR: Final = 501
SYNTAX_ERROR: Final = 502
COMMAND_INVALID: Final = 503
CHANNEL_ERROR: Final = 504
UNEXPECTED_FRAME: Final = 505
RESOURCE_ERROR: Final = 506
NOT_ALLOWED: Final = 530
NOT_IMPLEMENTED: Final = 540
INTERNAL_ERROR: Final = 541

SOFT: Final = frozenset(
    {
        CONTENT_TOO_LARGE,
        NO_ROUTE,
        NO_CONSUMERS,
        ACCESS_REFUSED,
        NOT_FOUND,
        RESOURCE_LOCKED,
        PRECONDITION_FAILED,
    }
)
"""Codes that close only the channel; every other error code closes the connection."""

NAMES: Final = {
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}


class AmqpError(RemoteProtocolError):
    """A refusal with AMQP's reply ``code`` and a ``text`` saying what to do.

    ``method`` is the (class id, method id) of the method refused (0, 0 for none), as
    ``channel.close`` and ``connection.close`` carry it.
    """

    def __init__(self, code: int, text: str, method: tuple[int, int] = (0, 0)) -> None:
        super().__init__(text, NAMES.get(code, str(code)).lower().replace("_", "-"))
        self.reply_code = code
        self.text = text
        self.method = method

    @property
    def hard(self) -> bool:
        """It closes the connection, not only the channel."""
        return self.reply_code not in SOFT

    @property
    def reply_text(self) -> str:
        """``NAME - text``, RabbitMQ's shape (clients show it as is); at most 255 bytes."""
        full = f"{NAMES.get(self.reply_code, 'ERROR')} - {self.text}"
        return full.encode()[:255].decode(errors="ignore")


_BY_ERROR: Final[tuple[tuple[type[ChuteError], int], ...]] = (
    (AuthenticationFailed, ACCESS_REFUSED),
    (AccessDenied, ACCESS_REFUSED),
    (NotFound, NOT_FOUND),
    (InvalidAddress, PRECONDITION_FAILED),
    (InvalidSelector, PRECONDITION_FAILED),
    (InvalidMessage, PRECONDITION_FAILED),
    (DestinationFull, PRECONDITION_FAILED),
    (ConsumerError, PRECONDITION_FAILED),
    (TransactionError, PRECONDITION_FAILED),
    (ExchangeError, PRECONDITION_FAILED),
)


def from_chute(exc: ChuteError, method: tuple[int, int] = (0, 0)) -> AmqpError:
    """The AMQP refusal of a core error: its reply code by kind, the core's reason as text."""
    if isinstance(exc, AmqpError):
        return exc
    for kind, code in _BY_ERROR:
        if isinstance(exc, kind):
            return AmqpError(code, exc.reason, method)
    return AmqpError(INTERNAL_ERROR, exc.reason, method)
