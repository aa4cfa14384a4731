"""The server's configuration: one TOML file, every key with a default.

The ``[server]`` table's keys come in sections (:class:`ServerConfig`'s fields:
``listen``, ``tls``, ``http``, ``storage``, ``memory``, ``by_use``, ``limits``,
``sessions``). A key is written in its section's table, or directly in
``[server]`` under its flat name, as before sections existed; once, either way::

    [server]
    max_packet_size = "16MiB"   # flat: limits.max_packet_size
    tls_port = 5446

    [server.tls]                # the same as tls_cert = ... in [server]
    cert = "broker.pem"
    client_certs = "optional"
    ca = "clients-ca.pem"

The other tables are their own: ``[users]``, ``[roles]``, ``[destinations]``,
``[smq]``, ``[[dropbox]]``. docs/configuration.md lists every key with its default.
Command-line flags override the file (see ``chute serve --help``), by flat name.
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
from chute.cluster.errors import ClusterUrlError
from chute.cluster.fixed import FixedNodes
from chute.cluster.url import check_name, parse_cluster_url
from chute.config.sections import (
    FLAT,
    KIND,
    ORIGINS,
    SECTION_TYPES,
    SIZE,
    ByUseSettings,
    ClusterSettings,
    HttpSettings,
    Kind,
    LimitSettings,
    ListenSettings,
    MemorySettings,
    SessionSettings,
    StorageSettings,
    TlsSettings,
)
from chute.core.model.address import canonical, pattern_address
from chute.core.model.settings import (
    Cleanup,
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

__all__ = [
    "ByUseSettings",
    "HttpSettings",
    "LimitSettings",
    "ListenSettings",
    "MemorySettings",
    "ServerConfig",
    "SessionSettings",
    "StorageSettings",
    "TlsSettings",
    "load",
]

MIN_LOGIN_FRAME_SIZE = 1024  # below it a CONNECT with a long login and passcode would not fit


@dataclasses.dataclass
class ServerConfig:
    """The [server] table's sections, and the tables of their own."""

    listen: ListenSettings = dataclasses.field(default_factory=ListenSettings)
    tls: TlsSettings = dataclasses.field(default_factory=TlsSettings)
    http: HttpSettings = dataclasses.field(default_factory=HttpSettings)
    storage: StorageSettings = dataclasses.field(default_factory=StorageSettings)
    memory: MemorySettings = dataclasses.field(default_factory=MemorySettings)
    by_use: ByUseSettings = dataclasses.field(default_factory=ByUseSettings)
    limits: LimitSettings = dataclasses.field(default_factory=LimitSettings)
    sessions: SessionSettings = dataclasses.field(default_factory=SessionSettings)
    cluster: ClusterSettings = dataclasses.field(default_factory=ClusterSettings)
    users: dict[str, User] = dataclasses.field(default_factory=dict)
    roles: dict[str, Role] = dataclasses.field(default_factory=lambda: {"admin": ADMIN_ROLE})
    destinations: dict[str, DestinationSettings] = dataclasses.field(default_factory=dict)
    default_destination: DestinationSettings = dataclasses.field(
        default_factory=DestinationSettings
    )
    smq: SmqSettings | None = None  # smq listeners; off unless [smq] (docs/smq.md)
    dropbox: list[DropboxMount] = dataclasses.field(default_factory=list)  # docs/dropbox.md
    # a node of `chute serve --nodes N`, as its parent said (never read from the file)
    nodes: FixedNodes | None = None

    @property
    def clustered(self) -> bool:
        """This broker is a node of a cluster: agreed in etcd, or one of ``--nodes``."""
        return bool(self.cluster.coordinator) or self.nodes is not None

    def resolver(self) -> SettingsResolver:
        return SettingsResolver(self.destinations, self.default_destination)

    def check(self) -> None:
        """Raises ConfigError for combinations that are unsafe or impossible."""
        listen, http, memory, limits = self.listen, self.http, self.memory, self.limits
        for name, port in (
            ("port", listen.port),
            ("stomp_port", listen.stomp_port),
            ("http_port", listen.http_port),
            ("tls_port", listen.tls_port),
            ("stomp_tls_port", listen.stomp_tls_port),
            ("amqp_port", listen.amqp_port),
            ("amqp_tls_port", listen.amqp_tls_port),
        ):
            if not 0 <= port <= 65535:
                raise ConfigError(f"server.{name}: {port} is not a TCP port (0-65535)")
        self._check_tls()
        if not 0 < http.poll_ms < http.session_timeout_ms:
            raise ConfigError(
                f"server.http_poll_ms ({http.poll_ms}) must be above 0 and below "
                f"server.http_session_timeout_ms ({http.session_timeout_ms}): a client "
                "polling is not idle"
            )
        if 0 < memory.high_watermark <= memory.max_memory and self.storage.store == "journal":
            raise ConfigError(
                f"server.memory_high_watermark ({memory.high_watermark} bytes) must be "
                f"above server.max_memory ({memory.max_memory} bytes): durable queues page at "
                "max_memory, so producers should only wait for what cannot page (raise "
                "memory_high_watermark, or lower max_memory)"
            )
        low, high = memory.low_watermark, memory.high_watermark
        if low and not low < high:
            raise ConfigError(
                f"server.memory_low_watermark ({low} bytes) must be under "
                f"server.memory_high_watermark ({high} bytes"
                + (", off" if not high else "")
                + "): producers held at the high watermark go on once the queues hold "
                "less than the low one (0, the default: 90% of the high watermark)"
            )
        for key in ("dedup_window", "dedup_producers"):
            if getattr(self.sessions, key) < 1:
                raise ConfigError(f"server.{key} must be at least 1 (duplicate detection)")
        if 0 < limits.max_login_frame_size < MIN_LOGIN_FRAME_SIZE:
            raise ConfigError(
                f"server.max_login_frame_size: {limits.max_login_frame_size} bytes is too "
                f"small for a login; give at least {MIN_LOGIN_FRAME_SIZE} (1KiB), or 0 to "
                "allow max_packet_size before login too"
            )
        if not self.users and not _is_loopback(listen.host):
            raise ConfigError(
                f"server.host = {listen.host!r} accepts connections from other machines: "
                "configure [users] first (anonymous access is only allowed on loopback)"
            )
        self._check_cluster()
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
        if plain and not _is_loopback(listen.host):
            raise ConfigError(
                f"user(s) {', '.join(plain)} have plain-text passwords, which are only "
                f"accepted while the broker listens on loopback (server.host = "
                f"{listen.host!r}): put the hash `chute passwd` prints in their password"
            )

    def _check_cluster(self) -> None:
        cluster = self.cluster
        if not cluster.coordinator:
            return
        try:
            parse_cluster_url(cluster.coordinator)
            check_name(cluster.node or "", "node name")
        except ClusterUrlError as exc:
            where = "node" if "node name" in str(exc) else "coordinator"
            raise ConfigError(f"cluster.{where}: {exc}") from None
        if cluster.advertise:
            host, _, port = cluster.advertise.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ConfigError(
                    f"server.cluster_advertise: {cluster.advertise!r} is not HOST:PORT"
                )
        elif not (self.listen.tls_port if cluster.tls else self.listen.port):
            port = "server.tls_port" if cluster.tls else "server.port"
            raise ConfigError(
                f"server.cluster_coordinator needs the native listener ({port}) or "
                "server.cluster_advertise: the other nodes dial this node there"
            )
        if cluster.replication_advertise:
            host, _, port = cluster.replication_advertise.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ConfigError(
                    "server.cluster_replication_advertise: "
                    f"{cluster.replication_advertise!r} is not HOST:PORT"
                )
        if cluster.tls and not self.tls.cert:
            raise ConfigError(
                "server.cluster_tls needs server.tls_cert: a node shows the others its "
                "certificate (and trusts server.tls_ca for theirs)"
            )
        if self.users and not cluster.user:
            raise ConfigError(
                "server.cluster_user is required once [users] exist: a node logs in to "
                "the others as this user (give it a role granting cluster)"
            )
        if cluster.user and self.users and cluster.user not in self.users:
            raise ConfigError(f"server.cluster_user: no user named {cluster.user!r} in [users]")
        if cluster.ttl < 2:
            raise ConfigError(f"server.cluster_ttl: {cluster.ttl} s is below 2 s")
        if cluster.min_in_sync < 1:
            raise ConfigError(f"server.cluster_min_in_sync: {cluster.min_in_sync} is below 1")
        if cluster.drop_after_ms < 1:
            raise ConfigError(f"server.cluster_drop_after_ms: {cluster.drop_after_ms} is below 1")

    def _check_tls(self) -> None:
        tls = self.tls
        for name, wanted in (
            ("tls_port", bool(self.listen.tls_port)),
            ("stomp_tls_port", bool(self.listen.stomp_tls_port)),
            ("amqp_tls_port", bool(self.listen.amqp_tls_port)),
            ("http_tls", self.http.tls and bool(self.listen.http_port)),
        ):
            if wanted and not tls.cert:
                raise ConfigError(
                    f"server.{name} is set but server.tls_cert is not: give the PEM "
                    "certificate (and tls_key, unless the key is in the same file); "
                    "`chute cert` makes one to try TLS out"
                )
        if tls.key and not tls.cert:
            raise ConfigError("server.tls_key is set but server.tls_cert is not: give both")
        for name, mode in (
            ("tls_client_certs", tls.client_certs),
            ("http_tls_client_certs", self.http.tls_client_certs),
        ):
            if mode not in ("none", "same") and not tls.ca:
                raise ConfigError(
                    f'server.{name} = "{mode}" needs server.tls_ca: '
                    "the PEM file of the CA that signs the clients' certificates"
                )

    @property
    def http_client_certs(self) -> str:
        """The HTTP port's client certificate mode (HTTPS, WSS): none, optional, required."""
        mode = self.http.tls_client_certs
        return self.tls.client_certs if mode == "same" else mode

    @property
    def tls_listening(self) -> bool:
        """Some listener speaks TLS."""
        listen = self.listen
        return bool(
            listen.tls_port
            or listen.stomp_tls_port
            or listen.amqp_tls_port
            or (self.http.tls and listen.http_port)
        )

    def warnings(self) -> list[str]:
        """What is allowed but deserves the operator's attention (logged at start)."""
        out: list[str] = []
        if origins.ANY in self.http.allowed_origins:
            out.append(
                'server.allowed_origins = ["*"]: any web page a user visits may use the '
                "broker's WebSocket as that user can (list the pages' origins instead)"
            )
        if (self.tls.ca or self.tls.client_certs != "none") and not self.tls_listening:
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
        storage = self.storage
        if storage.store == "journal" and 0 < storage.disk_free_limit < storage.segment_size:
            out.append(
                f"server.disk_free_limit ({size_text(storage.disk_free_limit)}) is under "
                f"server.segment_size ({size_text(storage.segment_size)}): once the disk is "
                "that full the journal may have no room for the next segment that consumers' "
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


@dataclasses.dataclass(frozen=True)
class _Key:
    """A [server] key: ``ServerConfig.<section>.<name>``; ``flat``: its name in [server]."""

    section: str
    name: str
    flat: str
    kind: Kind


def _key_table() -> tuple[dict[str, _Key], dict[str, dict[str, _Key]]]:
    """The [server] table's keys by flat name, and by section then name, in field order."""
    flat: dict[str, _Key] = {}
    sections: dict[str, dict[str, _Key]] = {}
    owner = typing.get_type_hints(ServerConfig)
    for section in dataclasses.fields(ServerConfig):
        cls = owner[section.name]
        if cls not in SECTION_TYPES:
            continue  # a table of its own: [users], [smq], ...
        hints = typing.get_type_hints(cls)
        keys = sections[section.name] = {}
        for field in dataclasses.fields(cls):
            kind: Kind = field.metadata.get(KIND, hints[field.name])
            if kind not in (int, bool, str, Path) and not isinstance(kind, (str, tuple)):
                raise TypeError(f"{cls.__name__}.{field.name}: no key kind for {kind!r}")
            key = _Key(section.name, field.name, field.metadata.get(FLAT, field.name), kind)
            if key.flat in flat or key.flat in owner:
                raise TypeError(f"{cls.__name__}.{field.name}: flat name {key.flat!r} taken")
            flat[key.flat] = keys[key.name] = key
    return flat, sections


_KEYS, _SECTIONS = _key_table()


def load(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Read ``path`` (if given), apply ``overrides`` (command-line flags, by flat name),
    validate.

    Raises:
        ConfigError: unreadable file, bad TOML, unknown key, a key given twice, or a bad
            value (naming the key).
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
    tables = {"server", "users", "roles", "destinations", "smq", "dropbox", "cluster"}
    unknown = set(raw) - tables
    if unknown:
        raise ConfigError(
            f"unknown section(s) {sorted(unknown)}: expected {', '.join(sorted(tables))}"
        )
    if "cluster" in raw:  # [cluster] is [server.cluster]
        server = raw.setdefault("server", {})
        if not isinstance(server, dict) or "cluster" in server:
            raise ConfigError("[cluster] and [server.cluster] are one table: keep one")
        server["cluster"] = raw.pop("cluster")
    if "smq" in raw:
        config.smq = smq_settings.from_table(raw["smq"])
    config.dropbox = parse_mounts(raw.get("dropbox", []))
    given = _server_keys(raw.get("server", {}))
    for name, value in (overrides or {}).items():
        if value is not None:
            given[_known(name)] = (value, f"server.{name}")
    for key, (value, where) in given.items():
        setattr(getattr(config, key.section), key.name, _value(key, value, where))
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
        if (
            values.get("cleanup") is Cleanup.COMPACT
            and address != "*"
            and not pattern_address(address).startswith("stream:")
        ):
            raise ConfigError(f'{where}: cleanup = "compact" applies to streams only')
        if address == "*":
            config.default_destination = DestinationSettings(**values)
        else:
            config.destinations[address] = DestinationSettings(**values)
    config.check()
    return config


def _server_keys(table: Any) -> dict[_Key, tuple[Any, str]]:
    """The [server] table's values by key, each with where it was given: a flat key
    (``server.tls_cert``) or one in its section (``server.tls.cert``), never both."""
    if not isinstance(table, dict):
        raise ConfigError("[server] must be a table of settings")
    given: dict[_Key, tuple[Any, str]] = {}

    def give(key: _Key, value: Any, where: str) -> None:
        if key in given:
            raise ConfigError(
                f"{where}: already given as {given[key][1]} (one setting, two spellings): keep one"
            )
        given[key] = (value, where)

    for name, value in table.items():
        section = _SECTIONS.get(name)
        if section is None:
            give(_known(name), value, f"server.{name}")
            continue
        if not isinstance(value, dict):
            raise ConfigError(
                f"server.{name}: a table of settings ([server.{name}]), got {value!r}"
            )
        for short, item in value.items():
            key = section.get(short)
            if key is None:
                raise ConfigError(
                    f"server.{name}.{short}: unknown setting "
                    f"(known in [server.{name}]: {', '.join(section)})"
                )
            give(key, item, f"server.{name}.{short}")
    return given


def _known(flat: str) -> _Key:
    key = _KEYS.get(flat)
    if key is None:
        raise ConfigError(
            f"server.{flat}: unknown setting (known: {', '.join(_KEYS)}; or by section: "
            f"{', '.join(f'[server.{s}]' for s in _SECTIONS)})"
        )
    return key


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


def _value(key: _Key, value: Any, where: str) -> Any:
    """``value`` as ``key``'s field holds it; ``where`` names the key as it was given."""
    kind = key.kind
    if isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"{where}: must be one of {' | '.join(kind)}, got {value!r}")
        return value
    if kind == SIZE:
        return parse_size(value, what=where)
    if kind == ORIGINS:
        return _origins(value, where)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: expected a non-negative integer, got {value!r}")
        return value
    if kind is Path:
        return Path(str(value))
    return str(value)


def _origins(value: Any, where: str) -> tuple[str, ...]:
    """``allowed_origins``: each ``scheme://host[:port]`` (in one spelling) or ``"*"``."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f'{where}: expected a list of origins, ["https://app.example.com"]')
    out: list[str] = []
    for text in value:
        origin = text if text == origins.ANY else origins.normalize(text)
        if origin is None:
            raise ConfigError(
                f"{where}: {text!r} is not an origin: write "
                'scheme://host[:port] as a browser sends it, e.g. "https://app.example.com" '
                '(no path), or "*" for any (unsafe)'
            )
        out.append(origin)
    return tuple(out)
