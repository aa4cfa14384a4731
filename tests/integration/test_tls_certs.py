"""What the broker says about certificates and versions, against real ``chute serve``
subprocesses: a certificate out of its validity is warned of at start and named in
every handshake failure it causes (the broker's log, chute's client, stomp.py), and
a client offering TLS 1.0 or 1.1 is logged as refused for its version, not as
one speaking plain text."""

from __future__ import annotations

import datetime
import socket
import ssl
import warnings
from pathlib import Path

import pytest
import stomp
import trustme
from stomp.exception import ConnectFailedException

import chute
from chute.errors import ConnectError

from .conftest import ChuteServer, free_port, start_server
from .test_stomp import TIMEOUT

NOW = datetime.datetime.now(datetime.UTC)


def _serve(tmp: Path, cert: Path, *extra: str) -> tuple[ChuteServer, int, int]:
    """A broker with a native TLS and a STOMP TLS port: (server, tls, stomp_tls)."""
    tls, stomp_tls = free_port(), free_port()
    server = start_server(
        tmp,
        "--tls-cert",
        str(cert),
        "--tls-port",
        str(tls),
        "--stomp-tls-port",
        str(stomp_tls),
        *extra,
    )
    return server, tls, stomp_tls


@pytest.mark.parametrize(
    ("not_before", "not_after", "said"),
    [
        (NOW - datetime.timedelta(days=30), NOW - datetime.timedelta(days=1), "expired on"),
        (
            NOW + datetime.timedelta(days=1),
            NOW + datetime.timedelta(days=30),
            "is not valid before",
        ),
    ],
    ids=["expired", "not-yet-valid"],
)
def test_a_certificate_out_of_its_validity_is_warned_of_and_named_in_failures(
    tmp_path: Path, not_before: datetime.datetime, not_after: datetime.datetime, said: str
) -> None:
    ca = trustme.CA()
    cert, ca_file = tmp_path / "broker.pem", tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert(
        "127.0.0.1", not_before=not_before, not_after=not_after
    ).private_key_and_cert_chain_pem.write_to_path(str(cert))
    server, tls, stomp_tls = _serve(tmp_path, cert)
    try:
        warning = server.wait_for_line("TLS clients will refuse the handshake")
        assert f"server.tls_cert {str(cert)!r} {said}" in warning, warning
        assert " WARNING " in warning

        start = len(server.lines)
        with pytest.raises(ConnectError) as info:
            chute.connect(f"chutes://127.0.0.1:{tls}", tls_ca=str(ca_file), timeout=TIMEOUT)
        assert "the broker's certificate is out of its validity" in str(info.value)
        line = server.wait_for_line("native-tls: TLS handshake with", start=start)
        assert said in line, line
        assert "does it trust" not in line

        start = len(server.lines)
        conn = stomp.Connection12([("127.0.0.1", stomp_tls)], reconnect_attempts_max=1)
        conn.set_ssl(for_hosts=[("127.0.0.1", stomp_tls)], ca_certs=str(ca_file))
        with pytest.raises(ConnectFailedException):
            conn.connect(wait=True)
        line = server.wait_for_line("stomp-tls: TLS handshake with", start=start)
        assert said in line, line
    finally:
        assert server.stop() == 0, server.output


def test_an_expired_client_certificate_is_named_so(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, ca_file, alice = tmp_path / "broker.pem", tmp_path / "ca.pem", tmp_path / "alice.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    ca.issue_cert(
        "alice",
        common_name="alice",
        not_before=NOW - datetime.timedelta(days=30),
        not_after=NOW - datetime.timedelta(days=1),
    ).private_key_and_cert_chain_pem.write_to_path(str(alice))
    server, tls, _ = _serve(
        tmp_path, cert, "--tls-ca", str(ca_file), "--tls-client-certs", "optional"
    )
    try:
        with pytest.raises(ConnectError):
            chute.connect(
                f"chutes://127.0.0.1:{tls}",
                tls_ca=str(ca_file),
                tls_cert=str(alice),
                timeout=TIMEOUT,
            )
        line = server.wait_for_line("native-tls: TLS handshake with")
        assert "its client certificate is out of its validity (certificate has expired)" in line
    finally:
        assert server.stop() == 0, server.output


@pytest.mark.parametrize(
    ("version", "name"), [("TLSv1", "TLS 1.0"), ("TLSv1_1", "TLS 1.1")], ids=["1.0", "1.1"]
)
def test_a_tls_1_0_or_1_1_client_is_refused_for_its_version_not_called_plain_text(
    tmp_path: Path, version: str, name: str
) -> None:
    ca = trustme.CA()
    cert = tmp_path / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    server, _, stomp_tls = _serve(tmp_path, cert)
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # what an old client offers
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_ciphers("DEFAULT@SECLEVEL=0")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = context.maximum_version = getattr(ssl.TLSVersion, version)
        # (stomp.py cannot be made to offer these: OpenSSL refuses them at its default level)
        with (
            socket.create_connection(("127.0.0.1", stomp_tls), timeout=TIMEOUT) as raw,
            pytest.raises((ssl.SSLError, ConnectionError)),
        ):
            context.wrap_socket(raw)
        line = server.wait_for_line("stomp-tls: TLS handshake with")
        assert f"it offered {name}, an outdated TLS version, refused" in line, line
        assert "plain text" not in line
    finally:
        assert server.stop() == 0, server.output
