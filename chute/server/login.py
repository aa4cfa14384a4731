"""A client's login over a byte stream: from its login frame to its core connection.

A driver (native, STOMP) hands what its login frame carries to
:meth:`Login.attempt`, which makes the client's core connection through the
core's one gate, :func:`chute.core.operations.connection.connect` (which authenticates),
with the user a verified TLS client certificate names
(:func:`chute.server.tls.certificate_user`), or returns the refusal (wrong
login, throttled address, client id in use) for the driver to answer with its
protocol's error.

A password hash is verified off the loop (:meth:`ServerHost.verify_password
<chute.server.host.ServerHost.verify_password>`) while the connection holds its
input (``Hold.LOGIN``); then the driver handles its login frame again, which
this time completes with the check already made. So a flood of logins does not
stall the loop, and the client's order is kept. A client gone meanwhile still
counts a failure for the login throttle.

What it needs of its connection is :class:`LoggingIn`. Lives on the server's
event loop only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from chute.core.operations.connection import BrokerConnection, connect
from chute.core.rules.access import PasswordCheck
from chute.core.rules.broker import Broker
from chute.errors import AuthenticationFailed, ChuteError, ClientIdInUse
from chute.server.host import ServerHost


class LoggingIn(Protocol):
    """What a :class:`Login` needs of its connection."""

    broker: Broker
    protocol_name: str
    peer: str
    certificate_user: str | None

    @property
    def gone(self) -> bool:
        """Closing, or its transport lost: nobody is left to log in."""

    def hold_for_login(self) -> None:
        """Hold the input that follows the login frame while its password is verified."""

    def login_verified(self, again: Callable[[], None]) -> None:
        """The password was verified: stop holding the input, ``again()`` (which handles
        the login frame again), then act on the input that waited."""

    def logged_in(self, core: BrokerConnection) -> None:
        """The client logged in: ``core`` is its connection."""


class Login:
    """One connection's login: a password check verified off the loop is kept for the
    login frame handled again."""

    __slots__ = ("_check", "_conn", "_server")

    def __init__(self, conn: LoggingIn, server: ServerHost) -> None:
        self._conn = conn
        self._server = server
        self._check: PasswordCheck | None = None  # verified, for the login frame again

    def attempt(
        self,
        login: str | None,
        passcode: str | None,
        client_id: str | None,
        again: Callable[[], None],
    ) -> BrokerConnection | ChuteError | None:
        """Make this client's core connection (the core authenticates), or the refusal
        (wrong login, throttled address, client id in use), which the driver answers
        with its protocol's error.

        None: the login needs a password hash verified, which runs off the loop
        (:meth:`ServerHost.verify_password`) while the connection holds its input;
        ``again()`` is then called on the loop, and the driver handles its login
        frame again, which this time completes.
        """
        conn = self._conn
        check = self._check  # verified off the loop: this is the second time
        if check is None:
            check = conn.broker.access.password_check(
                login, passcode, peer=conn.peer, certificate_user=conn.certificate_user
            )
            if check is not None and check.slow:
                conn.hold_for_login()
                self._server.verify_password(
                    check, lambda: self._verified(login, passcode, client_id, again, check)
                )
                return None
        try:
            core = connect(
                conn.broker,
                login,
                passcode,
                client_id=client_id,
                protocol=conn.protocol_name,
                peer=conn.peer,
                certificate_user=conn.certificate_user,
                check=check,
            )
        except (AuthenticationFailed, ClientIdInUse) as refusal:
            return refusal
        conn.logged_in(core)
        return core

    def _verified(
        self,
        login: str | None,
        passcode: str | None,
        client_id: str | None,
        again: Callable[[], None],
        check: PasswordCheck,
    ) -> None:
        conn = self._conn
        if conn.gone:
            # gone meanwhile: a failure still counts for the login throttle
            with contextlib.suppress(AuthenticationFailed):
                conn.broker.access.authenticate(
                    login,
                    passcode,
                    peer=conn.peer,
                    certificate_user=conn.certificate_user,
                    check=check,
                )
            return

        def handle_again() -> None:
            self._check = check
            try:
                again()
            finally:
                self._check = None

        conn.login_verified(handle_again)
