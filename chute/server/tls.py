"""TLS on the broker's listeners: the server contexts, what a failed handshake means,
and the user a client certificate names.

Contexts. The native protocol's ``tls_port`` and STOMP's ``stomp_tls_port``
share the context :func:`server_contexts` builds once from ``tls_cert``,
``tls_key``, ``tls_ca`` and ``tls_client_certs``: TLS 1.2 or later, and, unless
client certificates are ``"none"``, a request for the client's certificate,
verified against ``tls_ca`` alone (never the system's store: any certificate
that CA signs names a user). HTTPS and WSS on ``http_port`` (``http_tls``) use
the same, unless ``http_tls_client_certs`` gives the HTTP port its own client
certificate mode: a browser cancels a WebSocket whose handshake asks for a
certificate (only a page load may ask the user for one), so a port that
browsers use must not ask. A certificate expired or not valid yet is a warning
at start, and the reason given for each handshake it makes clients refuse
(:meth:`ServerContext.certificate_trouble`).

Failures told. The handshakes themselves run in each connection's front
(:mod:`chute.server.accept`); :func:`handshake_failure` says what a failure
means in its one log line: plain text, an outdated TLS version (named from the
ClientHello's first bytes, :func:`hello_version`), no certificate, a
certificate the CA did not sign or out of its validity, a client that
distrusts the broker's certificate (or the broker's certificate expired).

Client certificates. With ``tls_client_certs = "optional"`` a client may send
no certificate; with ``"required"`` it must. A certificate that does not chain
to ``tls_ca`` fails the handshake either way. :func:`certificate_user` names
the user of a verified certificate, its subject's commonName; what that user
may do is the core's business (:mod:`chute.core.rules.access`).

Lives on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cryptography import x509

from chute.config import ServerConfig

log = logging.getLogger("chute.server")

ProtocolFactory = Callable[[], asyncio.BaseProtocol]

CLIENT_CERTS: Final = ("none", "optional", "required")
"""``tls_client_certs``: whether a client is asked for a certificate, and must send one."""
HANDSHAKE_TIMEOUT: Final = 15.0
"""Seconds a client has to complete its TLS handshake."""

_VERIFY_MODES: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
TLS_RECORD: Final = 0x16  # a TLS record of type handshake: how a ClientHello begins
_PLAIN_TEXT_REASONS: Final = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
        "UNKNOWN_PROTOCOL",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
        "UNEXPECTED_RECORD",
    }
)
_OUTDATED_REASONS: Final = frozenset({"UNSUPPORTED_PROTOCOL", "WRONG_SSL_VERSION"})
"""What OpenSSL says of a hello offering nothing newer than TLS 1.1 (or SSL)."""
_VERSIONS: Final = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1"}
_EXPIRED_CODES: Final = frozenset({9, 10})  # X509_V_ERR_CERT_NOT_YET_VALID, _HAS_EXPIRED


class ServerContext(ssl.SSLContext):
    """The server's TLS context, knowing when its certificate is valid (to say so)."""

    cert_path = ""
    not_before: datetime.datetime | None = None
    not_after: datetime.datetime | None = None

    def certificate_trouble(self, now: datetime.datetime | None = None) -> str | None:
        """Why clients refuse ``tls_cert`` now (expired, not valid yet), or None."""
        now = now or datetime.datetime.now(datetime.UTC)
        if self.not_after is not None and now > self.not_after:
            return (
                f"server.tls_cert {self.cert_path!r} expired on {self.not_after:%Y-%m-%d %H:%M} UTC"
            )
        if self.not_before is not None and now < self.not_before:
            return (
                f"server.tls_cert {self.cert_path!r} is not valid before "
                f"{self.not_before:%Y-%m-%d %H:%M} UTC (this machine's clock says "
                f"{now:%Y-%m-%d %H:%M})"
            )
        return None


def hello_version(hello: bytes) -> str | None:
    """The newest version a ClientHello's first bytes offer, if older than TLS 1.2 (a
    TLS 1.2 or 1.3 hello says 3.3 here; 1.3 adds its extension): "TLS 1.0", "TLS 1.1",
    "SSL 3.0"; None for any other bytes."""
    # a record (type 22, version, length), then the handshake (type 1, length, version)
    if len(hello) < 11 or hello[0] != TLS_RECORD or hello[5] != 1:
        return None
    return _VERSIONS.get(int.from_bytes(hello[9:11], "big"))


def server_context(
    cert: str, key: str = "", *, ca: str = "", client_certs: str = "none", told: bool = False
) -> ServerContext:
    """A context for TLS listeners (TLS 1.2 or later).

    ``client_certs`` is ``"none"`` (no client certificate asked for), ``"optional"`` or
    ``"required"``; the last two verify a client's certificate against ``ca`` only.
    A certificate expired or not valid yet is a warning, logged here unless ``told``
    already (the broker starts: clients refuse it, and the handshake failures say why).

    Raises:
        OSError: the certificate, key or CA cannot be loaded (with the file names).
        ValueError: an unknown ``client_certs``, or one that needs a ``ca`` without it.
    """
    mode = _VERIFY_MODES.get(client_certs)
    if mode is None:
        raise ValueError(f"client_certs must be one of {', '.join(CLIENT_CERTS)}")
    if mode != ssl.CERT_NONE and not ca:
        raise ValueError(f"client_certs = {client_certs!r} needs the CA that signs them")
    context = ServerContext(ssl.PROTOCOL_TLS_SERVER)  # no system CAs: tls_ca alone is trusted
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"cannot load the TLS certificate {cert!r} / key {key!r}: {exc}") from None
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"cannot load the client CA file {ca!r}: {exc}") from None
    context.verify_mode = mode
    context.cert_path = cert
    context.not_before, context.not_after = _validity(cert)
    trouble = context.certificate_trouble()
    if told:
        return context
    if trouble is not None:
        log.warning(
            "%s: TLS clients will refuse the handshake until it is replaced (or the clock "
            "is right)",
            trouble,
        )
    for problem in _ca_troubles(ca):
        log.warning("%s", problem)
    return context


def server_contexts(config: ServerConfig) -> tuple[ServerContext, ServerContext]:
    """The contexts of the TCP listeners (native, STOMP) and of the HTTP port, which
    differ when ``http_tls_client_certs`` gives the HTTP port its own client
    certificate mode (a browser cancels a WebSocket asked for a certificate).

    Raises:
        OSError, ValueError: as :func:`server_context`.
    """
    cert, key, ca = config.tls.cert, config.tls.key, config.tls.ca
    tcp = https = server_context(cert, key, ca=ca, client_certs=config.tls.client_certs)
    if config.http_client_certs != config.tls.client_certs:
        https = server_context(cert, key, ca=ca, client_certs=config.http_client_certs, told=True)
    if config.http.tls and config.listen.http_port and config.http_client_certs != "none":
        log.info(
            "https asks clients for a certificate (%s): browsers cancel a wss:// WebSocket "
            'asked for one; set server.http_tls_client_certs = "none" if browsers connect',
            config.http_client_certs,
        )
    return tcp, https


def _validity(path: str) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """When the first certificate in ``path`` (the leaf) is valid: (not before, not after)."""
    try:
        [leaf, *_] = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError):
        return None, None  # loaded by OpenSSL all the same: a form this does not read
    return leaf.not_valid_before_utc, leaf.not_valid_after_utc


def _ca_troubles(path: str) -> list[str]:
    """A warning for each CA certificate in ``path`` outside its validity: every client
    certificate it signed then fails to verify."""
    if not path:
        return []
    try:
        certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError):
        return []
    now = datetime.datetime.now(datetime.UTC)
    troubles = []
    for cert in certs:
        subject = cert.subject.rfc4514_string()
        if now > cert.not_valid_after_utc:
            troubles.append(
                f"server.tls_ca {path!r}: the CA {subject} expired on "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: no client certificate it "
                "signed verifies"
            )
        elif now < cert.not_valid_before_utc:
            troubles.append(
                f"server.tls_ca {path!r}: the CA {subject} is not valid before "
                f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC: no client certificate it "
                "signed verifies (check the clocks)"
            )
    return troubles


def certificate_user(transport: asyncio.BaseTransport) -> str | None:
    """The user a TLS client's verified certificate names: its subject's commonName.

    None over plain TCP, without a certificate, or when the subject has no single
    commonName (several are ambiguous: none of them is believed).
    """
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()  # only a certificate the handshake verified
    if not cert:
        return None
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    if len(names) != 1:
        if names:
            log.warning("client certificate with several commonNames %s: no user taken", names)
        return None
    return str(names[0])


def handshake_failure(exc: BaseException, *, hello: bytes = b"", trouble: str | None = None) -> str:
    """What a failed server-side handshake means, for the one log line it gets.

    ``hello``: the client's first bytes (its ClientHello), to name an outdated
    version it offered; ``trouble``: why clients refuse the broker's certificate
    now (:meth:`ServerContext.certificate_trouble`), if they do.
    """
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or type(exc).__name__
        version = hello_version(hello)
        if version is None and reason in _OUTDATED_REASONS and _looks_like_tls(hello):
            version = "only a version older than TLS 1.2"
        if version is not None:
            return (
                f"it offered {version}, an outdated TLS version, refused ({reason}): the "
                "broker accepts TLS 1.2 and 1.3 only; update the client or its TLS settings"
            )
        if reason in _PLAIN_TEXT_REASONS or reason in _OUTDATED_REASONS:
            return f"it sent plain text, not TLS ({reason}): the client must connect with TLS"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return (
                "it sent no client certificate, and server.tls_client_certs = "
                f'"required" ({reason})'
            )
        if isinstance(exc, ssl.SSLCertVerificationError):
            detail = exc.verify_message or reason
            if getattr(exc, "verify_code", None) in _EXPIRED_CODES:
                return f"its client certificate is out of its validity ({detail}): renew it"
            return f"its client certificate did not verify against server.tls_ca ({detail})"
        if "ALERT" in reason:
            if trouble is not None:
                return f"the client refused the handshake ({reason}): {trouble}"
            if "CERTIFICATE_EXPIRED" in reason:
                return (
                    f"the client refused the handshake ({reason}): it says server.tls_cert "
                    "has expired, which it has not by this machine's clock: check the clocks"
                )
            return f"the client refused the handshake ({reason}): does it trust server.tls_cert?"
        return f"{reason}"
    if isinstance(exc, TimeoutError | ConnectionAbortedError):
        return f"no TLS handshake within {HANDSHAKE_TIMEOUT:g} s"
    if isinstance(exc, ConnectionError):
        if trouble is not None:
            return f"the client closed the connection during the handshake: {trouble}"
        return "the client closed the connection during the handshake"
    return str(exc) or type(exc).__name__


def _looks_like_tls(hello: bytes) -> bool:
    """Whether a client's first bytes may be a ClientHello (a TLS record, or SSL 2's
    form, whose first byte has its high bit set); unknown (b"") counts as TLS."""
    return not hello or hello[0] == TLS_RECORD or bool(hello[0] & 0x80)
