"""Who is connected, and what they may do: the core's one gate for every protocol.

Every way into the broker (the native protocol, STOMP over TCP and WebSocket,
the Simple-message-queue listeners, the DropboxMQ bridge) makes its core
connection through :func:`chute.core.operations.connection.connect`, which asks
:meth:`Access.authenticate` for a :class:`Principal`; every operation of a
core :class:`~chute.core.operations.connection.BrokerConnection` or
:class:`~chute.core.operations.session.BrokerSession` asks :meth:`Access.authorize` whether its
principal may do it. A driver never checks a password or a permission itself.

Authentication
--------------
With no users configured anyone may connect, as an anonymous principal or
under any login, and may do everything (loopback only: the configuration
refuses to bind elsewhere without users). With users, a login and password
must match (:mod:`chute.passwords`: an argon2 hash, or plain text on
loopback), or a TLS client certificate the server verified must name the user.
A wrong password, an unknown user and a missing login get the same refusal.
Each address gets ``max_failures`` failed logins per ``failure_window_ms``;
past that, its logins are refused without being checked until the window
ends (:class:`LoginThrottle`), and the log says so once per lockout.

Verifying an argon2 hash costs about 0.1 s of CPU, which a server should not
spend on its event loop: :meth:`Access.password_check` says whether a login
needs one and returns it as a :class:`PasswordCheck`, which needs nothing of
the broker and may run on any thread; :meth:`Access.authenticate` given the
check that ran then uses its result instead of verifying again. Without one it
verifies itself.

Authorization
-------------
A user's roles grant actions on address patterns (:class:`Grants`); what is
not granted is refused. A pattern is an address where ``*`` stands for any
characters, or ``*`` alone for every address. A wildcard never reaches a
reserved name (``__sys__…``, ``__tmp__.…``, ``__user__.…``): a pattern
reaches those only if its text before the first ``*`` names the reserved
prefix (``queue:__sys__*``). Ownership rules beyond grants (a login-name queue
is its user's, a temporary queue its connection's, a durable subscription its
creator's, a prepared transaction its user's) are the connection's and the
session's, which hold the objects owned.

:attr:`Access.allows_all` says nothing is restricted (no users), so the
per-message paths skip the check entirely; otherwise a :class:`Grants`
remembers its answers per (action, address).
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from chute import passwords
from chute.core.model.address import TEMP_PREFIX, USER_PREFIX, pattern_address
from chute.errors import AccessDenied, AuthenticationFailed

log = logging.getLogger("chute.access")

RESERVED_PREFIXES: Final = ("__sys__", TEMP_PREFIX, USER_PREFIX)
"""Name prefixes a wildcard does not reach unless it names them."""


class Action(enum.Enum):
    """What a principal may be allowed to do, per address pattern."""

    SEND = "send"
    CONSUME = "consume"
    BROWSE = "browse"
    CREATE = "create"
    DELETE = "delete"
    MANAGE = "manage"
    MONITOR = "monitor"
    CLUSTER = "cluster"
    """With ``["*"]``: join this broker as another node of its cluster (docs/cluster.md)."""


# -- grants -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    reaches_reserved: bool

    @classmethod
    def compile(cls, pattern: str) -> _Pattern:
        if pattern == "*":
            return cls(re.compile(r"(?:queue|topic|stream):.*\Z", re.S), False)
        text = pattern_address(pattern)
        name = text.split(":", 1)[1]
        literal = name.split("*", 1)[0]
        reserved = any(literal.startswith(p) or p.startswith(literal) for p in RESERVED_PREFIXES)
        return cls(re.compile(fnmatch.translate(text)), bool(literal) and reserved)

    def matches(self, address: str) -> bool:
        if not self.regex.match(address):
            return False
        if self.reaches_reserved:
            return True
        name = address.split(":", 1)[1]
        return not name.startswith(RESERVED_PREFIXES)


_CACHE_LIMIT: Final = 10_000


class Grants:
    """What one user's roles allow: per action, the address patterns granted.

    Answers are remembered per (action, address): the per-message check is one
    dict lookup. Used from the broker's loop only.
    """

    __slots__ = ("_answers", "_patterns", "clusters_all", "manages_all", "monitors_all")

    def __init__(self, grants: Mapping[Action, Iterable[str]]) -> None:
        texts = {action: tuple(patterns) for action, patterns in grants.items()}
        self._patterns = {
            action: tuple(_Pattern.compile(p) for p in patterns)
            for action, patterns in texts.items()
        }
        self._answers: dict[tuple[Action, str], bool] = {}
        self.manages_all = "*" in texts.get(Action.MANAGE, ())
        """``manage = ["*"]``: prepared transactions of other users, every destination's
        statistics, the admin operations."""
        self.monitors_all = self.manages_all or "*" in texts.get(Action.MONITOR, ())
        """``monitor = ["*"]`` (or ``manage``): the broker's metrics, and nothing else."""
        self.clusters_all = "*" in texts.get(Action.CLUSTER, ())
        """``cluster = ["*"]``: link to this broker as a node of its cluster."""

    def allows(self, action: Action, address: str) -> bool:
        key = (action, address)
        answer = self._answers.get(key)
        if answer is None:
            answer = any(p.matches(address) for p in self._patterns.get(action, ()))
            if len(self._answers) >= _CACHE_LIMIT:
                self._answers.clear()
            self._answers[key] = answer
        return answer


@dataclass(frozen=True, slots=True)
class Role:
    """A named set of grants: per action, address patterns."""

    name: str
    grants: Mapping[Action, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class User:
    """A configured user: a password (an argon2 hash, or plain text) and roles."""

    name: str
    password: str
    """An argon2 hash, plain text, or empty (TLS client certificate logins only)."""
    roles: tuple[str, ...] = ()

    @property
    def hashed(self) -> bool:
        return passwords.is_hash(self.password)


ADMIN_ROLE: Final = Role(
    "admin", {action: ("*", "queue:__sys__*", "queue:__user__.*") for action in Action}
)
"""The built-in role that may do everything (a login-name or temporary queue stays its
owner's all the same)."""


# -- principals -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Principal:
    """Who a connection acts for: a user, or nobody in particular (``user`` None).

    ``grants`` None means unrestricted (no users are configured).
    """

    user: str | None = None
    grants: Grants | None = None

    def may(self, action: Action, address: str) -> bool:
        return self.grants is None or self.grants.allows(action, address)

    @property
    def manages_all(self) -> bool:
        return self.grants is None or self.grants.manages_all

    @property
    def monitors_all(self) -> bool:
        return self.grants is None or self.grants.monitors_all

    @property
    def clusters_all(self) -> bool:
        return self.grants is None or self.grants.clusters_all

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


# -- failed logins ----------------------------------------------------------------------


@dataclass(slots=True)
class _Failures:
    since: float
    count: int = 0
    announced: bool = False


class LoginThrottle:
    """Failed logins per client address: past ``max_failures`` within ``window``
    seconds, the address's logins are refused unchecked until the window ends."""

    def __init__(
        self,
        max_failures: int = 10,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self._clock = clock
        self._failures: dict[str, _Failures] = {}

    def _current(self, host: str) -> _Failures | None:
        failures = self._failures.get(host)
        if failures is not None and self._clock() - failures.since >= self.window:
            del self._failures[host]
            return None
        return failures

    def locked_for(self, host: str) -> float:
        """Seconds until ``host`` may try again (0: it may now)."""
        failures = self._current(host)
        if failures is None or not self.max_failures or failures.count < self.max_failures:
            return 0.0
        return max(0.0, failures.since + self.window - self._clock())

    def failed(self, host: str) -> bool:
        """Count a failure; True the first time ``host`` reaches the limit."""
        failures = self._current(host)
        if failures is None:
            if len(self._failures) >= _CACHE_LIMIT:
                self._failures.clear()
            failures = self._failures[host] = _Failures(self._clock())
        failures.count += 1
        if self.max_failures and failures.count >= self.max_failures and not failures.announced:
            failures.announced = True
            return True
        return False


def peer_host(peer: str) -> str:
    """The address part of ``host:port`` (``[v6]:port`` too); what is throttled."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


# -- the gate ---------------------------------------------------------------------------


@dataclass(slots=True)
class PasswordCheck:
    """A password to verify against a stored hash: a login's slow part, separable.

    :meth:`run` touches nothing but these two strings (and argon2, which releases
    the GIL), so a server may run it on a worker thread, then hand the check to
    :meth:`Access.authenticate` on its loop.
    """

    stored: str
    given: str
    result: bool | None = None

    @property
    def slow(self) -> bool:
        """Verifying takes argon2's time (else it is a plain-text comparison)."""
        return passwords.is_hash(self.stored)

    def run(self) -> None:
        """Verify (slow by design, any thread)."""
        self.result = passwords.verify(self.stored, self.given)


@dataclass(slots=True)
class _Known:
    """A user as the gate uses it: the configured user, its grants, and a digest of
    the last password verified for it (so a correct login need not hash again)."""

    user: User
    grants: Grants
    verified: bytes | None = field(default=None)


class Access:
    """Authentication and authorization for the whole broker. See the module docstring.

    Used from the broker's loop only.
    """

    def __init__(
        self,
        users: Mapping[str, User] | None = None,
        roles: Mapping[str, Role] | None = None,
        *,
        throttle: LoginThrottle | None = None,
    ) -> None:
        roles = dict(roles or {})
        self._users: dict[str, _Known] = {}
        for name, user in (users or {}).items():
            grants: dict[Action, list[str]] = {}
            for role_name in user.roles:
                role = roles.get(role_name)
                if role is None:
                    raise ValueError(f"user {name!r}: no role named {role_name!r}")
                for action, patterns in role.grants.items():
                    grants.setdefault(action, []).extend(patterns)
            self._users[name] = _Known(user, Grants(grants))
        self.throttle = throttle or LoginThrottle()
        self._key = secrets.token_bytes(32)

    @property
    def allows_all(self) -> bool:
        """Nothing is restricted: no users are configured."""
        return not self._users

    def password_check(
        self,
        login: str | None,
        passcode: str | None,
        *,
        peer: str = "",
        certificate_user: str | None = None,
    ) -> PasswordCheck | None:
        """The password verification :meth:`authenticate` would do for this login, for
        a caller to run elsewhere first; None when it needs none (no users, a
        certificate login, a throttled address, a password verified lately)."""
        if not self._users or certificate_user is not None:
            return None
        if self.throttle.locked_for(peer_host(peer)):
            return None
        known = self._users.get(login) if login is not None else None
        given = passcode or ""
        if known is not None and self._remembered(known, given):
            return None
        stored = known.user.password if known is not None else ""
        return PasswordCheck(stored or passwords.dummy_hash(), given)

    def authenticate(
        self,
        login: str | None,
        passcode: str | None,
        *,
        peer: str = "",
        certificate_user: str | None = None,
        check: PasswordCheck | None = None,
    ) -> Principal:
        """The principal a login and passcode stand for, or a verified TLS client
        certificate's user (``certificate_user``; a login given beside it must name
        the same user, and no passcode is needed). ``check``: the
        :meth:`password_check` of this login, already run.

        Raises:
            AuthenticationFailed: users are configured and neither matches (the same
                error for an unknown user, a wrong passcode or no login); or ``peer``
                failed too often lately.
        """
        if not self._users:
            name = certificate_user or login
            return Principal(name) if name else ANONYMOUS
        host = peer_host(peer)
        wait = self.throttle.locked_for(host)
        if wait:
            raise AuthenticationFailed(
                f"too many failed logins from {host}; try again in {wait:.0f} s"
            )
        known = self._check(login, passcode, certificate_user, check)
        if known is None:
            if self.throttle.failed(host):
                log.warning(
                    "%d failed logins from %s within %.0f s: refusing its logins until then",
                    self.throttle.max_failures,
                    host,
                    self.throttle.window,
                )
            raise AuthenticationFailed("login or passcode rejected")
        return Principal(known.user.name, known.grants)

    def _check(
        self,
        login: str | None,
        passcode: str | None,
        certificate_user: str | None,
        check: PasswordCheck | None,
    ) -> _Known | None:
        if certificate_user is not None:
            if login is not None and login != certificate_user:
                return None
            return self._users.get(certificate_user)
        known = self._users.get(login) if login is not None else None
        given = passcode or ""
        if known is not None and self._remembered(known, given):
            return known
        stored = known.user.password if known is not None else passwords.dummy_hash()
        if check is not None and check.result is not None and check.given == given:
            matched = check.result and check.stored == (stored or passwords.dummy_hash())
        else:
            matched = passwords.verify(stored or passwords.dummy_hash(), given)
        if not matched or not stored:
            return None  # no password configured: certificate logins only
        if known is None:
            return None
        known.verified = self._digest(given)
        return known

    def _digest(self, given: str) -> bytes:
        return hmac.new(self._key, given.encode(), hashlib.sha256).digest()

    def _remembered(self, known: _Known, given: str) -> bool:
        """``given`` is the password last verified for ``known``."""
        return known.verified is not None and hmac.compare_digest(
            known.verified, self._digest(given)
        )

    def as_user(self, name: str | None) -> Principal:
        """The principal of a configured user, for what acts without a login (the
        Simple-message-queue listeners, the DropboxMQ bridge).

        Raises:
            AuthenticationFailed: users are configured and ``name`` is not one.
        """
        if not self._users:
            return Principal(name) if name else ANONYMOUS
        known = self._users.get(name) if name is not None else None
        if known is None:
            raise AuthenticationFailed(f"no configured user named {name!r}")
        return Principal(known.user.name, known.grants)

    def authorize(self, principal: Principal, action: Action, address: str) -> None:
        """Raise AccessDenied unless ``principal`` may do ``action`` on ``address``."""
        grants = principal.grants
        if grants is not None and not grants.allows(action, address):
            raise AccessDenied(
                f"user {principal} may not {action.value} {address}: no role of theirs grants it"
            )
