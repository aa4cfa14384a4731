"""Who is asking the admin API, and what a web page may not make a browser do.

Authentication
--------------
HTTP Basic against the broker's users, through the core's one gate
(:meth:`~chute.core.rules.access.Access.authenticate`), so the API logs in exactly
as every protocol does: the same users, the same refusal for a wrong password
or an unknown user, the same login throttle per client address. Verifying an
argon2 hash costs ~0.1 s of CPU: it runs off the loop
(:meth:`~chute.server.stream.ServerHost.verify_password`), as the drivers'
logins do. The API keeps no cache of its own: the core remembers the last
password it verified for each user, so every later request with it costs one
HMAC, and a request makes no log line unless its login fails.

With no users configured, every request is anonymous and may do everything
(the broker then listens on loopback only). A request that authenticated has
"logged in" for its HTTP connection: the login deadline and the byte budget
before login (:mod:`chute.server.limits`) no longer apply to it, so a
keep-alive client is not closed after ``login_timeout_ms``.

What a browser may not do
-------------------------
A browser sends a user's Basic credentials (or, without users, nothing is
needed) with any request a page from anywhere makes it send. Reads are safe:
the page cannot see the answer (no CORS headers). A request that changes
something (``POST``, ``DELETE``, ``PUT``, ``PATCH``) is refused with 403 when
its ``Origin`` names a page that is neither of the host and port the request
went to (the console's own pages, however the broker is reached), nor one of
the broker's own origins or ``[server] allowed_origins`` (:mod:`chute.origins`,
as the WebSocket endpoint decides); a request body must be
``application/json``, which a page can send elsewhere only after a CORS
preflight the broker never grants. Without users,
a request whose ``Host`` is not a loopback name or the configured host is
refused too, so a page cannot reach a loopback broker through a DNS name it
rebinds to 127.0.0.1 (:meth:`Gate.check_host`, which ``/metrics`` applies
as well: the names and depths of the destinations are no page's to read).

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from typing import Final

from aiohttp import web

from chute.core.rules.access import Principal, peer_host
from chute.errors import AuthenticationFailed
from chute.origins import OriginPolicy, normalize, own_origins
from chute.server.host import ServerHost

log = logging.getLogger("chute.admin")

REALM: Final = "chute"
UNSAFE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class ApiError(Exception):
    """An answer other than success: an HTTP status, a stable ``code`` and a message
    that tells the user what to do. Becomes ``{"error": code, "message": message}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": f'Basic realm="{REALM}"'})


def peer_of(request: web.Request) -> str:
    """``host:port`` of the client (what the login throttle counts by its host)."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(request.remote or "?")


def basic_credentials(request: web.Request) -> tuple[str, str] | None:
    """The login and password of an ``Authorization: Basic`` header (None: none sent).

    Raises:
        ApiError: 401, the header is not Basic credentials.
    """
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise unauthorized(
            f"the {scheme or 'empty'} authorization scheme is not supported: "
            "send HTTP Basic credentials (curl -u LOGIN:PASSWORD)"
        )
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise unauthorized(
            "the Basic credentials are not base64 of UTF-8 LOGIN:PASSWORD: "
            "send them as curl -u LOGIN:PASSWORD does"
        ) from None
    login, sep, password = text.partition(":")
    if not sep:
        raise unauthorized("the Basic credentials have no ':' between login and password")
    return login, password


def _same_origin(origin: str, request: web.Request) -> bool:
    """The page that sent ``request`` was served by this very host and port (the
    console, however the broker is reached): the Host the browser asked for is the
    origin's. A DNS name rebound to the broker cannot use it: without users, only a
    loopback Host is answered; with users, the browser has no credentials for it."""
    given = normalize(origin)
    host = request.headers.get("Host")
    if given is None or not host:
        return False
    return given in (normalize(f"http://{host}"), normalize(f"https://{host}"))


class Gate:
    """Authenticates requests and refuses what a foreign web page asks for.
    See the module docstring. Used from the server's loop only."""

    def __init__(self, server: ServerHost) -> None:
        self.server = server
        self._origins: tuple[int, OriginPolicy] | None = None  # by the port served

    async def principal(self, request: web.Request) -> Principal:
        """Who sends ``request``: a configured user, or anonymous without users.

        Raises:
            ApiError: 401 (no, malformed or wrong credentials), 429 (this client
                address failed too often lately).
        """
        access = self.server.broker.access
        credentials = basic_credentials(request)
        if access.allows_all:
            self._logged_in(request)
            return access.authenticate(credentials[0] if credentials else None, None)
        if credentials is None:
            raise unauthorized(
                "this broker has users: send HTTP Basic credentials "
                "(curl -u LOGIN:PASSWORD) of a user with the manage permission"
            )
        login, password = credentials
        peer = peer_of(request)
        wait = access.throttle.locked_for(peer_host(peer))
        if wait:
            raise ApiError(
                429,
                "too-many-failures",
                f"too many failed logins from {peer_host(peer)}: try again in {wait:.0f} s",
                {"Retry-After": str(max(1, round(wait)))},
            )
        check = access.password_check(login, password, peer=peer)
        if check is not None and check.slow:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.server.verify_password(
                check, lambda: None if done.done() else done.set_result(None)
            )
            await done
        try:
            principal = access.authenticate(login, password, peer=peer, check=check)
        except AuthenticationFailed as exc:
            log.warning("HTTP authentication failed for %r from %s", login, peer)
            raise unauthorized(f"{exc.reason}: check the login and password") from None
        self._logged_in(request)
        return principal

    def _logged_in(self, request: web.Request) -> None:
        """Lift the login deadline and the byte budget of the request's connection."""
        if request.transport is None:
            return
        ticket = self.server.limits.ticket_of(request.transport)
        if ticket is not None:
            ticket.logged_in()

    def check_browser(self, request: web.Request) -> None:
        """Refuse what a foreign web page may make a browser send (module docstring).

        Raises:
            ApiError: 403 (foreign origin or host), 415 (a body that is not JSON).
        """
        if self.server.broker.access.allows_all:
            self.check_host(request)
        if request.method not in UNSAFE_METHODS:
            return
        origin = request.headers.get("Origin")
        if (
            origin is not None
            and not _same_origin(origin, request)
            and not self._policy(request).allows(origin)
        ):
            log.warning("admin API request from origin %r refused (%s)", origin, peer_of(request))
            raise ApiError(
                403,
                "origin-not-allowed",
                f"a page from {origin} may not change this broker: "
                "use the broker's own console, or add the origin to [server] allowed_origins",
            )
        if request.body_exists and request.content_type != "application/json":
            raise ApiError(
                415,
                "unsupported-media-type",
                f"send the request body as JSON with Content-Type: application/json "
                f"(not {request.content_type})",
            )

    def check_host(self, request: web.Request) -> None:
        """Without users, answer only requests for a loopback host (or the one the
        broker binds): a DNS name rebound to the broker is refused.

        Raises:
            ApiError: 403, another host.
        """
        name = request.url.host or ""
        allowed = {*LOOPBACK_NAMES, self.server.config.listen.host.lower().strip("[]")}
        if name.lower().strip("[]") not in allowed:
            raise ApiError(
                403,
                "host-not-allowed",
                f"this broker has no users and answers only requests for a loopback host, "
                f"not {name!r}: use http://127.0.0.1:PORT (or configure users)",
            )

    def _policy(self, request: web.Request) -> OriginPolicy:
        transport = request.transport
        sock = transport.get_extra_info("sockname") if transport is not None else None
        port = int(sock[1]) if isinstance(sock, tuple) and len(sock) >= 2 else 0
        if self._origins is None or self._origins[0] != port:
            config = self.server.config
            policy = OriginPolicy(
                [*own_origins(config.listen.host, port), *config.http.allowed_origins]
            )
            self._origins = (port, policy)
        return self._origins[1]
