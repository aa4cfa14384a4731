"""Broker URL parsing."""

from __future__ import annotations

import pytest

from chute.client.url import BrokerUrl, parse_url
from chute.errors import ConnectError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("chute://127.0.0.1:5445", BrokerUrl("127.0.0.1", 5445)),
        ("chute://broker.example", BrokerUrl("broker.example", 5445)),
        ("CHUTE://Host:1/", BrokerUrl("host", 1)),
        ("chute://[::1]:7000", BrokerUrl("::1", 7000)),
    ],
)
def test_parse(url: str, expected: BrokerUrl) -> None:
    assert parse_url(url) == expected


def test_str_roundtrips() -> None:
    for url in ("chute://h:1", "chute://[::1]:2"):
        assert str(parse_url(url)) == url


def test_chutes_is_tls_on_its_own_default_port() -> None:
    assert parse_url("chutes://h") == BrokerUrl("h", 5446, tls=True)
    assert parse_url("chutes://h:9") == BrokerUrl("h", 9, tls=True)
    assert str(parse_url("chutes://h:9")) == "chutes://h:9"


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_later_transports_say_so(scheme: str) -> None:
    with pytest.raises(ConnectError, match="not supported yet"):
        parse_url(f"{scheme}://h:1")


def test_a_dropbox_url_points_at_chute_connect() -> None:
    with pytest.raises(ConnectError, match=r"chute\.connect"):
        parse_url("dropbox:///srv/mq")


@pytest.mark.parametrize(
    "url", ["http://h:1", "h:1", "chute://", "chute://h:99999", "chute://h:1/path", "chute://h?x=1"]
)
def test_invalid(url: str) -> None:
    with pytest.raises(ConnectError, match="invalid broker URL"):
        parse_url(url)
