"""The TOML configuration: defaults, overrides, validation that names the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.config import ServerConfig, load
from chute.core.settings import Overflow
from chute.errors import ConfigError


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


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 70000\n", "server.port"),
        ("[server]\nport = true\n", "server.port"),
        ("[server]\ncolour = 1\n", "server.colour: unknown setting"),
        ("[nonsense]\n", "unknown section"),
        ('[destinations."queue:x"]\nmax_bytes = "lots"\n', "max_bytes"),
        ('[destinations."queue:x"]\nwhat = 1\n', "what: unknown setting"),
        ('[destinations."queue:a/b"]\nmax_messages = 1\n', "queue:a/b"),
        ("[users]\nalice = 3\n", "[users]"),
        ("this is = not toml [", "not valid TOML"),
    ],
)
def test_bad_configuration_names_the_problem(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    assert fragment in info.value.reason


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_non_loopback_needs_users(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="users"):
        load(None, {"host": "192.0.2.1"})
    config = load(write(tmp_path, '[users]\nalice = "s"\n'), {"host": "192.0.2.1"})
    assert config.users == {"alice": "s"}
