"""Who is connected, and what they may do: the core's one gate for every protocol.

Every way into the broker (the native protocol, STOMP over TCP and WebSocket,
the Simple-message-queue listeners, the DropboxMQ bridge) makes its core
connection through :func:`chute.core.connection.connect`, which asks
:meth:`Access.authenticate` for a :class:`Principal`; every operation of a
core :class:`~chute.core.connection.Connection` or
:class:`~chute.core.session.Session` asks :meth:`Access.authorize` whether its
principal may do it. A driver never checks a password or a permission itself.

Authentication: with no users configured anyone may connect, as an anonymous
principal or under any login (loopback only: the configuration refuses to
bind elsewhere without users). With users, a login and passcode must match;
a wrong passcode, an unknown user and a missing login are refused alike.

Authorization: :attr:`Access.allows_all` says that nothing is restricted, so
the per-message paths skip the check entirely.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from chute.errors import AuthenticationFailed


class Action(enum.Enum):
    """What a principal may be allowed to do, per address pattern."""

    SEND = "send"
    CONSUME = "consume"
    BROWSE = "browse"
    CREATE = "create"
    DELETE = "delete"
    MANAGE = "manage"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection acts for: a user, or nobody in particular (``user`` None)."""

    user: str | None = None

    def __str__(self) -> str:
        return self.user if self.user is not None else "anonymous"


ANONYMOUS: Final = Principal()


class Client(Protocol):
    """The broker's view of a connected client (a core connection)."""

    @property
    def id(self) -> str: ...

    @property
    def principal(self) -> Principal: ...

    @property
    def client_id(self) -> str | None: ...

    def close(self) -> None:
        """End the connection: its in-flight messages go back, open work rolls back."""


class Access:
    """Authentication and authorization for the whole broker. See the module docstring.

    Used from the broker's loop only.
    """

    def __init__(self, users: Mapping[str, str] | None = None) -> None:
        self._users = dict(users or {})

    @property
    def allows_all(self) -> bool:
        """Nothing is restricted: every principal may do everything."""
        return True

    def authenticate(self, login: str | None, passcode: str | None) -> Principal:
        """The principal a login and passcode stand for.

        Raises:
            AuthenticationFailed: users are configured and the pair does not match
                (the same error for an unknown user, a wrong passcode or no login).
        """
        if not self._users:
            return Principal(login) if login else ANONYMOUS
        expected = self._users.get(login) if login is not None else None
        given = (passcode or "").encode()
        # Compare even for an unknown user, so the time taken does not tell which it was.
        matched = hmac.compare_digest((expected or "\0").encode(), given)
        if expected is None or not matched:
            raise AuthenticationFailed("login or passcode rejected")
        return Principal(login)

    def authorize(self, principal: Principal, action: Action, address: str) -> None:
        """Raise AccessDenied unless ``principal`` may do ``action`` on ``address``."""
        return None
