"""The TLS and browser keys of ``[server]``: defaults, parsing, and errors that say what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chute.config import ServerConfig, load
from chute.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chute.toml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    config = ServerConfig()
    assert (config.listen.stomp_tls_port, config.http.tls) == (0, False)
    assert (config.tls.ca, config.tls.client_certs, config.http.allowed_origins) == ("", "none", ())
    assert not config.tls_listening


def test_every_key_from_the_file(tmp_path: Path) -> None:
    config = load(
        write(
            tmp_path,
            "[server]\n"
            'tls_cert = "broker.pem"\ntls_key = "broker-key.pem"\n'
            "tls_port = 5446\nstomp_tls_port = 61614\nhttp_tls = true\n"
            'tls_ca = "ca.pem"\ntls_client_certs = "required"\n'
            'allowed_origins = ["HTTPS://App.Example.com:443", "http://localhost:3000"]\n',
        )
    )
    assert (config.listen.tls_port, config.listen.stomp_tls_port, config.http.tls) == (
        5446,
        61614,
        True,
    )
    assert (config.tls.ca, config.tls.client_certs) == ("ca.pem", "required")
    assert config.http.allowed_origins == ("https://app.example.com", "http://localhost:3000")
    assert config.tls_listening


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\ntls_cert = "a.pem"\nstomp_tls_port = 1\n')
    config = load(path, {"stomp_tls_port": 2, "http_tls": None, "tls_client_certs": None})
    assert config.listen.stomp_tls_port == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("stomp_tls_port = 61614\n", "server.stomp_tls_port is set but server.tls_cert is not"),
        ("http_tls = true\n", "server.http_tls is set but server.tls_cert is not"),
        ("tls_port = 5446\n", "`chute cert` makes one"),
        ('tls_key = "k.pem"\n', "server.tls_key is set but server.tls_cert is not"),
        (
            'tls_cert = "c.pem"\ntls_client_certs = "required"\n',
            'tls_client_certs = "required" needs server.tls_ca',
        ),
        ('tls_client_certs = "sometimes"\n', "must be one of none | optional | required"),
        ("stomp_tls_port = 70000\n", "server.stomp_tls_port: 70000 is not a TCP port"),
        ("http_tls = 1\n", "server.http_tls: expected true or false"),
        ('allowed_origins = "https://a.example"\n', "expected a list of origins"),
        ('allowed_origins = ["a.example"]\n', "'a.example' is not an origin"),
        ('allowed_origins = ["https://a.example/app"]\n', "(no path)"),
    ],
)
def test_mistakes_say_what_to_do(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, "[server]\n" + text))
    assert fragment in info.value.reason


def test_http_tls_with_the_http_listener_off_is_no_error() -> None:
    load(None, {"http_tls": True, "http_port": 0})


def test_warnings_for_any_origin_and_for_a_ca_without_tls(tmp_path: Path) -> None:
    config = load(write(tmp_path, '[server]\nallowed_origins = ["*"]\ntls_ca = "ca.pem"\n'))
    assert config.http.allowed_origins == ("*",)
    said = "\n".join(config.warnings())
    assert "any web page a user visits" in said
    assert "no listener speaks TLS" in said


def test_the_http_port_asks_for_client_certificates_as_the_others_unless_told(
    tmp_path: Path,
) -> None:
    base = '[server]\ntls_cert = "b.pem"\ntls_ca = "ca.pem"\ntls_client_certs = "optional"\n'
    assert ServerConfig().http_client_certs == "none"
    same = load(write(tmp_path, base))
    assert (same.http.tls_client_certs, same.http_client_certs) == ("same", "optional")
    own = load(write(tmp_path, base + 'http_tls_client_certs = "none"\n'))
    assert (own.tls.client_certs, own.http_client_certs) == ("optional", "none")
    with pytest.raises(
        ConfigError, match=re.escape('http_tls_client_certs = "required" needs server.tls_ca')
    ):
        load(write(tmp_path, '[server]\nhttp_tls_client_certs = "required"\n'))
    with pytest.raises(
        ConfigError, match=re.escape("must be one of same | none | optional | required")
    ):
        load(write(tmp_path, '[server]\nhttp_tls_client_certs = "maybe"\n'))
