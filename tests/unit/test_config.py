"""The TOML configuration: defaults, overrides, validation that names the key."""

from __future__ import annotations

import dataclasses
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
    assert (config.host, config.port) == ("127.0.0.1", 5445)


def test_file_then_flags_override(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = 6000\nmax_packet_size = "1MiB"\n')
    config = load(path, {"port": 7000, "host": None})
    assert config.port == 7000
    assert config.max_packet_size == 1 << 20


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
        defaults.max_destinations,
        defaults.max_destinations_per_user,
        defaults.auto_delete_after_ms,
    ) == (10_000, 1000, 0)
    path = write(
        tmp_path,
        "[server]\nmax_destinations = 50\nmax_destinations_per_user = 0\n"
        "auto_delete_after_ms = 3600000\n"
        '[destinations."queue:scratch.*"]\nauto_delete_after_ms = 60000\n',
    )
    config = load(path)
    assert (config.max_destinations, config.max_destinations_per_user) == (50, 0)
    assert config.auto_delete_after_ms == 3_600_000
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
    assert (defaults.max_connections, defaults.max_connections_per_host) == (10_000, 1000)
    assert (defaults.login_timeout_ms, defaults.idle_timeout_ms) == (10_000, 0)
    assert defaults.login_frame_size == 64 << 10
    path = write(
        tmp_path,
        "[server]\nmax_connections = 0\nmax_connections_per_host = 5\n"
        'login_timeout_ms = 300\nmax_login_frame_size = "2KiB"\nidle_timeout_ms = 60000\n',
    )
    config = load(path)
    assert (config.max_connections, config.max_connections_per_host) == (0, 5)
    assert (config.login_timeout_ms, config.idle_timeout_ms) == (300, 60_000)
    assert config.login_frame_size == 2048
    # 0: max_packet_size before login too; never more than max_packet_size
    unlimited = load(
        write(tmp_path, '[server]\nmax_login_frame_size = 0\nmax_packet_size = "1MiB"\n')
    )
    assert unlimited.login_frame_size == 1 << 20
    capped = load(
        write(tmp_path, '[server]\nmax_login_frame_size = "4MiB"\nmax_packet_size = "1MiB"\n')
    )
    assert capped.login_frame_size == 1 << 20


def test_http_polls_end_before_their_session_does(tmp_path: Path) -> None:
    defaults = load(None)
    assert (defaults.http_poll_ms, defaults.http_session_timeout_ms) == (20_000, 60_000)
    tuned = load(write(tmp_path, "[server]\nhttp_poll_ms = 500\nhttp_session_timeout_ms = 900\n"))
    assert (tuned.http_poll_ms, tuned.http_session_timeout_ms) == (500, 900)
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
    assert load(None).disk_free_limit == 64 << 20
    config = load(write(tmp_path, '[server]\ndisk_free_limit = "128MiB"\n'), {})
    assert config.disk_free_limit == 128 << 20
    assert not [w for w in config.warnings() if "disk_free_limit" in w]
    config = load(write(tmp_path, '[server]\ndisk_free_limit = "1MiB"\n'), {})
    [warning] = [w for w in config.warnings() if "disk_free_limit" in w]
    assert "1.0 MiB" in warning
    assert "segment_size (32.0 MiB)" in warning
    assert load(write(tmp_path, "[server]\ndisk_free_limit = 0\n"), {}).warnings() == []
    with pytest.raises(ConfigError, match=r"server\.disk_free_limit"):
        load(write(tmp_path, '[server]\ndisk_free_limit = "lots"\n'), {})


OWN_TABLES = {"users", "roles", "destinations", "default_destination", "smq", "dropbox"}
"""ServerConfig's fields that are TOML tables of their own; every other is a [server] key."""


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return f'"{value}"'


def test_every_field_but_the_tables_is_a_server_key(tmp_path: Path) -> None:
    defaults = ServerConfig()
    keys = [f.name for f in dataclasses.fields(ServerConfig) if f.name not in OWN_TABLES]
    lines = [f"{key} = {toml_value(getattr(defaults, key))}" for key in keys]
    assert load(write(tmp_path, "[server]\n" + "\n".join(lines) + "\n")) == defaults
    with pytest.raises(ConfigError, match=r"server\.nope: unknown setting \(known: host, port, "):
        load(write(tmp_path, "[server]\nnope = 1\n"))


def test_a_key_is_checked_by_its_fields_kind(tmp_path: Path) -> None:
    sized = load(
        write(tmp_path, '[server]\nsegment_size = "1MiB"\nmax_login_frame_size = "2KiB"\n')
    )
    assert (sized.segment_size, sized.max_login_frame_size) == (1 << 20, 2 << 10)
    assert load(write(tmp_path, '[server]\ndata_dir = "here"\n')).data_dir == Path("here")
    for text, message in (
        ('sync = "sometimes"', r"server\.sync: must be one of always \| batch \| never"),
        ("inline_sync = 1", r"server\.inline_sync: expected true or false"),
        ("flow_backlog = -1", r"server\.flow_backlog: expected a non-negative integer"),
        ('allowed_origins = "x"', r"server\.allowed_origins: expected a list of origins"),
    ):
        with pytest.raises(ConfigError, match=message):
            load(write(tmp_path, f"[server]\n{text}\n"))
