"""``chute cert``: a private CA and the certificates to try TLS out with.

``chute cert DIR`` writes, into DIR (made if missing):

- ``ca.pem``, ``ca-key.pem``: a self-signed CA. Clients trust ``ca.pem``
  (``--tls-ca``); a broker that asks for client certificates checks them
  against it (``tls_ca``). The key signs everything else: keep it secret.
- ``broker.pem``, ``broker-key.pem``: the broker's certificate (``tls_cert``,
  ``tls_key``) for localhost, 127.0.0.1 and ::1, and each ``--host``.
- with ``--client NAME``: ``client-NAME.pem``, ``client-NAME-key.pem``, a
  client certificate whose commonName is NAME: a broker with
  ``tls_client_certs`` logs its holder in as user NAME.

A file that exists is kept (so ``chute cert DIR --client bob`` later adds
bob's certificate, signed by the CA already there); ``--force`` makes all anew.
Then it prints what it wrote and the configuration lines to use.

Keys (``--key-type``) are RSA 2048 by default, which every TLS client loads
(Ruby's stomp gem, for one, cannot load an EC key); ``--key-type ec`` makes
ECDSA P-256 keys, smaller and faster, for clients that take them. A CA kept from
an earlier run signs keys of either type. Keys are written unencrypted and
readable by their owner only: this is for trying TLS out, a production broker's
certificates come from the operator's own CA.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chute.errors import ConfigError

_USER_NAME: Final = re.compile(r"[A-Za-z0-9._@-]{1,64}")  # as [users.NAME] in the config
_DEFAULT_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
_CA_DAYS: Final = 3650
_SKEW: Final = datetime.timedelta(minutes=5)  # valid a little before now: clocks differ
KEY_TYPES: Final = ("rsa", "ec")
"""``--key-type``: the first is the default."""
_RSA_BITS: Final = 2048

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
NewKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass
class Written:
    """What one run wrote (or kept), for the summary."""

    path: Path
    what: str
    kept: bool = False


def run(args: argparse.Namespace) -> int:
    """The ``chute cert`` command (declared in :mod:`chute.cli`).

    Raises:
        ConfigError: a bad --client name, --host or --days, or an unreadable CA in DIR.
        OSError: DIR cannot be made or written.
    """
    if args.days < 1:
        raise ConfigError("--days must be at least 1")
    if args.key_type not in KEY_TYPES:
        raise ConfigError(f"--key-type must be one of {', '.join(KEY_TYPES)}")
    for name in args.client:
        if not _USER_NAME.fullmatch(name):
            raise ConfigError(
                f"--client {name!r}: a user name is 1-64 letters, digits, '.', '_', '@' or '-'"
            )
    hosts = list(dict.fromkeys([*_DEFAULT_HOSTS, *args.host]))
    directory: Path = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    written = make_files(
        directory, hosts, args.client, days=args.days, force=args.force, key_type=args.key_type
    )
    _print_summary(directory, written, args.client)
    return 0


def make_files(
    directory: Path,
    hosts: list[str],
    clients: list[str],
    *,
    days: int,
    force: bool = False,
    key_type: str = KEY_TYPES[0],
) -> list[Written]:
    """Write the CA, the broker's certificate and the clients' into ``directory``,
    keeping files that exist unless ``force``; new keys are ``key_type``'s
    (:data:`KEY_TYPES`).

    Raises:
        ConfigError: a CA in ``directory`` that cannot be read; a bad host.
    """
    out: list[Written] = []
    ca_cert_path, ca_key_path = directory / "ca.pem", directory / "ca-key.pem"
    if not force and ca_cert_path.exists() and ca_key_path.exists():
        ca_cert, ca_key = _load_ca(ca_cert_path, ca_key_path)
        out.append(Written(ca_cert_path, "the CA already there: it signs what is new", kept=True))
    else:
        new_ca_key = new_key(key_type)
        ca_key = new_ca_key
        ca_cert = _ca_certificate(new_ca_key)
        _write(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(ca_key_path, _key_pem(ca_key), private=True)
        out += [
            Written(ca_cert_path, "the CA: clients trust it (--tls-ca); tls_ca checks clients"),
            Written(ca_key_path, "the CA's private key: keep it secret"),
        ]
    broker, broker_key = directory / "broker.pem", directory / "broker-key.pem"
    if not force and broker.exists() and broker_key.exists():
        out.append(Written(broker, "the broker's certificate", kept=True))
    else:
        key = new_key(key_type)
        cert = _leaf(ca_cert, ca_key, key, hosts[0], days, server_names=hosts)
        _write(broker, cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(broker_key, _key_pem(key), private=True)
        out += [
            Written(broker, f"the broker's certificate ({', '.join(hosts)})"),
            Written(broker_key, "its private key"),
        ]
    for name in clients:
        path, key_path = client_files(directory, name)
        if not force and path.exists() and key_path.exists():
            out.append(Written(path, f"user {name}'s client certificate", kept=True))
            continue
        key = new_key(key_type)
        cert = _leaf(ca_cert, ca_key, key, name, days)
        _write(path, cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(key_path, _key_pem(key), private=True)
        out += [
            Written(path, f"a client certificate for user {name} (CN={name})"),
            Written(key_path, "its private key"),
        ]
    return out


def new_key(key_type: str) -> NewKey:
    """A new private key: ``"rsa"`` (2048 bits) or ``"ec"`` (ECDSA P-256).

    Raises:
        ConfigError: another ``key_type``.
    """
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    raise ConfigError(f"--key-type must be one of {', '.join(KEY_TYPES)}")


def client_files(directory: Path, name: str) -> tuple[Path, Path]:
    """Where user ``name``'s client certificate and key go."""
    return directory / f"client-{name}.pem", directory / f"client-{name}-key.pem"


def _load_ca(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, SigningKey]:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"cannot use the CA in {cert_path.parent} ({exc}): use --force to make a new one"
        ) from None
    if not isinstance(key, SigningKey):
        raise ConfigError(f"{key_path}: not a key chute cert can sign with (use --force)")
    return cert, key


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _ca_certificate(key: NewKey) -> x509.Certificate:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "chute"),
            x509.NameAttribute(NameOID.COMMON_NAME, "chute cert CA"),
        ]
    )
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: SigningKey,
    key: NewKey,
    common_name: str,
    days: int,
    *,
    server_names: list[str] | None = None,
) -> x509.Certificate:
    """A certificate the CA signs: a server's (for ``server_names``) or a client's."""
    now = _now()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in server_names]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256())


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    if not re.fullmatch(r"[A-Za-z0-9*]([A-Za-z0-9.*-]{0,251}[A-Za-z0-9])?", host):
        raise ConfigError(f"--host {host!r}: expected a host name or an IP address")
    return x509.DNSName(host.lower())


def _key_pem(key: NewKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``data`` to ``path`` (replacing it); a private file is its owner's alone
    from the start."""
    mode = 0o600 if private else 0o644
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    tmp.replace(path)


def _toml(path: Path) -> str:
    return json.dumps(str(path))  # a TOML basic string is JSON's, for a path


def _print_summary(directory: Path, written: list[Written], clients: list[str]) -> None:
    width = max(len(str(w.path)) for w in written)
    for item in written:
        verb = "kept " if item.kept else "wrote"
        print(f"{verb} {str(item.path).ljust(width)}  {item.what}")
    ca, broker, broker_key = (
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "broker-key.pem",
    )
    print()
    print("# in the broker's chute.toml:")
    print("[server]")
    print("tls_port = 5446            # chutes://")
    print("stomp_tls_port = 61614     # STOMP over TLS")
    print("http_tls = true            # https:// and wss:// on http_port")
    print(f"tls_cert = {_toml(broker)}")
    print(f"tls_key = {_toml(broker_key)}")
    if clients:
        print(f"tls_ca = {_toml(ca)}")
        print('tls_client_certs = "optional"   # or "required"; a certificate\'s CN is its user')
        print('http_tls_client_certs = "none"  # browsers cancel a wss:// asked for a certificate')
        print()
        print("# each client certificate's user must exist once [users] are configured:")
        for name in clients:
            print(f'# [users.{name}]\n# roles = ["admin"]')
    print()
    options = f"--url chutes://127.0.0.1:5446 --tls-ca {_shell(ca)}"
    if clients:
        cert, key = client_files(directory, clients[0])
        options += f" --tls-cert {_shell(cert)} --tls-key {_shell(key)}"
        print(f"# a client, logged in as {clients[0]} by the certificate:")
    else:
        print("# a client:")
    print(f"chute send queue:hello 'over TLS' {options}")
    print(f"chute receive queue:hello {options}")


def _shell(path: Path) -> str:
    text = str(path)
    if re.fullmatch(r"[A-Za-z0-9_./@%+=:,-]+", text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"
