"""TLS for the blocking client: ``chutes://`` URLs.

The blocking client reads on one thread and writes on another. An OpenSSL
connection must not be used by two threads at once, and a lock around a
blocking ``SSLSocket.recv`` would stall every write behind it. So the TLS
state is an :class:`ssl.SSLObject` over memory BIOs: the crypto runs under a
short lock, and the socket calls (which block) run outside it.

The broker side is asyncio's own TLS (``create_server(ssl=...)``), so nothing
here is on the broker's path.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Final

from chute.errors import ConnectError

_CHUNK: Final = 1 << 16


def client_context(ca_file: str | None = None, *, verify: bool = True) -> ssl.SSLContext:
    """A client context: the system's trust store, or ``ca_file``; ``verify=False`` only
    for testing (no certificate or host name check).

    Raises:
        ConnectError: ``ca_file`` cannot be read.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectError(f"cannot load the CA file {ca_file!r}: {exc}") from None
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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
                        "the broker closed the connection during the TLS handshake"
                    ) from None
                self._incoming.write(data)
                continue
            except ssl.SSLError as exc:
                raise ConnectError(f"TLS handshake failed: {exc.reason or exc}") from None
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
                    return self._tls.read(size)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""
                except ssl.SSLError as exc:
                    raise OSError(f"TLS error: {exc.reason or exc}") from None
                reply = self._outgoing.read()  # e.g. a TLS 1.3 key update's answer
            if reply:
                self._sock.sendall(reply)
            data = self._sock.recv(_CHUNK)
            if not data:
                return b""
            with self._lock:
                self._incoming.write(data)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()
