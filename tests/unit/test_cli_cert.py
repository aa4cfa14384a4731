"""``chute cert``'s files: a CA, the broker's certificate and client certificates that verify."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chute.cli.cert import client_files, make_files
from chute.errors import ConfigError
from chute.server.tls import server_context


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_files_verify_and_name_what_they_should(tmp_path: Path) -> None:
    hosts = ["localhost", "127.0.0.1", "::1", "broker.example"]
    written = make_files(tmp_path, hosts, ["alice"], days=30)
    assert [w.path.name for w in written] == [
        "ca.pem",
        "ca-key.pem",
        "broker.pem",
        "broker-key.pem",
        "client-alice.pem",
        "client-alice-key.pem",
    ]
    ca, broker = load(tmp_path / "ca.pem"), load(tmp_path / "broker.pem")
    alice = load(client_files(tmp_path, "alice")[0])
    broker.verify_directly_issued_by(ca)
    alice.verify_directly_issued_by(ca)
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "broker.example"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    [cn] = alice.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert cn.value == "alice"
    usage = alice.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # what the broker loads them with
    server_context(
        str(tmp_path / "broker.pem"),
        str(tmp_path / "broker-key.pem"),
        ca=str(tmp_path / "ca.pem"),
        client_certs="required",
    )
    for key in ("ca-key.pem", "broker-key.pem", "client-alice-key.pem"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600


def test_a_second_run_keeps_what_exists_and_signs_new_clients_with_the_same_ca(
    tmp_path: Path,
) -> None:
    make_files(tmp_path, ["localhost"], ["alice"], days=30)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    written = make_files(tmp_path, ["localhost"], ["alice", "bob"], days=30)
    assert [(w.path.name, w.kept) for w in written if w.kept] == [
        ("ca.pem", True),
        ("broker.pem", True),
        ("client-alice.pem", True),
    ]
    assert all((tmp_path / name).read_bytes() == data for name, data in before.items())
    load(client_files(tmp_path, "bob")[0]).verify_directly_issued_by(load(tmp_path / "ca.pem"))
    make_files(tmp_path, ["localhost"], [], days=30, force=True)
    assert (tmp_path / "ca.pem").read_bytes() != before["ca.pem"]


def test_a_bad_host_or_an_unreadable_ca_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a host name or an IP address"):
        make_files(tmp_path, ["not a host!"], [], days=1)
    (tmp_path / "ca.pem").write_text("garbage")
    (tmp_path / "ca-key.pem").write_text("garbage")
    with pytest.raises(ConfigError, match="use --force"):
        make_files(tmp_path, ["localhost"], [], days=1)


def _keys(directory: Path) -> dict[str, object]:
    return {
        path.name: serialization.load_pem_private_key(path.read_bytes(), password=None)
        for path in sorted(directory.glob("*key.pem"))
    }


def test_keys_are_rsa_by_default_and_ec_on_request(tmp_path: Path) -> None:
    # RSA loads in every TLS client (Ruby's stomp gem cannot load an EC key)
    (tmp_path / "rsa").mkdir()
    (tmp_path / "ec").mkdir()
    make_files(tmp_path / "rsa", ["localhost"], ["alice"], days=1)
    keys = _keys(tmp_path / "rsa")
    assert sorted(keys) == ["broker-key.pem", "ca-key.pem", "client-alice-key.pem"]
    assert all(isinstance(k, rsa.RSAPrivateKey) and k.key_size == 2048 for k in keys.values())
    make_files(tmp_path / "ec", ["localhost"], ["alice"], days=1, key_type="ec")
    assert all(isinstance(k, ec.EllipticCurvePrivateKey) for k in _keys(tmp_path / "ec").values())
    for kind in ("rsa", "ec"):  # what the broker loads them with
        server_context(
            str(tmp_path / kind / "broker.pem"),
            str(tmp_path / kind / "broker-key.pem"),
            ca=str(tmp_path / kind / "ca.pem"),
            client_certs="required",
        )


def test_a_kept_ca_signs_keys_of_the_other_type(tmp_path: Path) -> None:
    make_files(tmp_path, ["localhost"], [], days=1, key_type="ec")
    make_files(tmp_path, ["localhost"], ["bob"], days=1, key_type="rsa")
    bob = load(client_files(tmp_path, "bob")[0])
    assert isinstance(bob.public_key(), rsa.RSAPublicKey)
    bob.verify_directly_issued_by(load(tmp_path / "ca.pem"))
    with pytest.raises(ConfigError, match="--key-type must be one of rsa, ec"):
        make_files(tmp_path, ["localhost"], ["carol"], days=1, key_type="dsa")
