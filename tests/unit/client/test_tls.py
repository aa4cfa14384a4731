"""The client's TLS: its context, and errors said as the person connecting can act on them."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from chute.client.tls import client_context, describe, unanswered
from chute.errors import ClientIdInUse, ConnectError


def test_a_client_certificate_is_loaded_with_its_key(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("alice", common_name="alice")
    both, cert, key = tmp_path / "both.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(both))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client_context(str(tmp_path / "ca.pem"), cert_file=str(both))
    client_context(str(tmp_path / "ca.pem"), cert_file=str(cert), key_file=str(key))
    with pytest.raises(ConnectError, match="cannot load the client certificate"):
        client_context(cert_file=str(cert))  # its key is elsewhere
    with pytest.raises(ConnectError, match="without its certificate"):
        client_context(key_file=str(key))
    with pytest.raises(ConnectError, match="cannot load the CA file"):
        client_context(str(tmp_path / "missing.pem"))


def ssl_error(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, reason)
    exc.reason = reason
    return exc


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "the broker requires a client certificate"),
        ("TLSV1_ALERT_UNKNOWN_CA", "refused the TLS connection (TLSV1_ALERT_UNKNOWN_CA)"),
        ("WRONG_VERSION_NUMBER", "a plain port? then use chute://"),
        ("SOMETHING_ELSE", "TLS error: SOMETHING_ELSE"),
    ],
)
def test_tls_errors_say_what_to_do(reason: str, said: str) -> None:
    assert said in describe(ssl_error(reason))


def test_an_unverified_broker_certificate_points_at_tls_ca() -> None:
    exc = ssl.SSLCertVerificationError(1, "CERTIFICATE_VERIFY_FAILED")
    exc.reason = "CERTIFICATE_VERIFY_FAILED"
    exc.verify_message = "self-signed certificate"
    assert describe(exc) == (
        "the broker's certificate did not verify (self-signed certificate): "
        "give the CA that signed it (tls_ca, --tls-ca)"
    )


def test_a_connection_lost_before_the_answer_says_what_usually_causes_it() -> None:
    lost = ConnectError("connection to the broker lost")
    assert "use chutes://" in unanswered(False, lost).reason
    assert "client certificate" in unanswered(True, lost).reason
    assert unanswered(True, lost).reason.startswith("connection to the broker lost (")


def test_a_refusal_the_broker_answered_with_is_kept_as_it_is() -> None:
    refusal = ClientIdInUse("client id 'x' is in use")
    assert unanswered(False, refusal) is refusal
    lost = unanswered(True, ConnectError("connection lost"))
    assert "client certificate" in lost.reason
