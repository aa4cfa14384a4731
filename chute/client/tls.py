"""TLS for the blocking client: ``chutes://`` and ``wss://`` URLs.

The blocking client reads on one thread and writes on another. An OpenSSL
connection must not be used by two threads at once, and a lock around a
blocking ``SSLSocket.recv`` would stall every write behind it. So the TLS
state is an :class:`ssl.SSLObject` over memory BIOs: the crypto runs under a
short lock, and the socket calls (which block) run outside it.

The ``websockets`` library reads on a thread of its own too, so ``wss://``
goes through the same code (:class:`SelectableTlsSocket`). Over an
:class:`ssl.SSLSocket` shared by two threads, a TLS 1.3 session ticket that
the reading thread processes while the other writes now and then loses or
corrupts the write: the WebSocket's upgrade request never reaches the broker
(which closes the connection at its ``login_timeout_ms``, "past its TLS
handshake, 0 bytes since") or reaches it as a record that fails to decrypt.

The broker side is asyncio's own TLS (:mod:`chute.server.tls`), so nothing
here is on the broker's path.

A client certificate (``tls_cert``, ``tls_key``) lets a broker that asks for
one (``tls_client_certs``) log the client in as the user its commonName names.
A broker that refuses the certificate (or its absence) usually just closes the
connection, at the handshake or, with TLS 1.3, right after it; so a ``chutes://``
connection closed before the broker answered says what the likely causes are
(:func:`unanswered`), and the broker's log says which one it was.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from typing import Final

from chute.errors import ConnectError

_CHUNK: Final = 1 << 16


def client_context(
    ca_file: str | None = None,
    *,
    verify: bool = True,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """A client context: the system's trust store, or ``ca_file``; ``verify=False`` only
    for testing (no certificate or host name check). ``cert_file`` (and ``key_file``,
    unless the key is in it) is the client's own certificate, for a broker that asks.

    Raises:
        ConnectError: a file cannot be read, or a key without a certificate.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectError(f"cannot load the CA file {ca_file!r}: {exc}") from None
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if key_file and not cert_file:
        raise ConnectError("a TLS client key without its certificate: give tls_cert too")
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(
                f"cannot load the client certificate {cert_file!r}"
                f"{f' / key {key_file!r}' if key_file else ''}: {exc}"
            ) from None
    return context


_OUT_OF_VALIDITY: Final = frozenset({9, 10})  # X509_V_ERR_CERT_NOT_YET_VALID, _HAS_EXPIRED


def describe(exc: ssl.SSLError, plain: str = "chute://") -> str:
    """A failed handshake or TLS read, as the person connecting can act on it (``plain``:
    the URL scheme of the same port without TLS)."""
    reason = exc.reason or str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        if getattr(exc, "verify_code", None) in _OUT_OF_VALIDITY:
            return (
                f"the broker's certificate is out of its validity ({exc.verify_message}): "
                "its operator must renew server.tls_cert (or a clock is wrong)"
            )
        return (
            f"the broker's certificate did not verify ({exc.verify_message or reason}): "
            "give the CA that signed it (tls_ca, --tls-ca)"
        )
    if reason in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
        return f"the broker did not answer in TLS ({reason}): a plain port? then use {plain}"
    if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        return f"the broker requires a client certificate ({reason}): give tls_cert, --tls-cert"
    if "CERTIFICATE_EXPIRED" in reason:
        return f"the broker refused the client certificate ({reason}): it has expired, renew it"
    if "ALERT" in reason:
        return f"the broker refused the TLS connection ({reason}): check the client certificate"
    return f"TLS error: {reason}"


def unanswered(tls: bool, error: ConnectError) -> ConnectError:
    """``error``, the connection failing before the broker answered the Connect, with
    what usually causes that. A refusal the broker did answer with (a subclass, such
    as :class:`~chute.errors.ClientIdInUse`) is returned as it is."""
    if type(error) is not ConnectError:
        return error
    if tls:
        hint = (
            "the broker closed the TLS connection before answering: it may want a client "
            "certificate signed by its CA (tls_cert, --tls-cert), or the port may be plain "
            "TCP (chute://); the broker's log says which"
        )
    else:
        hint = "no answer from the broker: if the port speaks TLS, use chutes://"
    return ConnectError(f"{error.reason} ({hint})")


class TlsSocket:
    """Enough of a socket for the blocking client (``recv``, ``sendall``, ``shutdown``,
    ``close``), speaking TLS over a connected plain socket. Thread-safe for one reader
    and one writer."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self._lock = threading.Lock()
        self._handshake()

    def _handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._send_pending()
                data = self._sock.recv(_CHUNK)
                if not data:
                    raise ConnectError(
                        "the broker closed the connection during the TLS handshake "
                        "(a plain port? then use chute://; or it refused the client "
                        "certificate: the broker's log says)"
                    ) from None
                self._incoming.write(data)
                continue
            except ssl.SSLError as exc:
                with contextlib.suppress(OSError):
                    self._send_pending()  # the alert: the broker's log then says why
                raise ConnectError(f"TLS handshake failed: {describe(exc)}") from None
            self._send_pending()
            return

    def _send_pending(self) -> None:
        data = self._outgoing.read()
        if data:
            self._sock.sendall(data)

    def sendall(self, data: bytes) -> None:
        with self._lock:
            self._tls.write(data)
            out = self._outgoing.read()
        self._sock.sendall(out)

    def recv(self, size: int) -> bytes:
        """Decrypted bytes (b"" once the broker closed the connection)."""
        while True:
            with self._lock:
                try:
                    return self._read(size)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""
                except ssl.SSLError as exc:
                    raise OSError(describe(exc)) from None
                reply = self._outgoing.read()  # e.g. a TLS 1.3 key update's answer
            if reply:
                self._sock.sendall(reply)
            data = self._sock.recv(_CHUNK)
            if not data:
                return b""
            with self._lock:
                self._incoming.write(data)

    def _read(self, size: int) -> bytes:
        """What one record holds (under the lock); SSLWantReadError when none is whole."""
        return self._tls.read(size)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()


class SelectableTlsSocket(TlsSocket):
    """A :class:`TlsSocket` for a reader that waits with ``select`` on the socket
    before each ``recv`` (the ``websockets`` library's): ``recv`` returns every
    record already received, whatever ``size`` (a record left in the TLS buffer
    would wait for the next bytes on the socket, which may never come, and so
    would the broker's close_notify); the
    socket's other methods (``fileno``, ``settimeout``, ``getpeername``, ...)
    are the plain socket's. ``close`` shuts the socket down first, so that a
    thread blocked in ``recv`` returns."""

    def _read(self, size: int) -> bytes:
        chunks = [self._tls.read(_CHUNK)]  # SSLWantReadError: nothing whole yet
        with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            while chunks[-1]:
                chunks.append(self._tls.read(_CHUNK))
        if len(chunks) > 1 and not chunks[-1]:
            # the broker's close_notify came with the data and is read already: the
            # next recv returns b"" at once, and shutting reading down wakes the select
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RD)
        return b"".join(chunks)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)
