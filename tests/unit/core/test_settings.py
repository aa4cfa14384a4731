"""Destination settings: sizes, validation and wildcard resolution (DESIGN.md "Configuration")."""

from __future__ import annotations

from typing import Any

import pytest

from chute.core.model.address import DEAD_LETTER, EXPIRED
from chute.core.model.settings import (
    DestinationSettings,
    Overflow,
    SettingsResolver,
    parse_size,
    settings_from_mapping,
)
from chute.errors import ConfigError

from .helpers import make_broker


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512MiB", 512 * 1024 * 1024),
        ("512mib", 512 * 1024 * 1024),
        ("64KB", 64_000),
        ("64KiB", 64 * 1024),
        ("1 GiB", 1 << 30),
        ("2GB", 2_000_000_000),
        ("3M", 3 << 20),
        ("10k", 10 * 1024),
        ("1000", 1000),
        ("7B", 7),
        (" 5 MB ", 5_000_000),
        (1000, 1000),
        (0, 0),
    ],
)
def test_sizes_parse(text: int | str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["1.5GB", "-1", "12XB", "MiB", "", "ten", True, -1])
def test_bad_sizes_are_config_errors(bad: Any) -> None:
    with pytest.raises(ConfigError):
        parse_size(bad, what="max_bytes")


def test_defaults() -> None:
    s = DestinationSettings()
    assert s.max_messages == 0
    assert s.max_bytes == 0
    assert not s.bounded
    assert s.overflow is Overflow.REJECT
    assert s.dead_letter == DEAD_LETTER
    assert s.expiry == EXPIRED
    assert DestinationSettings(max_bytes=1).bounded
    assert DestinationSettings(max_messages=1).bounded


def test_a_table_becomes_settings() -> None:
    raw = {
        "max_messages": 100_000,
        "max-bytes": "512MiB",
        "overflow": "dead-letter",
        "max_deliveries": 10,
        "dead_letter": "/queue/orders.dlq",
        "expiry": "orders.expired",
        "block_timeout_ms": 500,
    }
    s = DestinationSettings(**settings_from_mapping(raw, where="queue:orders"))
    assert s.max_messages == 100_000
    assert s.max_bytes == 512 << 20
    assert s.overflow is Overflow.DEAD_LETTER
    assert s.dead_letter == "queue:orders.dlq"
    assert s.expiry == "queue:orders.expired"
    assert s.block_timeout_ms == 500


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"colour": 1}, "unknown setting"),
        ({"overflow": "explode"}, "reject | dead-letter | drop-oldest | block"),
        ({"max_messages": -1}, "non-negative"),
        ({"max_messages": "10"}, "non-negative"),
        ({"max_deliveries": True}, "non-negative"),
        ({"max_bytes": "lots"}, "size"),
        ({"dead_letter": "a/b"}, "dead_letter"),
    ],
)
def test_bad_tables_name_the_destination_and_the_key(raw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_mapping(raw, where='destinations."queue:orders"')
    assert 'destinations."queue:orders"' in str(info.value)
    assert fragment in str(info.value)


def test_exact_key_beats_every_wildcard() -> None:
    exact = DestinationSettings(max_messages=1)
    wild = DestinationSettings(max_messages=2)
    r = SettingsResolver({"queue:logs.*": wild, "queue:logs.app": exact})
    assert r("queue:logs.app") is exact
    assert r("queue:logs.web") is wild


def test_the_most_specific_wildcard_wins_whatever_the_order() -> None:
    broad = DestinationSettings(max_messages=1)
    narrow = DestinationSettings(max_messages=2)
    narrower = DestinationSettings(max_messages=3)
    for patterns in (
        {"queue:*": broad, "queue:logs.*": narrow, "queue:logs.app.*": narrower},
        {"queue:logs.app.*": narrower, "queue:logs.*": narrow, "queue:*": broad},
    ):
        r = SettingsResolver(patterns)
        assert r("queue:logs.app.1") is narrower
        assert r("queue:logs.web") is narrow
        assert r("queue:orders") is broad
        assert r("topic:logs.web") is r.default


def test_keys_are_addresses_in_any_spelling() -> None:
    s = DestinationSettings(max_messages=5)
    r = SettingsResolver(
        {"orders": s, "logs.*": s, "/topic/prices": s, "/queue/app.*": s, "/topic/feed.*": s}
    )
    assert r("queue:orders") is s
    assert r("queue:logs.x") is s
    assert r("topic:prices") is s
    assert r("queue:app.web") is s
    assert r("topic:feed.eu") is s
    assert r("topic:orders") is r.default
    assert r("queue:feed.eu") is r.default


def test_a_bare_wildcard_name_with_a_colon_is_a_queue_pattern() -> None:
    s = DestinationSettings(max_messages=5)
    r = SettingsResolver({"app:*": s})
    assert r("queue:app:orders") is s


def test_a_wildcard_matches_only_its_kind() -> None:
    s = DestinationSettings(max_messages=5)
    r = SettingsResolver({"topic:*": s})
    assert r("topic:anything") is s
    assert r("queue:anything") is r.default


def test_unmatched_addresses_get_the_default() -> None:
    default = DestinationSettings(max_deliveries=3)
    r = SettingsResolver({}, default)
    assert r("queue:q") is default


def test_the_broker_gives_each_destination_its_settings() -> None:
    logs = DestinationSettings(max_messages=7, overflow=Overflow.DROP_OLDEST)
    broker = make_broker({"queue:logs.*": logs})
    queue = broker.destination("queue:logs.web")
    topic = broker.destination("topic:logs.web")
    assert queue.settings is logs
    assert topic.settings == DestinationSettings()
