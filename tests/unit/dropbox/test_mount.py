"""The ``[[dropbox]]`` section of the broker's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chute import config
from chute.dropbox.mount import Direction, DropboxMount, parse_mounts
from chute.errors import ConfigError


def test_a_full_config_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "chute.toml"
    path.write_text(
        """
[[dropbox]]
root = "/srv/mq"
destinations = ["orders", "topic:news.eu"]

[[dropbox]]
root = "/srv/out"
destinations = ["queue:results"]
direction = "export"
poll_interval_ms = 50
client = "gw"
delete_processed = true
batch = 10
"""
    )
    loaded = config.load(path)
    assert loaded.dropbox == [
        DropboxMount(Path("/srv/mq"), ("queue:orders", "topic:news.eu")),
        DropboxMount(
            Path("/srv/out"),
            ("queue:results",),
            Direction.EXPORT,
            poll_interval_ms=50,
            client="gw",
            delete_processed=True,
            batch=10,
        ),
    ]
    assert config.load(None).dropbox == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"root": "/r"}, "array of tables"),
        ([{"destinations": ["q"]}], "root"),
        ([{"root": "/r"}], "destinations"),
        ([{"root": "/r", "destinations": []}], "destinations"),
        ([{"root": "/r", "destinations": ["../etc"]}], "invalid destination name"),
        ([{"root": "/r", "destinations": ["topic-root"]}], "topic-root"),
        ([{"root": "/r", "destinations": ["q"], "direction": "both"}], "import or export"),
        ([{"root": "/r", "destinations": ["q"], "poll_interval_ms": 0}], "poll_interval_ms"),
        ([{"root": "/r", "destinations": ["q"], "batch": True}], "batch"),
        ([{"root": "/r", "destinations": ["q"], "client": ""}], "client"),
        ([{"root": "/r", "destinations": ["q"], "delete_processed": "yes"}], "true or false"),
        ([{"root": "/r", "destinations": ["q"], "colour": 1}], "unknown key"),
        ([{"root": "/r", "destinations": ["q"], "consumers": ["a"]}], "only an export"),
        ([{"root": "/r", "destinations": ["q"], "direction": "export", "consumers": "a"}], "list"),
        (
            [{"root": "/r", "destinations": ["q"], "direction": "export", "consumers": ["x" * 49]}],
            "1-48 bytes of client id",
        ),
        ([{"root": "/r", "destinations": ["q"]}, {"root": "/r", "destinations": ["q"]}], "already"),
    ],
)
def test_bad_tables_name_what_is_wrong(value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_mounts(value)


def test_an_export_names_the_consumers_that_claim_its_files() -> None:
    [mount] = parse_mounts(
        [{"root": "/r", "destinations": ["q"], "direction": "export", "consumers": ["javaC", "b"]}]
    )
    assert mount.consumers == ("javaC", "b")
    [default] = parse_mounts([{"root": "/r", "destinations": ["q"], "direction": "export"}])
    assert default.consumers == ()
