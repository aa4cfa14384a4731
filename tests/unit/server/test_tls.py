"""The pure parts of the server's TLS: the shared context, certificate users, failure lines."""

from __future__ import annotations

import datetime
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from chute.server.tls import certificate_user, handshake_failure, hello_version, server_context


class FakeSslObject:
    def __init__(self, cert: dict[str, Any] | None) -> None:
        self.cert = cert

    def getpeercert(self) -> dict[str, Any] | None:
        return self.cert


class FakeTransport:
    def __init__(self, ssl_object: FakeSslObject | None) -> None:
        self.extra = {"ssl_object": ssl_object}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)


def subject(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"subject": tuple(((key, value),) for key, value in pairs)}


def test_a_verified_certificate_names_its_common_name() -> None:
    cert = subject(("organizationName", "Example"), ("commonName", "alice"))
    assert certificate_user(FakeTransport(FakeSslObject(cert))) == "alice"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ssl_object",
    [
        None,  # plain TCP
        FakeSslObject(None),  # no certificate
        FakeSslObject({}),  # not verified (the context asked for none)
        FakeSslObject(subject(("organizationName", "Example"))),  # no commonName
        FakeSslObject(subject(("commonName", "alice"), ("commonName", "bob"))),  # ambiguous
    ],
)
def test_no_user_without_one_unambiguous_verified_common_name(
    ssl_object: FakeSslObject | None,
) -> None:
    assert certificate_user(FakeTransport(ssl_object)) is None  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    paths = {"ca": tmp / "ca.pem", "cert": tmp / "broker.pem", "key": tmp / "broker-key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    leaf = ca.issue_cert("localhost")
    leaf.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    leaf.private_key_pem.write_to_path(str(paths["key"]))
    return {name: str(path) for name, path in paths.items()}


@pytest.mark.parametrize(
    ("mode", "verify"),
    [("none", ssl.CERT_NONE), ("optional", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_the_context_asks_for_client_certificates_as_configured(
    files: dict[str, str], mode: str, verify: ssl.VerifyMode
) -> None:
    context = server_context(files["cert"], files["key"], ca=files["ca"], client_certs=mode)
    assert context.verify_mode == verify
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.cert_store_stats()["x509_ca"] == 1  # tls_ca alone: never the system's CAs


def test_client_certificates_without_a_ca_or_an_unknown_mode_are_refused(
    files: dict[str, str],
) -> None:
    with pytest.raises(ValueError, match="needs the CA"):
        server_context(files["cert"], files["key"], client_certs="required")
    with pytest.raises(ValueError, match="client_certs must be one of"):
        server_context(files["cert"], files["key"], ca=files["ca"], client_certs="maybe")


def test_unreadable_files_name_themselves(files: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(OSError, match=r"missing\.pem"):
        server_context(missing)
    with pytest.raises(OSError, match=r"client CA file .*missing\.pem"):
        server_context(files["cert"], files["key"], ca=missing, client_certs="optional")


def ssl_error(reason: str, cls: type[ssl.SSLError] = ssl.SSLError) -> ssl.SSLError:
    exc = cls(1, f"[SSL: {reason}] ...")
    exc.reason = reason
    return exc


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (ssl_error("WRONG_VERSION_NUMBER"), "plain text, not TLS (WRONG_VERSION_NUMBER)"),
        (ssl_error("HTTP_REQUEST"), "plain text, not TLS (HTTP_REQUEST)"),
        (ssl_error("HTTPS_PROXY_REQUEST"), "plain text"),  # STOMP's CONNECT
        (ssl_error("PEER_DID_NOT_RETURN_A_CERTIFICATE"), 'tls_client_certs = "required"'),
        (ssl_error("TLSV1_ALERT_UNKNOWN_CA"), "does it trust server.tls_cert?"),
        (ConnectionAbortedError("SSL handshake is taking longer than 15.0 seconds"), "within 15"),
        (ConnectionResetError(), "closed the connection during the handshake"),
    ],
)
def test_a_failed_handshake_is_told_by_its_cause(exc: BaseException, said: str) -> None:
    assert said in handshake_failure(exc)


def test_a_certificate_that_did_not_verify_says_why() -> None:
    exc = ssl_error("CERTIFICATE_VERIFY_FAILED", ssl.SSLCertVerificationError)
    exc.verify_message = "unable to get local issuer certificate"  # type: ignore[attr-defined]
    assert handshake_failure(exc) == (
        "its client certificate did not verify against server.tls_ca "
        "(unable to get local issuer certificate)"
    )


def _hello(version: int) -> bytes:
    """The first bytes of a ClientHello whose client_version is ``version``."""
    return bytes([0x16, 0x03, 0x01, 0x00, 0x80, 0x01, 0x00, 0x00, 0x7C]) + version.to_bytes(2)


@pytest.mark.parametrize(
    ("version", "name"), [(0x0300, "SSL 3.0"), (0x0301, "TLS 1.0"), (0x0302, "TLS 1.1")]
)
def test_an_outdated_hello_is_named_by_its_version(version: int, name: str) -> None:
    assert hello_version(_hello(version)) == name
    said = handshake_failure(ssl_error("UNSUPPORTED_PROTOCOL"), hello=_hello(version))
    assert said.startswith(f"it offered {name}, an outdated TLS version, refused")


def test_tls_1_2_and_plain_text_are_not_outdated_hellos() -> None:
    assert hello_version(_hello(0x0303)) is None  # TLS 1.2, and 1.3's legacy_version
    assert hello_version(b"CONNECT\naccept-version:1.2\n\n\x00") is None
    plain = handshake_failure(ssl_error("UNSUPPORTED_PROTOCOL"), hello=b"CONNECT\n\n\x00")
    assert "plain text" in plain
    unknown = handshake_failure(ssl_error("UNSUPPORTED_PROTOCOL"))  # its hello not seen
    assert "only a version older than TLS 1.2" in unknown


def test_an_expired_broker_certificate_is_named_in_the_failures_it_causes() -> None:
    trouble = "server.tls_cert 'b.pem' expired on 2026-01-01 00:00 UTC"
    for exc in (ssl_error("SSLV3_ALERT_CERTIFICATE_EXPIRED"), ssl_error("TLSV1_ALERT_UNKNOWN_CA")):
        said = handshake_failure(exc, trouble=trouble)
        assert said.endswith(f"): {trouble}")
        assert "does it trust" not in said
    said = handshake_failure(ConnectionResetError(), trouble=trouble)
    assert said == f"the client closed the connection during the handshake: {trouble}"
    clock = handshake_failure(ssl_error("SSLV3_ALERT_CERTIFICATE_EXPIRED"))
    assert "check the clocks" in clock


def test_a_client_certificate_out_of_its_validity_says_so() -> None:
    exc = ssl_error("CERTIFICATE_VERIFY_FAILED", ssl.SSLCertVerificationError)
    exc.verify_code = 10  # type: ignore[attr-defined]
    exc.verify_message = "certificate has expired"  # type: ignore[attr-defined]
    assert handshake_failure(exc) == (
        "its client certificate is out of its validity (certificate has expired): renew it"
    )


def test_a_ca_out_of_its_validity_is_warned_of_at_start(
    files: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old CA")])
    now = datetime.datetime.now(datetime.UTC)
    old = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=30))
        .not_valid_after(now - datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca = tmp_path / "old-ca.pem"
    ca.write_bytes(old.public_bytes(serialization.Encoding.PEM))
    with caplog.at_level(logging.WARNING, logger="chute.server"):
        server_context(files["cert"], files["key"], ca=str(ca), client_certs="optional")
    [record] = caplog.records
    assert "the CA CN=old CA expired on" in record.getMessage()
    assert "no client certificate it signed verifies" in record.getMessage()
