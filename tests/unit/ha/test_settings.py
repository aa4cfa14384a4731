"""High availability's [cluster] settings: their defaults and their checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.config import load
from chute.errors import ConfigError


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "chute.toml"
    path.write_text(text)
    return load(path)


def test_the_defaults_let_the_live_go_on_alone() -> None:
    config = load(None)
    assert config.cluster.min_in_sync == 1
    assert config.cluster.drop_after_ms == 5000
    assert config.cluster.replication_port == 0
    assert config.cluster.replication_advertise == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("min_in_sync = 0", "cluster_min_in_sync: 0 is below 1"),
        ("drop_after_ms = 0", "cluster_drop_after_ms: 0 is below 1"),
        ('replication_advertise = "h"', "cluster_replication_advertise: 'h' is not HOST:PORT"),
        ('replication_advertise = "h:0"', "cluster_replication_advertise: 'h:0' is not HOST"),
    ],
)
def test_a_setting_out_of_range_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, f'[cluster]\ncoordinator = "etcd://127.0.0.1:2379/c"\nnode = "a"\n{text}\n')
