"""The blocking client's TLS is used by one thread at a time, over ``wss://`` too.

The blocking client reads on one thread and writes on another, and the
``websockets`` library under ``wss://`` reads on a thread of its own. An
OpenSSL connection used by two threads at once loses a write now and then (on a
busy machine about one ``wss://`` connect in a thousand waited for its HTTP 101
until the broker's ``login_timeout_ms`` closed it, "past its TLS handshake, 0
bytes since"), too rarely for a test to catch by chance: ``python -m
bench.tls_connects --kinds chute-wss`` runs thousands. What a test can check
every time is the cause: no :class:`ssl.SSLSocket` of a connection is entered
by two threads, over ``wss://``, ``https://`` and ``chutes://`` (the library's
own socket was: its reader thread's ``recv``, the writer's ``sendall``). The
client keeps the TLS state in an :class:`ssl.SSLObject` behind a lock instead
(``https://`` has a connection per thread).
"""

from __future__ import annotations

import ssl
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

import chute

from .conftest import ChuteServer, free_port, start_server


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ChuteServer, int, int, Path]]:
    home = tmp_path_factory.mktemp("tls-threads")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(home / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(home / "b.pem"))
    (home / "chute.toml").write_text("[server]\nhttp_tls = true\n")
    native, http = free_port(), free_port()
    server = start_server(
        home,
        *("--config", str(home / "chute.toml"), "--tls-cert", str(home / "b.pem")),
        *("--tls-port", str(native), "--http-port", str(http)),
        port=free_port(),
    )
    yield server, native, http, home / "ca.pem"
    server.stop()


class ThreadsPerSocket:
    """Records which threads enter each :class:`ssl.SSLSocket`'s ``recv`` or ``sendall``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: dict[int, set[int]] = defaultdict(set)
        self._lock = threading.Lock()
        for name in ("recv", "sendall"):
            original = getattr(ssl.SSLSocket, name)

            def entered(sock: ssl.SSLSocket, *args: Any, original: Any = original) -> Any:
                with self._lock:
                    self.threads[id(sock)].add(threading.get_ident())
                return original(sock, *args)

            monkeypatch.setattr(ssl.SSLSocket, name, entered)


@pytest.mark.parametrize("scheme", ["wss", "https", "chutes"])
def test_no_tls_socket_is_used_by_two_threads(
    scheme: str,
    tls_broker: tuple[ChuteServer, int, int, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, native, http, ca = tls_broker
    port = native if scheme == "chutes" else http
    url = f"{scheme}://127.0.0.1:{port}" + ("" if scheme == "chutes" else "/chute")
    used = ThreadsPerSocket(monkeypatch)
    q = f"queue:tls-threads.{uuid.uuid4().hex[:8]}"
    with chute.connect(url, tls_ca=str(ca)) as conn, conn.session() as session:
        consumer = session.consumer(q)
        for n in range(50):  # the writer sends while the reader reads
            session.send(q, f"m{n}")
        got = [consumer.receive(timeout=10.0) for _ in range(50)]
    assert [m.text if m else None for m in got] == [f"m{n}" for n in range(50)]
    shared = {sock: threads for sock, threads in used.threads.items() if len(threads) > 1}
    assert not shared, f"an SSL socket entered by {len(next(iter(shared.values())))} threads"
