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


@pytest.mark.parametrize(
    ("url", "nodes"),
    [
        ("chute://a:1,b:2", [("a", 1), ("b", 2)]),
        ("chute://a,b:2,[::1]", [("a", 5445), ("b", 2), ("::1", 5445)]),
        ("chutes://a,b", [("a", 5446), ("b", 5446)]),
        ("ws://a:1,B:2/mq", [("a", 1), ("b", 2)]),
        ("https://u:p@a,b/", [("a", 8445), ("b", 8445)]),
    ],
)
def test_several_nodes(url: str, nodes: list[tuple[str, int]]) -> None:
    """Each node of the list, with the scheme's default port where it gives none; the
    rest of the URL (TLS, login, path) is the same for every node."""
    parsed = parse_url(f"{url}?order=listed")
    listed = parsed.nodes()
    assert [(node.host, node.port) for node in listed] == nodes
    assert {(n.scheme, n.login, n.passcode, n.path, n.others) for n in listed} == {
        (parsed.scheme, parsed.login, parsed.passcode, parsed.path, ())
    }
    assert parse_url(str(parsed)) == parsed._replace(login=None, passcode=None)


def test_the_nodes_are_tried_from_a_random_one_round_the_list() -> None:
    url = parse_url("chute://a:1,b:1,c:1")
    assert url.order == "random"
    hosts = "abcabc"
    starts = set()
    for _ in range(200):
        tried = "".join(node.host for node in url.nodes())
        assert tried in hosts  # a rotation of the listed order
        starts.add(tried[0])
    assert starts == {"a", "b", "c"}
    assert [n.host for n in parse_url("chute://a:1,b:1,c:1?order=listed").nodes()] == [
        "a",
        "b",
        "c",
    ]
    assert str(url) == "chute://a:1,b:1,c:1"
    assert parse_url("chute://a:1").nodes() == (BrokerUrl("a", 1),)


def test_a_node_s_address_names_it() -> None:
    assert parse_url("chute://[::1]:7,h:8").node == "[::1]:7"
    assert [n.node for n in parse_url("chute://h:8,[::1]:7?order=listed").nodes()] == [
        "h:8",
        "[::1]:7",
    ]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("chute://a:1,", "an empty node in the list"),
        ("chute://,a:1", "an empty node in the list"),
        ("chute://a:1,,b:2", "an empty node in the list"),
        ("chute://a:1,:2", "node ':2' has no host"),
        ("chute://a:1,b:x", "node 'b:x'"),
        ("chute://a:1,b:70000", "node 'b:70000'"),
        ("chute://a:1,A:1", "node a:1 is listed twice"),
        ("chute://a,a:5445", "node a:5445 is listed twice"),
        ("chute://a,b?order=first", "unknown option 'order=first'"),
        ("chute://a,b?order=listed&x", "unknown option 'x'"),
        ("chute://a,b?failover=-1", "unknown option 'failover=-1'"),
        ("chute://a?failover=soon", "unknown option 'failover=soon'"),
        ("chute://a?failover=inf", "unknown option 'failover=inf'"),
        ("chute://alice:pw@a,b:x", "node 'b:x'"),
    ],
)
def test_a_bad_list_of_nodes(url: str, reason: str) -> None:
    with pytest.raises(ConnectError, match="invalid broker URL") as info:
        parse_url(url)
    assert reason in info.value.reason
    assert "pw" not in info.value.reason


def test_failover_is_30_seconds_with_several_nodes_and_none_with_one() -> None:
    assert parse_url("chute://a,b").failover == 30
    assert parse_url("chute://a").failover == 0
    assert parse_url("chute://a?failover=2.5").failover == 2.5
    assert parse_url("chute://a,b?order=listed&failover=0").failover == 0
    url = parse_url("chute://a:1,b:2?failover=5&order=listed")
    assert str(url) == "chute://a:1,b:2?order=listed&failover=5"
    assert parse_url(str(url)) == url
