"""The server's configuration: one TOML file, every key with a default.

```toml
[server]
host = "127.0.0.1"
port = 5445              # native protocol; 0 disables
stomp_port = 61613       # STOMP 1.0-1.2; 0 disables
http_port = 8445         # HTTP: STOMP over WebSocket on /stomp, native on /chute; 0 disables
data_dir = "chute-data"
store = "journal"        # or "memory": nothing survives a restart
sync = "always"          # journal: always | batch | never (docs/durability.md)
auto_create = true       # create destinations on first use
max_destinations = 10000 # destinations clients may make by use, all together; 0 = no limit
max_destinations_per_user = 1000  # each user's share (admins and [destinations] aside); 0 = none
auto_delete_after_ms = 0 # a destination made by use and unused this long goes; 0 = never
prepared_timeout_ms = 0  # roll back two-phase work no coordinator finished; 0 = never
max_packet_size = "16MiB"
max_memory = "64MiB"     # message data held in memory before durable queues page to disk
memory_high_watermark = "256MiB"  # past it every producer waits (flow control); 0 = off
block_timeout_ms = 30000 # how long a producer waits for the broker's memory or disk
max_subscription_bytes = "16MiB"  # a non-durable subscription's bound when its topic
                         # has none: past it its oldest messages go to the dead-letter queue
segment_size = "32MiB"   # journal segment files, each made at full size (docs/durability.md)
disk_free_limit = "64MiB"  # producers wait under this free (less the next segment); 0 = off
flow_backlog = 5000      # pause a queue's producers while its consumers lag this far; 0 = off
inline_sync = true       # an idle journal syncs on the broker's loop (docs/durability.md)
heartbeat_ms = 10000     # the most a client may ask for is honoured; 0 = off
max_login_failures = 10  # per client address and window; past it logins wait; 0 = off
login_failure_window_ms = 60000
max_connections = 10000  # open at once, logged in or not; 0 = no limit (docs/security.md)
max_connections_per_host = 1000  # from one client address; 0 = no limit
login_timeout_ms = 10000  # connect, TLS handshake, upgrade and log in within this; 0 = never
max_login_frame_size = "64KiB"  # the largest packet or frame before login
max_partial_bytes_per_user = "64MiB"  # frames begun and not finished, over a user's
                         # connections; past it the connection is closed; 0 = no limit
partial_frame_timeout_ms = 30000  # close a connection whose frame stops arriving; 0 = never
idle_timeout_ms = 0      # close a client without heart-beats silent this long; 0 = never
max_cursor_lease_ms = 300000  # the longest a cursor holds a queue after its client left
tls_port = 0             # the native protocol over TLS (chutes://), e.g. 5446; 0 = off
stomp_tls_port = 0       # STOMP over TLS, e.g. 61614; 0 = off
http_tls = false         # true: http_port serves HTTPS and WSS (wss://.../stomp)
tls_cert = ""            # PEM certificate chain (may hold the key too); needed for TLS
tls_key = ""             # PEM private key, if not in tls_cert
tls_ca = ""              # PEM CA that signs client certificates (docs/security.md)
tls_client_certs = "none"  # none | optional | required: a certificate's CN names a user
http_tls_client_certs = "same"  # HTTPS/WSS only: same (as tls_client_certs) | none |
                         # optional | required; browsers need "none" (docs/security.md)
allowed_origins = ["https://app.example.com"]  # web pages a browser may open the
                         # WebSocket from, besides the broker's own (docs/security.md)
http_poll_ms = 20000     # native over plain HTTP: the longest a poll is held
http_session_timeout_ms = 60000  # ... and a session with no request this long ends

[users.alice]            # users are required before binding anything but loopback
password = "$argon2id$..."  # from `chute passwd`; plain text only on loopback
roles = ["orders"]

[roles.orders]           # what a role may do, by address pattern (docs/security.md)
send = ["queue:orders.*"]
consume = ["queue:orders.*"]
browse = []
create = ["queue:orders.*"]
delete = []
manage = []

[destinations."queue:orders"]
max_messages = 100000
overflow = "dead-letter"

[destinations."queue:scratch.*"]
auto_delete_after_ms = 600000  # this pattern's own idle time (0 = never)
```
Command-line flags override the file (see ``chute serve --help``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from chute import origins, passwords
from chute.core.model.address import canonical
from chute.core.model.settings import (
    DestinationSettings,
    SettingsResolver,
    parse_size,
    settings_from_mapping,
)
from chute.core.rules.access import ADMIN_ROLE, Action, Role, User
from chute.dropbox.mount import DropboxMount, parse_mounts
from chute.errors import ConfigError, InvalidAddress
from chute.smq import settings as smq_settings
from chute.smq.settings import SmqSettings
from chute.store.space import size_text

DEFAULT_PORT = 5445
DEFAULT_STOMP_PORT = 61613
DEFAULT_HTTP_PORT = 8445  # chute's HTTP port: STOMP over WebSocket, later admin and console
MIN_LOGIN_FRAME_SIZE = 1024  # below it a CONNECT with a long login and passcode would not fit

# Every field of ServerConfig is a key of the [server] table, but those marked as
# a table of their own (``[users]``, ``[smq]``, ...). A key's kind, what its value
# must be, comes from the field's type (int: a non-negative integer; bool; str;
# Path) unless the field's metadata says more: a size ("16MiB"), one of a few
# words, or a list of origins. The key table (_SERVER_KEYS) is derived from them.
_KIND: Final = "chute.config.kind"
_SIZE: Final = "size"
_ORIGINS: Final = "origins"
_OWN_TABLE: Final = "chute.config.table"
_TABLE: Final[Mapping[str, bool]] = {_OWN_TABLE: True}

_Kind = type | str | tuple[str, ...]
"""What a [server] key's value must be: a type, ``"size"``, ``"origins"`` or the words allowed."""


def _size(default: int) -> int:
    """A byte count, written as a number or with a unit (``"16MiB"``)."""
    return dataclasses.field(default=default, metadata={_KIND: _SIZE})


def _one_of(default: str, *others: str) -> str:
    """One of a few words, ``default`` the first."""
    return dataclasses.field(default=default, metadata={_KIND: (default, *others)})


def _origins_key() -> tuple[str, ...]:
    """``allowed_origins``: a list of web origins (see :func:`_origins`)."""
    return dataclasses.field(default=(), metadata={_KIND: _ORIGINS})


@dataclasses.dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    stomp_port: int = DEFAULT_STOMP_PORT  # 0 = off
    http_port: int = DEFAULT_HTTP_PORT  # 0 = off
    data_dir: Path = Path("chute-data")
    auto_create: bool = True
    max_destinations: int = 10_000  # made by use, all clients together; 0 = no limit
    max_destinations_per_user: int = 1000  # made by use, per user; 0 = no limit
    auto_delete_after_ms: int = 0  # made by use and idle this long: removed; 0 = never
    max_packet_size: int = _size(16 << 20)
    max_properties: int = 1024
    heartbeat_ms: int = 10_000
    expiry_interval_ms: int = 1_000
    prepared_timeout_ms: int = 0  # roll back prepared transactions older than this; 0 = never
    # "journal" (on disk, in data_dir) or "memory" (nothing survives)
    store: str = _one_of("journal", "memory")
    sync: str = _one_of("always", "batch", "never")  # journal (see docs/durability.md)
    sync_batch_ms: int = 10
    segment_size: int = _size(32 << 20)
    # message data in memory before durable queues page; 0 = never
    max_memory: int = _size(64 << 20)
    memory_high_watermark: int = _size(256 << 20)  # past it producers wait (admission); 0 = never
    block_timeout_ms: int = 30_000  # a producer waiting for memory or disk fails after this
    # a non-durable subscription of an unbounded topic
    max_subscription_bytes: int = _size(16 << 20)
    # under this much free on the journal's disk, producers wait (docs/durability.md); 0 = off
    disk_free_limit: int = _size(64 << 20)
    flow_backlog: int = 5000  # pause producers of a queue whose consumers fall this far behind
    inline_sync: bool = True  # an idle journal syncs on the broker's loop (docs/durability.md)
    tls_port: int = 0  # the native protocol over TLS (chutes://); 0 = off; needs tls_cert
    tls_cert: str = ""  # PEM certificate chain (may hold the key too)
    tls_key: str = ""  # PEM private key, if not in tls_cert
    stomp_tls_port: int = 0  # STOMP over TLS (conventionally 61614); 0 = off; needs tls_cert
    http_tls: bool = False  # http_port serves HTTPS and WSS; needs tls_cert
    tls_ca: str = ""  # PEM CA file that client certificates must chain to
    tls_client_certs: str = _one_of("none", "optional", "required")  # docs/security.md
    # the HTTP port's (HTTPS, WSS): "same" as tls_client_certs, or its own mode; a browser
    # cancels a WebSocket that is asked for a certificate, so browsers need "none"
    http_tls_client_certs: str = _one_of("same", "none", "optional", "required")
    allowed_origins: tuple[str, ...] = _origins_key()  # WebSocket origins besides the broker's own
    max_login_failures: int = 10  # per client address and window; 0 = no limit
    login_failure_window_ms: int = 60_000
    max_connections: int = 10_000  # open at once, from accept on; 0 = no limit
    max_connections_per_host: int = 1000  # from one client address; 0 = no limit
    login_timeout_ms: int = 10_000  # from accept to a completed login; 0 = no deadline
    # largest packet/frame before login; 0 = max_packet_size
    max_login_frame_size: int = _size(64 << 10)
    # unfinished frames of one user's connections together
    max_partial_bytes_per_user: int = _size(64 << 20)
    partial_frame_timeout_ms: int = 30_000  # a frame whose bytes stop this long closes; 0 = never
    idle_timeout_ms: int = 0  # close a logged-in client without heart-beats silent this long
    max_cursor_lease_ms: int = 300_000  # the longest lease a cursor may ask for
    http_poll_ms: int = 20_000  # native over plain HTTP: the longest a poll is held
    http_session_timeout_ms: int = 60_000  # a session with no request this long ends
    users: dict[str, User] = dataclasses.field(default_factory=dict, metadata=_TABLE)
    roles: dict[str, Role] = dataclasses.field(
        default_factory=lambda: {"admin": ADMIN_ROLE}, metadata=_TABLE
    )
    destinations: dict[str, DestinationSettings] = dataclasses.field(
        default_factory=dict, metadata=_TABLE
    )
    default_destination: DestinationSettings = dataclasses.field(
        default_factory=DestinationSettings, metadata=_TABLE
    )
    # smq listeners; off unless [smq] (docs/smq.md)
    smq: SmqSettings | None = dataclasses.field(default=None, metadata=_TABLE)
    # docs/dropbox.md
    dropbox: list[DropboxMount] = dataclasses.field(default_factory=list, metadata=_TABLE)

    def resolver(self) -> SettingsResolver:
        return SettingsResolver(self.destinations, self.default_destination)

    def check(self) -> None:
        """Raises ConfigError for combinations that are unsafe or impossible."""
        for name, port in (
            ("port", self.port),
            ("stomp_port", self.stomp_port),
            ("http_port", self.http_port),
            ("tls_port", self.tls_port),
            ("stomp_tls_port", self.stomp_tls_port),
        ):
            if not 0 <= port <= 65535:
                raise ConfigError(f"server.{name}: {port} is not a TCP port (0-65535)")
        self._check_tls()
        if not 0 < self.http_poll_ms < self.http_session_timeout_ms:
            raise ConfigError(
                f"server.http_poll_ms ({self.http_poll_ms}) must be above 0 and below "
                f"server.http_session_timeout_ms ({self.http_session_timeout_ms}): a client "
                "polling is not idle"
            )
        if 0 < self.memory_high_watermark <= self.max_memory and self.store == "journal":
            raise ConfigError(
                f"server.memory_high_watermark ({self.memory_high_watermark} bytes) must be "
                f"above server.max_memory ({self.max_memory} bytes): durable queues page at "
                "max_memory, so producers should only wait for what cannot page (raise "
                "memory_high_watermark, or lower max_memory)"
            )
        if 0 < self.max_login_frame_size < MIN_LOGIN_FRAME_SIZE:
            raise ConfigError(
                f"server.max_login_frame_size: {self.max_login_frame_size} bytes is too small "
                f"for a login; give at least {MIN_LOGIN_FRAME_SIZE} (1KiB), or 0 to allow "
                "max_packet_size before login too"
            )
        if not self.users and not _is_loopback(self.host):
            raise ConfigError(
                f"server.host = {self.host!r} accepts connections from other machines: "
                "configure [users] first (anonymous access is only allowed on loopback)"
            )
        if self.users:
            acting = [("smq.user", self.smq.user)] if self.smq is not None else []
            acting += [(f"dropbox[{i}].user", m.user) for i, m in enumerate(self.dropbox)]
            for key, user in acting:
                if user is None:
                    raise ConfigError(
                        f"{key} is required once [users] exist: it has no login of its own, "
                        "so it acts as this user (give it a user with the roles it needs)"
                    )
                if user not in self.users:
                    raise ConfigError(f"{key}: no user named {user!r} in [users]")
        plain = sorted(n for n, u in self.users.items() if u.password and not u.hashed)
        if plain and not _is_loopback(self.host):
            raise ConfigError(
                f"user(s) {', '.join(plain)} have plain-text passwords, which are only "
                f"accepted while the broker listens on loopback (server.host = {self.host!r}): "
                "put the hash `chute passwd` prints in their password"
            )

    def _check_tls(self) -> None:
        for name, wanted in (
            ("tls_port", bool(self.tls_port)),
            ("stomp_tls_port", bool(self.stomp_tls_port)),
            ("http_tls", self.http_tls and bool(self.http_port)),
        ):
            if wanted and not self.tls_cert:
                raise ConfigError(
                    f"server.{name} is set but server.tls_cert is not: give the PEM "
                    "certificate (and tls_key, unless the key is in the same file); "
                    "`chute cert` makes one to try TLS out"
                )
        if self.tls_key and not self.tls_cert:
            raise ConfigError("server.tls_key is set but server.tls_cert is not: give both")
        for name, mode in (
            ("tls_client_certs", self.tls_client_certs),
            ("http_tls_client_certs", self.http_tls_client_certs),
        ):
            if mode not in ("none", "same") and not self.tls_ca:
                raise ConfigError(
                    f'server.{name} = "{mode}" needs server.tls_ca: '
                    "the PEM file of the CA that signs the clients' certificates"
                )

    @property
    def http_client_certs(self) -> str:
        """The HTTP port's client certificate mode (HTTPS, WSS): none, optional, required."""
        if self.http_tls_client_certs == "same":
            return self.tls_client_certs
        return self.http_tls_client_certs

    @property
    def login_frame_size(self) -> int:
        """The largest packet or frame a client may send before it logs in."""
        return min(self.max_login_frame_size or self.max_packet_size, self.max_packet_size)

    @property
    def tls_listening(self) -> bool:
        """Some listener speaks TLS."""
        return bool(self.tls_port or self.stomp_tls_port or (self.http_tls and self.http_port))

    def warnings(self) -> list[str]:
        """What is allowed but deserves the operator's attention (logged at start)."""
        out: list[str] = []
        if origins.ANY in self.allowed_origins:
            out.append(
                'server.allowed_origins = ["*"]: any web page a user visits may use the '
                "broker's WebSocket as that user can (list the pages' origins instead)"
            )
        if (self.tls_ca or self.tls_client_certs != "none") and not self.tls_listening:
            out.append(
                "server.tls_ca / tls_client_certs are set but no listener speaks TLS "
                "(tls_port, stomp_tls_port, http_tls): they have no effect"
            )
        plain = sorted(n for n, u in self.users.items() if u.password and not u.hashed)
        if plain:
            out.append(
                f"user(s) {', '.join(plain)} have plain-text passwords (loopback only): "
                "hash them with `chute passwd` before binding to a network"
            )
        if self.store == "journal" and 0 < self.disk_free_limit < self.segment_size:
            out.append(
                f"server.disk_free_limit ({size_text(self.disk_free_limit)}) is under "
                f"server.segment_size ({size_text(self.segment_size)}): once the disk is that "
                "full the journal may have no room for the next segment that consumers' "
                "acks go to (make disk_free_limit at least one segment, better two)"
            )
        roleless = sorted(n for n, u in self.users.items() if not u.roles)
        if roleless:
            out.append(
                f"user(s) {', '.join(roleless)} have no roles: every operation they try "
                "is refused (give them roles = [...], see docs/security.md)"
            )
        return out


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _key_kinds() -> dict[str, _Kind]:
    """The [server] table's keys, in the order of ServerConfig's fields, and their kinds."""
    hints = typing.get_type_hints(ServerConfig)
    kinds: dict[str, _Kind] = {}
    for field in dataclasses.fields(ServerConfig):
        if field.metadata.get(_OWN_TABLE):
            continue
        kind: _Kind = field.metadata.get(_KIND, hints[field.name])
        if kind not in (int, bool, str, Path) and not isinstance(kind, (str, tuple)):
            raise TypeError(f"ServerConfig.{field.name}: no key kind for {kind!r}")
        kinds[field.name] = kind
    return kinds


_SERVER_KEYS: Final = _key_kinds()


def load(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Read ``path`` (if given), apply ``overrides`` (command-line flags), validate.

    Raises:
        ConfigError: unreadable file, bad TOML, unknown key or bad value (naming the key).
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    config = ServerConfig()
    unknown = set(raw) - {"server", "users", "roles", "destinations", "smq", "dropbox"}
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}: "
            "expected server, users, roles, destinations, smq, dropbox"
        )
    if "smq" in raw:
        config.smq = smq_settings.from_table(raw["smq"])
    config.dropbox = parse_mounts(raw.get("dropbox", []))
    server = dict(raw.get("server", {}))
    server.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for key, value in server.items():
        _set_server_key(config, key, value)
    config.roles = _roles(raw.get("roles", {}))
    config.users = _users(raw.get("users", {}), config.roles)
    destinations = raw.get("destinations", {})
    if not isinstance(destinations, dict):
        raise ConfigError("[destinations] must be tables keyed by address")
    for address, table in destinations.items():
        where = f'destinations."{address}"'
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        _check_destination_key(address, where)
        values = settings_from_mapping(table, where=where)
        if address == "*":
            config.default_destination = DestinationSettings(**values)
        else:
            config.destinations[address] = DestinationSettings(**values)
    config.check()
    return config


_USER_NAME: Final = re.compile(r"[A-Za-z0-9._@-]{1,64}")


def _roles(table: Any) -> dict[str, Role]:
    if not isinstance(table, dict):
        raise ConfigError("[roles] must hold one table per role: [roles.NAME]")
    roles = {"admin": ADMIN_ROLE}
    known = {a.value: a for a in Action}
    for name, grants in table.items():
        where = f"roles.{name}"
        if name == "admin":
            raise ConfigError(f"{where}: 'admin' is built in (every action on every address)")
        if not isinstance(grants, dict):
            raise ConfigError(f"{where} must be a table of action = [address patterns]")
        parsed: dict[Action, tuple[str, ...]] = {}
        for action, patterns in grants.items():
            if action not in known:
                raise ConfigError(f"{where}.{action}: unknown action (known: {', '.join(known)})")
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                raise ConfigError(f'{where}.{action}: expected a list of patterns, ["queue:a.*"]')
            for pattern in patterns:
                if pattern != "*":
                    _check_destination_key(pattern, f"{where}.{action}")
            parsed[known[action]] = tuple(patterns)
        roles[name] = Role(name, parsed)
    return roles


def _users(table: Any, roles: Mapping[str, Role]) -> dict[str, User]:
    if not isinstance(table, dict):
        raise ConfigError("[users] must hold one table per user: [users.NAME]")
    users: dict[str, User] = {}
    for name, given in table.items():
        where = f"users.{name}"
        if not _USER_NAME.fullmatch(name):
            raise ConfigError(f"{where}: a user name is 1-64 letters, digits, '.', '_', '@' or '-'")
        # a string is the short form of earlier versions: a password alone
        spec = {"password": given} if isinstance(given, str) else given
        if not isinstance(spec, dict):
            raise ConfigError(f'{where} must be a table: password = "...", roles = [...]')
        unknown = set(spec) - {"password", "roles"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)} (password, roles)")
        password = spec.get("password", "")
        user_roles = spec.get("roles", [])
        if not isinstance(password, str):
            raise ConfigError(f"{where}.password must be a string")
        if passwords.is_hash(password):
            try:
                passwords.check_hash(password)
            except ValueError as exc:
                raise ConfigError(f"{where}.password: {exc}") from None
        if not isinstance(user_roles, list) or not all(isinstance(r, str) for r in user_roles):
            raise ConfigError(f'{where}.roles must be a list of role names: ["admin"]')
        for role in user_roles:
            if role not in roles:
                raise ConfigError(
                    f"{where}.roles: no role named {role!r} (define [roles.{role}], or "
                    "use the built-in 'admin')"
                )
        users[name] = User(name, password, tuple(user_roles))
    return users


def _check_destination_key(key: str, where: str) -> None:
    """A key is an address, or an address pattern where ``*`` stands for any characters."""
    if key == "*":
        return
    try:
        canonical(key.replace("*", "x"))
    except InvalidAddress as exc:
        raise ConfigError(f"{where}: {exc.reason}") from None


def _set_server_key(config: ServerConfig, key: str, value: Any) -> None:
    kind = _SERVER_KEYS.get(key)
    if kind is None:
        raise ConfigError(f"server.{key}: unknown setting (known: {', '.join(_SERVER_KEYS)})")
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"server.{key}: must be one of {' | '.join(kind)}, got {value!r}")
    elif kind == _SIZE:
        value = parse_size(value, what=f"server.{key}")
    elif kind == _ORIGINS:
        value = _origins(value)
    elif kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"server.{key}: expected true or false, got {value!r}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"server.{key}: expected a non-negative integer, got {value!r}")
    elif kind is Path:
        value = Path(str(value))
    else:
        value = str(value)
    setattr(config, key, value)


def _origins(value: Any) -> tuple[str, ...]:
    """``allowed_origins``: each ``scheme://host[:port]`` (in one spelling) or ``"*"``."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            'server.allowed_origins: expected a list of origins, ["https://app.example.com"]'
        )
    out: list[str] = []
    for text in value:
        origin = text if text == origins.ANY else origins.normalize(text)
        if origin is None:
            raise ConfigError(
                f"server.allowed_origins: {text!r} is not an origin: write "
                'scheme://host[:port] as a browser sends it, e.g. "https://app.example.com" '
                '(no path), or "*" for any (unsafe)'
            )
        out.append(origin)
    return tuple(out)
