"""Web origins: one spelling, the broker's own, and the policy the WebSocket applies."""

from __future__ import annotations

import pytest

from chute.origins import OriginPolicy, normalize, own_origins


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("https://app.example.com", "https://app.example.com"),
        ("HTTPS://App.Example.COM", "https://app.example.com"),
        ("https://app.example.com:443", "https://app.example.com"),  # the default port
        ("http://app.example.com:80", "http://app.example.com"),
        ("https://app.example.com:8443", "https://app.example.com:8443"),
        ("http://[::1]:8445", "http://[::1]:8445"),
        ("http://127.0.0.1:8445", "http://127.0.0.1:8445"),
    ],
)
def test_an_origin_has_one_spelling(text: str, origin: str) -> None:
    assert normalize(text) == origin


@pytest.mark.parametrize(
    "text",
    [
        "null",  # what a sandboxed frame or a file:// page sends
        "",
        "app.example.com",
        "ws://app.example.com",
        "file:///home/me/page.html",
        "https://app.example.com/path",
        "https://app.example.com/?q=1",
        "https://user@app.example.com",
        "https://app.example.com:99999",
    ],
)
def test_what_is_not_an_origin(text: str) -> None:
    assert normalize(text) is None


def test_the_brokers_own_origins() -> None:
    own = own_origins("127.0.0.1", 8445)
    assert "http://127.0.0.1:8445" in own
    assert "https://localhost:8445" in own
    assert "http://[::1]:8445" in own
    assert "http://10.0.0.5:8445" in own_origins("10.0.0.5", 8445)
    assert "https://broker.example:8445" in own_origins("broker.example", 8445)
    assert not any("0.0.0.0" in o for o in own_origins("0.0.0.0", 8445))  # noqa: S104


def test_the_policy() -> None:
    policy = OriginPolicy(["https://app.example.com", *own_origins("127.0.0.1", 8445)])
    assert policy.allows(None)  # not a browser
    assert policy.allows("https://app.example.com:443")
    assert policy.allows("http://localhost:8445")
    assert not policy.allows("https://evil.example")
    assert not policy.allows("http://localhost:8446")  # another port is another origin
    assert not policy.allows("null")
    assert OriginPolicy(["*"]).allows("https://evil.example")
    assert not OriginPolicy([]).allows("https://app.example.com")
