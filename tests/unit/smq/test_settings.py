"""The [smq] table and its command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chute import config
from chute.errors import ConfigError
from chute.smq.settings import SmqSettings, from_table, with_overrides


def test_off_unless_configured() -> None:
    assert config.load(None).smq is None
    assert with_overrides(None) is None


def test_an_empty_table_turns_it_on_with_the_seed_defaults() -> None:
    assert from_table({}) == SmqSettings("queue:smq", 6211, 6212)


def test_table_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "chute.toml"
    path.write_text('[smq]\nqueue = "jobs"\nsource_port = 7211\nsink_port = 0\n')
    assert config.load(path).smq == SmqSettings("queue:jobs", 7211, 0)


def test_flags_override_and_turn_it_on() -> None:
    assert with_overrides(None, queue="queue:orders") == SmqSettings("queue:orders")
    base = SmqSettings("queue:a", 1, 2)
    assert with_overrides(base, sink_port=0) == SmqSettings("queue:a", 1, 0)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"queue": "topic:news"}, "not a plain queue"),
        ({"queue": "a/b"}, "invalid destination name"),
        ({"queue": "__tmp__.x"}, "not a plain queue"),
        ({"queue": 5}, "expected a queue name"),
        ({"source_port": 70000}, "not a TCP port"),
        ({"sink_port": -1}, "not a TCP port"),
        ({"sink_port": True}, "not a TCP port"),
        ({"port": 1}, "unknown setting"),
    ],
)
def test_bad_values_name_the_key(table: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        from_table(table)


def test_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "chute.toml"
    path.write_text('smq = "on"\n')
    with pytest.raises(ConfigError, match=r"\[smq\] must be a table"):
        config.load(path)
