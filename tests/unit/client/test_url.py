"""Broker URL parsing."""

from __future__ import annotations

import pytest

from chute.client.url import HTTP, WEBSOCKET, BrokerUrl, parse_url
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


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ws://h", BrokerUrl("h", 8445, False, None, None, WEBSOCKET, "/chute")),
        ("wss://h:9/", BrokerUrl("h", 9, True, None, None, WEBSOCKET, "/chute")),
        ("http://h:1", BrokerUrl("h", 1, False, None, None, HTTP, "/chute")),
        ("https://a:b@h/mq/chute/", BrokerUrl("h", 8445, True, "a", "b", HTTP, "/mq/chute")),
    ],
)
def test_the_http_port_s_transports(url: str, expected: BrokerUrl) -> None:
    """A WebSocket or plain requests on the HTTP port: default 8445, path /chute."""
    parsed = parse_url(url)
    assert parsed == expected
    assert parse_url(str(parsed)) == parsed._replace(login=None, passcode=None)
    assert parsed.http_url("/x").endswith(f"{parsed.port}{parsed.path}/x")


def test_a_dropbox_url_points_at_chute_connect() -> None:
    with pytest.raises(ConnectError, match=r"chute\.connect"):
        parse_url("dropbox:///srv/mq")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h:1",
        "h:1",
        "chute://",
        "ws://h/x?y=1",
        "http://h#f",
        "chute://h:99999",
        "chute://h:1/path",
        "chute://h?x=1",
    ],
)
def test_invalid(url: str) -> None:
    with pytest.raises(ConnectError, match="invalid broker URL"):
        parse_url(url)


def test_a_url_carries_a_percent_encoded_login_and_passcode() -> None:
    url = parse_url("chute://alice:s3cr%3At%40%2F%25@h:1")
    assert url == BrokerUrl("h", 1, False, "alice", "s3cr:t@/%")
    assert str(url) == "chute://h:1"  # never the passcode
    assert parse_url("chutes://al%20ice@h") == BrokerUrl("h", 5446, True, "al ice", None)
    assert parse_url("chute://alice:@h").passcode == ""  # an empty passcode is one


def test_given_credentials_win_over_the_urls() -> None:
    url = parse_url("chute://alice:secret@h")
    assert url.credentials(None, None) == ("alice", "secret")
    assert url.credentials("bob", None) == ("bob", None)  # alice's passcode is not bob's
    assert url.credentials("bob", "pw") == ("bob", "pw")
    assert url.credentials("alice", None) == ("alice", "secret")
    assert url.credentials(None, "other") == ("alice", "other")
    assert parse_url("chute://h").credentials(None, None) == (None, None)


def test_errors_about_a_url_never_show_its_passcode() -> None:
    with pytest.raises(ConnectError) as info:
        parse_url("chute://alice:hunter2@h:1/path")
    assert "hunter2" not in info.value.reason
    assert "alice:***@h:1/path" in info.value.reason
    with pytest.raises(ConnectError, match="a passcode without a login"):
        parse_url("chute://:pw@h")
