"""The TOML configuration: defaults, overrides, validation that names the key."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from chute.config import ServerConfig, load
from chute.core.model.settings import Overflow
from chute.core.rules.access import User
from chute.errors import ConfigError
from chute.passwords import hash_password


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chute.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    config = load(None)
    assert config == ServerConfig()
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 5445)


def test_file_then_flags_override(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = 6000\nmax_packet_size = "1MiB"\n')
    config = load(path, {"port": 7000, "host": None})
    assert config.listen.port == 7000
    assert config.limits.max_packet_size == 1 << 20


def test_destinations_with_wildcards_and_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[destinations."*"]\nmax_deliveries = 3\n'
        '[destinations."queue:logs.*"]\noverflow = "drop-oldest"\nmax_messages = 10\n'
        '[destinations."queue:logs.audit"]\noverflow = "block"\n',
    )
    resolve = load(path).resolver()
    assert resolve("queue:logs.app").overflow is Overflow.DROP_OLDEST
    assert resolve("queue:logs.audit").overflow is Overflow.BLOCK
    assert resolve("queue:other").max_deliveries == 3


def test_limits_on_destinations_made_by_use(tmp_path: Path) -> None:
    defaults = load(None)
    assert (
        defaults.by_use.max_destinations,
        defaults.by_use.max_destinations_per_user,
        defaults.by_use.auto_delete_after_ms,
    ) == (10_000, 1000, 0)
    path = write(
        tmp_path,
        "[server]\nmax_destinations = 50\nmax_destinations_per_user = 0\n"
        "auto_delete_after_ms = 3600000\n"
        '[destinations."queue:scratch.*"]\nauto_delete_after_ms = 60000\n',
    )
    config = load(path)
    assert (config.by_use.max_destinations, config.by_use.max_destinations_per_user) == (50, 0)
    assert config.by_use.auto_delete_after_ms == 3_600_000
    resolve = config.resolver()
    assert resolve("queue:scratch.1").auto_delete_after_ms == 60_000
    assert resolve("queue:other").auto_delete_after_ms is None  # the server's
    assert resolve.auto_deletes


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 70000\n", "server.port"),
        ("[server]\nport = true\n", "server.port"),
        ("[server]\ncolour = 1\n", "server.colour: unknown setting"),
        ("[nonsense]\n", "unknown section"),
        ('[destinations."queue:x"]\nmax_bytes = "lots"\n', "max_bytes"),
        ('[destinations."queue:x"]\nwhat = 1\n', "what: unknown setting"),
        ("[server]\nmax_destinations = -1\n", "server.max_destinations"),
        ('[destinations."queue:x"]\nauto_delete_after_ms = "1h"\n', "auto_delete_after_ms"),
        ('[destinations."queue:a/b"]\nmax_messages = 1\n', "queue:a/b"),
        ("[users]\nalice = 3\n", "users.alice must be a table"),
        ('[users.alice]\npassword = "s"\nroles = ["nobody"]\n', "no role named 'nobody'"),
        ('[users.alice]\npassword = "$argon2id$broken"\n', "not a valid argon2 hash"),
        ('[users.alice]\npasswd = "s"\n', "unknown key(s) ['passwd']"),
        ('[users."a b"]\npassword = "s"\n', "a user name is"),
        ('[roles.r]\nsend = "queue:x"\n', "expected a list of patterns"),
        ('[roles.r]\nsteal = ["*"]\n', "roles.r.steal: unknown action"),
        ('[roles.r]\nsend = ["queue:a/b"]\n', "roles.r.send"),
        ('[roles.admin]\nsend = ["*"]\n', "'admin' is built in"),
        ("this is = not toml [", "not valid TOML"),
        ("[server]\nmax_connections = -1\n", "server.max_connections"),
        ('[server]\nmax_connections_per_host = "many"\n', "server.max_connections_per_host"),
        ("[server]\nlogin_timeout_ms = 1.5\n", "server.login_timeout_ms"),
        ('[server]\nmax_login_frame_size = "lots"\n', "server.max_login_frame_size"),
        ("[server]\nmax_login_frame_size = 100\n", "server.max_login_frame_size: 100 bytes"),
        ("[server]\nidle_timeout_ms = false\n", "server.idle_timeout_ms"),
    ],
)
def test_bad_configuration_names_the_problem(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert fragment in info.value.reason


def test_connection_limits(tmp_path: Path) -> None:
    defaults = load(None)
    assert (defaults.limits.max_connections, defaults.limits.max_connections_per_host) == (
        10_000,
        1000,
    )
    assert (defaults.limits.login_timeout_ms, defaults.sessions.idle_timeout_ms) == (10_000, 0)
    assert defaults.limits.login_frame_size == 64 << 10
    path = write(
        tmp_path,
        "[server]\nmax_connections = 0\nmax_connections_per_host = 5\n"
        'login_timeout_ms = 300\nmax_login_frame_size = "2KiB"\nidle_timeout_ms = 60000\n',
    )
    config = load(path)
    assert (config.limits.max_connections, config.limits.max_connections_per_host) == (0, 5)
    assert (config.limits.login_timeout_ms, config.sessions.idle_timeout_ms) == (300, 60_000)
    assert config.limits.login_frame_size == 2048
    # 0: max_packet_size before login too; never more than max_packet_size
    unlimited = load(
        write(tmp_path, '[server]\nmax_login_frame_size = 0\nmax_packet_size = "1MiB"\n')
    )
    assert unlimited.limits.login_frame_size == 1 << 20
    capped = load(
        write(tmp_path, '[server]\nmax_login_frame_size = "4MiB"\nmax_packet_size = "1MiB"\n')
    )
    assert capped.limits.login_frame_size == 1 << 20


def test_http_polls_end_before_their_session_does(tmp_path: Path) -> None:
    defaults = load(None)
    assert (defaults.http.poll_ms, defaults.http.session_timeout_ms) == (20_000, 60_000)
    tuned = load(write(tmp_path, "[server]\nhttp_poll_ms = 500\nhttp_session_timeout_ms = 900\n"))
    assert (tuned.http.poll_ms, tuned.http.session_timeout_ms) == (500, 900)
    for bad in ("http_poll_ms = 0", "http_poll_ms = 60000", "http_session_timeout_ms = 10"):
        with pytest.raises(ConfigError, match=r"http_poll_ms .* must be above 0 and below"):
            load(write(tmp_path, f"[server]\n{bad}\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_non_loopback_needs_users_with_hashed_passwords(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="users"):
        load(None, {"host": "192.0.2.1"})
    plain = write(tmp_path, '[users.alice]\npassword = "s"\nroles = ["admin"]\n')
    with pytest.raises(ConfigError, match=r"plain-text passwords.*chute passwd"):
        load(plain, {"host": "192.0.2.1"})
    assert "plain-text" in load(plain).warnings()[0]  # on loopback: a warning
    hashed = hash_password("s")
    config = load(
        write(tmp_path, f'[users.alice]\npassword = "{hashed}"\nroles = ["admin"]\n'),
        {"host": "192.0.2.1"},
    )
    assert config.users["alice"] == User("alice", hashed, ("admin",))
    assert config.warnings() == []


def test_the_short_form_of_a_user_is_a_plain_password_and_no_roles(tmp_path: Path) -> None:
    config = load(write(tmp_path, '[users]\nalice = "s"\n'))
    assert config.users["alice"] == User("alice", "s", ())
    assert any("no roles" in w for w in config.warnings())


def test_listeners_without_a_login_must_name_a_user_once_users_exist(tmp_path: Path) -> None:
    users = '[users.legacy]\npassword = "pw"\nroles = ["admin"]\n'
    with pytest.raises(ConfigError, match=r"smq\.user is required"):
        load(write(tmp_path, users + "[smq]\nqueue = 'jobs'\n"))
    with pytest.raises(ConfigError, match=r"smq\.user: no user named 'ghost'"):
        load(write(tmp_path, users + "[smq]\nuser = 'ghost'\n"))
    mount = '[[dropbox]]\nroot = "/srv/mq"\ndestinations = ["orders"]\n'
    with pytest.raises(ConfigError, match=r"dropbox\[0\]\.user is required"):
        load(write(tmp_path, users + mount))
    config = load(write(tmp_path, users + "[smq]\nuser = 'legacy'\n" + mount + 'user = "legacy"\n'))
    assert config.smq is not None
    assert config.smq.user == "legacy"
    assert config.dropbox[0].user == "legacy"


def test_a_dropbox_mount_without_destinations_says_the_key_is_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dropbox\[0\]\.destinations is required"):
        load(write(tmp_path, '[[dropbox]]\nroot = "/srv/mq"\n'))
    with pytest.raises(ConfigError, match=r"dropbox\[0\]\.destinations: a list of names"):
        load(write(tmp_path, '[[dropbox]]\nroot = "/srv/mq"\ndestinations = "orders"\n'))


def test_smq_accepts_loopback_only_unless_told(tmp_path: Path) -> None:
    smq = load(write(tmp_path, "[smq]\n")).smq
    assert smq is not None
    assert smq.allows("127.0.0.1")
    assert smq.allows("::1")
    assert not smq.allows("10.1.2.3")
    wide = load(write(tmp_path, '[smq]\nallowed_clients = ["10.0.0.0/8"]\n')).smq
    assert wide is not None
    assert wide.allows("10.1.2.3")
    assert wide.allows("::ffff:10.1.2.3")
    assert not wide.allows("127.0.0.1")
    with pytest.raises(ConfigError, match="not an address or network"):
        load(write(tmp_path, '[smq]\nallowed_clients = ["everyone"]\n'))


def test_disk_free_limit_is_a_size_and_a_limit_under_one_segment_is_warned_of(
    tmp_path: Path,
) -> None:
    assert load(None).storage.disk_free_limit == 64 << 20
    config = load(write(tmp_path, '[server]\ndisk_free_limit = "128MiB"\n'), {})
    assert config.storage.disk_free_limit == 128 << 20
    assert not [w for w in config.warnings() if "disk_free_limit" in w]
    config = load(write(tmp_path, '[server]\ndisk_free_limit = "1MiB"\n'), {})
    [warning] = [w for w in config.warnings() if "disk_free_limit" in w]
    assert "1.0 MiB" in warning
    assert "segment_size (32.0 MiB)" in warning
    assert load(write(tmp_path, "[server]\ndisk_free_limit = 0\n"), {}).warnings() == []
    with pytest.raises(ConfigError, match=r"server\.disk_free_limit"):
        load(write(tmp_path, '[server]\ndisk_free_limit = "lots"\n'), {})


def test_the_memory_low_watermark_is_under_the_high_one_and_90_percent_of_it_by_default(
    tmp_path: Path,
) -> None:
    assert load(None).memory.low_watermark == 0  # the broker takes 90% of the high watermark
    config = load(
        write(tmp_path, '[server.memory]\nhigh_watermark = "256MiB"\nlow_watermark = "200MiB"\n')
    )
    assert config.memory.low_watermark == 200 << 20
    flat = '[server]\nmemory_high_watermark = "256MiB"\nmemory_low_watermark = "256MiB"\n'
    with pytest.raises(ConfigError, match=r"server\.memory_low_watermark .* must be under"):
        load(write(tmp_path, flat))
    off = '[server]\nmemory_high_watermark = 0\nmemory_low_watermark = "1MiB"\n'
    with pytest.raises(ConfigError, match=r"memory_high_watermark \(0 bytes, off\)"):
        load(write(tmp_path, off))


FLAT_KEYS: dict[str, str] = {
    "host": "listen.host",
    "port": "listen.port",
    "stomp_port": "listen.stomp_port",
    "http_port": "listen.http_port",
    "tls_port": "listen.tls_port",
    "stomp_tls_port": "listen.stomp_tls_port",
    "amqp_port": "listen.amqp_port",
    "amqp_tls_port": "listen.amqp_tls_port",
    "tls_cert": "tls.cert",
    "tls_key": "tls.key",
    "tls_ca": "tls.ca",
    "tls_client_certs": "tls.client_certs",
    "http_tls": "http.tls",
    "http_tls_client_certs": "http.tls_client_certs",
    "allowed_origins": "http.allowed_origins",
    "http_poll_ms": "http.poll_ms",
    "http_session_timeout_ms": "http.session_timeout_ms",
    "data_dir": "storage.data_dir",
    "store": "storage.store",
    "sync": "storage.sync",
    "sync_batch_ms": "storage.sync_batch_ms",
    "segment_size": "storage.segment_size",
    "inline_sync": "storage.inline_sync",
    "disk_free_limit": "storage.disk_free_limit",
    "max_memory": "memory.max_memory",
    "memory_high_watermark": "memory.high_watermark",
    "memory_low_watermark": "memory.low_watermark",
    "block_timeout_ms": "memory.block_timeout_ms",
    "max_subscription_bytes": "memory.max_subscription_bytes",
    "flow_backlog": "memory.flow_backlog",
    "auto_create": "by_use.auto_create",
    "max_destinations": "by_use.max_destinations",
    "max_destinations_per_user": "by_use.max_destinations_per_user",
    "auto_delete_after_ms": "by_use.auto_delete_after_ms",
    "max_packet_size": "limits.max_packet_size",
    "max_properties": "limits.max_properties",
    "max_connections": "limits.max_connections",
    "max_connections_per_host": "limits.max_connections_per_host",
    "login_timeout_ms": "limits.login_timeout_ms",
    "max_login_frame_size": "limits.max_login_frame_size",
    "max_login_failures": "limits.max_login_failures",
    "login_failure_window_ms": "limits.login_failure_window_ms",
    "max_partial_bytes_per_user": "limits.max_partial_bytes_per_user",
    "partial_frame_timeout_ms": "limits.partial_frame_timeout_ms",
    "heartbeat_ms": "sessions.heartbeat_ms",
    "idle_timeout_ms": "sessions.idle_timeout_ms",
    "prepared_timeout_ms": "sessions.prepared_timeout_ms",
    "max_cursor_lease_ms": "sessions.max_cursor_lease_ms",
    "expiry_interval_ms": "sessions.expiry_interval_ms",
    "dedup_window": "sessions.dedup_window",
    "dedup_producers": "sessions.dedup_producers",
    "cluster_coordinator": "cluster.coordinator",
    "cluster_node": "cluster.node",
    "cluster_advertise": "cluster.advertise",
    "cluster_user": "cluster.user",
    "cluster_password": "cluster.password",
    "cluster_ttl": "cluster.ttl",
    "cluster_tls": "cluster.tls",
    "cluster_min_in_sync": "cluster.min_in_sync",
    "cluster_drop_after_ms": "cluster.drop_after_ms",
    "cluster_replication_port": "cluster.replication_port",
    "cluster_replication_advertise": "cluster.replication_advertise",
}
"""Every key [server] held before it had sections, and where it is now: these keep working."""

WORDS = {
    "host": "localhost",
    "store": "memory",
    "sync": "batch",
    "tls_cert": "c.pem",
    "tls_key": "k.pem",
    "tls_ca": "ca.pem",
    "tls_client_certs": "optional",
    "http_tls_client_certs": "none",
    "cluster_coordinator": "etcd://127.0.0.1:2379/c",
    "cluster_node": "a",
    "cluster_advertise": "127.0.0.1:5445",
    "cluster_user": "node",
    "cluster_password": "p",
    "cluster_replication_advertise": "10.0.0.1:6445",
}
"""Values other than the defaults for the keys whose value is a word or a file name."""


def placed(config: ServerConfig, where: str) -> object:
    section, name = where.split(".")
    return getattr(getattr(config, section), name)


def changed(flat: str, default: object) -> object:
    """A valid value other than ``default`` (all of them together pass the checks)."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, Path):
        return Path("elsewhere")
    if isinstance(default, tuple):
        return ("https://app.example.com",)
    return WORDS[flat]


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return f'"{value}"'


def changed_values() -> dict[str, object]:
    defaults = ServerConfig()
    return {flat: changed(flat, placed(defaults, where)) for flat, where in FLAT_KEYS.items()}


def test_every_flat_key_lands_in_its_section(tmp_path: Path) -> None:
    values = changed_values()
    text = "[server]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items())
    config = load(write(tmp_path, text))
    for flat, where in FLAT_KEYS.items():
        assert placed(config, where) == values[flat], flat
    flags = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    assert load(None, flags) == config  # the flags' names are the flat ones


def test_the_sections_hold_every_key_and_nothing_else() -> None:
    sections = [
        f.name for f in dataclasses.fields(ServerConfig) if f.name not in OWN_TABLES | {"nodes"}
    ]  # nodes: what chute serve --nodes tells a node, never read from a file
    held = {
        f"{section}.{field.name}"
        for section in sections
        for field in dataclasses.fields(getattr(ServerConfig(), section))
    }
    assert held == set(FLAT_KEYS.values())


def test_the_section_tables_set_what_the_flat_keys_set(tmp_path: Path) -> None:
    values = changed_values()
    flat = load(
        write(
            tmp_path, "[server]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items())
        )
    )
    by_section: dict[str, list[str]] = {}
    for key, where in FLAT_KEYS.items():
        section, name = where.split(".")
        by_section.setdefault(section, []).append(f"{name} = {toml_value(values[key])}\n")
    tables = "".join(f"[server.{s}]\n" + "".join(lines) for s, lines in by_section.items())
    assert load(write(tmp_path, tables)) == flat
    dotted = "[server]\n" + "".join(
        f"{s}.{line}" for s, lines in by_section.items() for line in lines
    )
    assert load(write(tmp_path, dotted)) == flat


def test_flat_keys_and_section_tables_mix(tmp_path: Path) -> None:
    config = load(
        write(
            tmp_path,
            '[server]\nhost = "localhost"\ntls_port = 5446\nmax_packet_size = "1MiB"\n'
            '[server.tls]\ncert = "broker.pem"\nclient_certs = "optional"\nca = "ca.pem"\n'
            "[server.limits]\nmax_connections = 5\n",
        ),
        {"max_connections": 7, "port": None},  # a flag wins over the file, in either form
    )
    assert (config.listen.host, config.listen.tls_port) == ("localhost", 5446)
    assert (config.tls.cert, config.tls.client_certs, config.tls.ca) == (
        "broker.pem",
        "optional",
        "ca.pem",
    )
    assert (config.limits.max_packet_size, config.limits.max_connections) == (1 << 20, 7)
    assert config.http_client_certs == "optional"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[server]\ntls_cert = "a.pem"\n[server.tls]\ncert = "b.pem"\n',
            "server.tls.cert: already given as server.tls_cert (one setting, two spellings)",
        ),
        (
            "[server]\nport = 1\nlisten.port = 2\n",
            "server.listen.port: already given as server.port",
        ),
        (
            "[server.http]\npoll_ms = 500\n[server]\nhttp_poll_ms = 500\n",
            "already given as server.http.poll_ms",
        ),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert fragment in info.value.reason


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[server.tls]\ncertificate = "c.pem"\n',
            "server.tls.certificate: unknown setting (known in [server.tls]: cert, key, ca, "
            "client_certs)",
        ),
        ('[server.tls]\ntls_cert = "c.pem"\n', "server.tls.tls_cert: unknown setting"),
        ("[server.listen]\nmax_connections = 1\n", "server.listen.max_connections: unknown"),
        ("[server.nodes]\nnode = 1\n", "server.nodes: unknown setting (known: host, "),
        ("[server.nodes]\nnode = 1\n", "or by section: [server.listen], [server.tls], "),
        ('[server]\ntls = "on"\n', "server.tls: a table of settings ([server.tls]), got 'on'"),
        ("[server.listen]\nport = true\n", "server.listen.port: expected a non-negative"),
        ('[server.limits]\nmax_packet_size = "lots"\n', "server.limits.max_packet_size"),
        ('[server.http]\nallowed_origins = "x"\n', "server.http.allowed_origins: expected a"),
        ('[server.storage]\nsync = "sometimes"\n', "server.storage.sync: must be one of"),
        ("server = 3\n", "[server] must be a table"),
    ],
)
def test_a_mistake_in_a_section_names_the_key_as_written(
    tmp_path: Path, text: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert fragment in info.value.reason


OWN_TABLES = {"users", "roles", "destinations", "default_destination", "smq", "dropbox"}
"""ServerConfig's fields that are TOML tables of their own; every other is a section."""


def test_every_key_at_its_default_loads_the_defaults(tmp_path: Path) -> None:
    defaults = ServerConfig()
    lines = [f"{key} = {toml_value(placed(defaults, w))}" for key, w in FLAT_KEYS.items()]
    assert load(write(tmp_path, "[server]\n" + "\n".join(lines) + "\n")) == defaults
    with pytest.raises(ConfigError, match=r"server\.nope: unknown setting \(known: host, port, "):
        load(write(tmp_path, "[server]\nnope = 1\n"))


def test_a_key_is_checked_by_its_fields_kind(tmp_path: Path) -> None:
    sized = load(
        write(tmp_path, '[server]\nsegment_size = "1MiB"\nmax_login_frame_size = "2KiB"\n')
    )
    assert (sized.storage.segment_size, sized.limits.max_login_frame_size) == (1 << 20, 2 << 10)
    assert load(write(tmp_path, '[server]\ndata_dir = "here"\n')).storage.data_dir == Path("here")
    for text, message in (
        ('sync = "sometimes"', r"server\.sync: must be one of always \| batch \| never"),
        ("inline_sync = 1", r"server\.inline_sync: expected true or false"),
        ("flow_backlog = -1", r"server\.flow_backlog: expected a non-negative integer"),
        ('allowed_origins = "x"', r"server\.allowed_origins: expected a list of origins"),
    ):
        with pytest.raises(ConfigError, match=message):
            load(write(tmp_path, f"[server]\n{text}\n"))


REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
_HEADING = re.compile(r"^### `\[server\.(\w+)\]`", re.MULTILINE)
_ROW = re.compile(r"^\| `(\w+)` \| `(\w+)` \| `([^`]*)` \|", re.MULTILINE)


def test_the_reference_documents_every_key_its_flat_name_and_its_default(
    tmp_path: Path,
) -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    parts = _HEADING.split(text)[1:]  # section, its text, section, its text, ...
    documented = {
        f"{section}.{name}": (flat, default)
        for section, body in zip(parts[::2], parts[1::2], strict=True)
        for name, flat, default in _ROW.findall(body)
    }
    assert {where: flat for flat, where in FLAT_KEYS.items()} == {
        where: flat for where, (flat, _) in documented.items()
    }
    defaults = ServerConfig()
    for where, (flat, default) in documented.items():
        value = tomllib.loads(f"v = {default}")["v"]
        loaded = load(None, {flat: value})  # the documented default, read as the file's
        assert placed(loaded, where) == placed(defaults, where), where


# -- [cluster] ------------------------------------------------------------------------------

_NODE_USERS = '[users.node]\npassword = "pw"\nroles = ["admin"]\n'


def test_a_cluster_table_is_the_server_cluster_section(tmp_path: Path) -> None:
    config = load(
        write(tmp_path, '[cluster]\ncoordinator = "etcd://h:2379/c"\nnode = "a"\nttl = 5\n')
    )
    assert config.cluster.coordinator == "etcd://h:2379/c"
    assert config.cluster.node == "a"
    assert config.cluster.ttl == 5
    assert config.cluster.advertise == ""


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[cluster]\ncoordinator = "http://h:2379"\nnode = "a"\n', "cluster.coordinator"),
        ('[cluster]\ncoordinator = "etcd://h:2379"\n', "cluster.node: bad node name ''"),
        ('[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a/b"\n', "bad node name 'a/b'"),
        (
            '[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\nadvertise = "h"\n',
            "server.cluster_advertise: 'h' is not HOST:PORT",
        ),
        (
            '[server]\nport = 0\n[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\n',
            "needs the native listener (server.port)",
        ),
        (
            '[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\ntls = true\n',
            "needs the native listener (server.tls_port)",
        ),
        (
            '[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\n' + _NODE_USERS,
            "server.cluster_user is required once [users] exist",
        ),
        (
            '[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\nuser = "x"\n' + _NODE_USERS,
            "server.cluster_user: no user named 'x'",
        ),
        ('[cluster]\ncoordinator = "etcd://h:2379"\nnode = "a"\nttl = 1\n', "below 2 s"),
        ('[cluster]\nnode = "a"\n[server.cluster]\nnode = "b"\n', "keep one"),
    ],
)
def test_a_cluster_that_cannot_work_is_refused_naming_the_key(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert said in info.value.reason


@pytest.mark.parametrize("key", ["dedup_window", "dedup_producers"])
def test_duplicate_detection_needs_a_window_of_at_least_one(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError, match=f"server.{key} must be at least 1"):
        load(write(tmp_path, f"[server]\n{key} = 0\n"))
