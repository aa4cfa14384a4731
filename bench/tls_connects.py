"""Thousands of TLS logins under a CPU burner: none may be lost; prints JSON.

One ``chute serve`` with its native TLS, STOMP TLS and HTTPS/WSS ports (users
with passwords, client certificates ``optional``), and besides it ``--burners``
processes spinning on the CPU. ``--threads`` client threads connect, log in and
disconnect ``--count`` times in all, round robin over:

* ``tls``: chute's blocking client, ``chutes://`` with a password;
* ``stomp-tls``: stomp.py over TLS, a password or a client certificate;
* ``wss``: stomp.py's ``WSStompConnection`` (websocket-client) over ``wss://``;
* ``chute-wss``, ``chute-https``: chute's blocking client over ``wss://`` and
  ``https://`` (the HTTP port);
* ``aio-tls``, ``aio-wss``, ``aio-https``: chute's asyncio client over
  ``chutes://``, ``wss://`` and ``https://``.

``--kinds`` picks some of them (all by default).

stomp.py reads on its own thread while the caller's thread writes, over one SSL
object, which OpenSSL does not allow: now and then a WSS connection then reads a
spurious end of stream right after its CONNECT and stomp.py gives up
(``ConnectFailedException`` within a second; the broker logs nothing). So by
default this bench keeps each stomp.py connection's SSL reads and writes apart
(:func:`serialize_stomp_ssl`); ``--stock-stomp`` runs stomp.py as it comes.

A login that fails is lost. The JSON gives, per kind, the logins, the lost ones
(with their errors) and the login time's p50/p99 (the client threads' own
contention included), what stomp.py warned of, and the broker's warnings, its
failed handshakes and its log lines about connections closed by
``login_timeout_ms``.

    python -m bench.tls_connects                     # 3,000 logins, 2 burners
    python -m bench.tls_connects --count 6000 --burners 3 --threads 16
    python -m bench.tls_connects --stock-stomp     # stomp.py's own race included
    python -m bench.tls_connects --kinds chute-wss --count 3000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import logging
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stomp
from stomp.adapter.ws import WSTransport
from stomp.transport import Transport

import chute
import chute.aio
from bench.broker import free_port
from chute.cli.cert import client_files, make_files

KINDS = ("tls", "stomp-tls", "wss", "chute-wss", "chute-https", "aio-tls", "aio-wss", "aio-https")
LOGIN_TIMEOUT_S = 10.0
USERS = (
    '[users.bob]\npassword = "pw"\nroles = ["all"]\n'
    '[users.alice]\nroles = ["all"]\n'
    '[roles.all]\nsend = ["*"]\nconsume = ["*"]\ncreate = ["*"]\n'
)


class Broker:
    """``chute serve`` with every TLS listener; its output is kept."""

    def __init__(self, tmp: Path, pki: Path) -> None:
        self.tls, self.stomp_tls, self.http = free_port(), free_port(), free_port()
        config = tmp / "chute.toml"
        config.write_text(
            f'[server]\ntls_ca = "{pki / "ca.pem"}"\ntls_client_certs = "optional"\n'
            f"login_timeout_ms = {int(LOGIN_TIMEOUT_S * 1000)}\n{USERS}"
        )
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "chute.cli", "serve", "--config", str(config)),
                *("--data-dir", str(tmp / "data"), "--store", "memory", "--port", "0"),
                *("--stomp-port", "0", "--http-port", str(self.http), "--http-tls"),
                *("--tls-port", str(self.tls), "--stomp-tls-port", str(self.stomp_tls)),
                *("--tls-cert", str(pki / "broker.pem"), "--tls-key", str(pki / "broker-key.pem")),
                *("--log-level", "info"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("chute listening"):
                break
        else:
            raise RuntimeError("chute serve did not start:\n" + "".join(self.lines))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._reader.join(5)


class Login:
    """One kind of client's login and logout, for a broker and the PKI."""

    def __init__(self, broker: Broker, pki: Path) -> None:
        self.broker = broker
        self.ca = str(pki / "ca.pem")
        cert, key = client_files(pki, "alice")
        self.cert, self.key = str(cert), str(key)

    def url(self, scheme: str) -> str:
        if scheme == "chutes":
            return f"chutes://127.0.0.1:{self.broker.tls}"
        return f"{scheme}://127.0.0.1:{self.broker.http}/chute"

    def credentials(self, n: int) -> dict[str, Any]:
        """A password, or (every other time) the client certificate, which logs alice in."""
        if n % 2:
            return {"tls_cert": self.cert, "tls_key": self.key}
        return {"login": "bob", "passcode": "pw"}

    def chute(self, scheme: str, n: int) -> None:
        """chute's blocking client."""
        url = self.url(scheme)
        with chute.connect(url, tls_ca=self.ca, **self.credentials(n)) as conn:
            conn.session().close()

    def aio(self, scheme: str, n: int) -> None:
        """chute's asyncio client, on a loop of its own."""

        async def once() -> None:
            url = self.url(scheme)
            async with chute.aio.connect(url, tls_ca=self.ca, **self.credentials(n)) as conn:
                await conn.session().close()

        asyncio.run(once())

    def tls(self, n: int) -> None:
        self.chute("chutes", n)

    def _stomp(self, conn: stomp.Connection12, n: int) -> None:
        if n % 2:  # the client certificate logs alice in
            conn.connect(wait=True)
        else:
            conn.connect(wait=True, username="bob", passcode="pw")
        conn.disconnect()

    def stomp_tls(self, n: int) -> None:
        host = ("127.0.0.1", self.broker.stomp_tls)
        conn = stomp.Connection12([host], reconnect_attempts_max=1, timeout=LOGIN_TIMEOUT_S * 2)
        if n % 2:
            conn.set_ssl(for_hosts=[host], ca_certs=self.ca, cert_file=self.cert, key_file=self.key)
        else:
            conn.set_ssl(for_hosts=[host], ca_certs=self.ca)
        self._stomp(conn, n)

    def wss(self, n: int) -> None:
        host = ("127.0.0.1", self.broker.http)
        conn = stomp.WSStompConnection(
            [host],
            ws_path="/stomp",
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            reconnect_attempts_max=1,
            timeout=LOGIN_TIMEOUT_S * 2,
        )
        conn.set_ssl(for_hosts=[host], ca_certs=self.ca)
        if n % 2:  # websocket-client names a client certificate certfile/keyfile
            conn.transport.get_ssl(host).update(certfile=self.cert, keyfile=self.key)
        self._stomp(conn, n)


class ClientLog(logging.Handler):
    """Counts what stomp.py warns of (a reconnect's cause, say)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.getMessage()[:200]] += 1


def serialize_stomp_ssl() -> None:
    """Make each stomp.py connection use its SSL socket from one thread at a time: its
    reader thread waits for input outside the lock, then reads under it; a send takes
    the lock too."""
    for cls in (Transport, WSTransport):
        send, receive = cls.send, cls.receive

        def locked_send(self: Any, frame: bytes, send: Any = send) -> None:
            with _ssl_lock(self):
                send(self, frame)

        def locked_receive(self: Any, receive: Any = receive) -> Any:
            if isinstance(self, WSTransport):  # a blocking read: wait for input unlocked
                while self.running and self.socket is not None:
                    sock = self.socket.sock
                    if sock is None or sock.pending() or select.select([sock], [], [], 0.1)[0]:
                        break
            with _ssl_lock(self):
                return receive(self)

        cls.send = locked_send
        cls.receive = locked_receive


def _ssl_lock(transport: Any) -> threading.Lock:
    lock: threading.Lock | None = transport.__dict__.get("_bench_ssl_lock")
    if lock is None:
        lock = transport.__dict__.setdefault("_bench_ssl_lock", threading.Lock())
    return lock


def burn(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that spin on the CPU until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run(
    count: int,
    threads: int,
    burners: int,
    *,
    stock: bool = False,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, Any]:
    if not stock:
        serialize_stomp_ssl()
    with tempfile.TemporaryDirectory(prefix="chute-bench-tls-") as tmp_name:
        tmp = Path(tmp_name)
        pki = tmp / "pki"
        pki.mkdir()
        make_files(pki, ["localhost", "127.0.0.1"], ["alice"], days=1)
        broker = Broker(tmp, pki)
        login = Login(broker, pki)
        calls: dict[str, Callable[[int], None]] = {
            "tls": login.tls,
            "stomp-tls": login.stomp_tls,
            "wss": login.wss,
            "chute-wss": functools.partial(login.chute, "wss"),
            "chute-https": functools.partial(login.chute, "https"),
            "aio-tls": functools.partial(login.aio, "chutes"),
            "aio-wss": functools.partial(login.aio, "wss"),
            "aio-https": functools.partial(login.aio, "https"),
        }
        numbers = itertools.count()
        lock = threading.Lock()
        times: dict[str, list[float]] = defaultdict(list)
        lost: dict[str, Counter[str]] = defaultdict(Counter)

        def work() -> None:
            while True:
                with lock:
                    n = next(numbers)
                if n >= count:
                    return
                kind = kinds[n % len(kinds)]
                began = time.monotonic()
                try:
                    calls[kind](n // len(kinds))
                except Exception as exc:  # noqa: BLE001 - every failure is a lost login
                    took = time.monotonic() - began
                    with lock:
                        lost[kind][f"{type(exc).__name__}: {exc} after {took:.1f} s"[:200]] += 1
                    continue
                took = time.monotonic() - began
                with lock:
                    times[kind].append(took)

        said = ClientLog()
        logging.getLogger("stomp.py").addHandler(said)
        spinning = burn(burners)
        began = time.monotonic()
        try:
            workers = [threading.Thread(target=work) for _ in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        finally:
            for proc in spinning:
                proc.kill()
                proc.wait()
            elapsed = time.monotonic() - began
            broker.stop()
        deadline_lines = [line.strip() for line in broker.lines if "login_timeout_ms" in line]
        warnings = [
            line.strip()
            for line in broker.lines
            if " WARNING " in line or " ERROR " in line or "handshake" in line
        ]
        result: dict[str, Any] = {
            "count": count,
            "threads": threads,
            "burners": burners,
            "stomp_ssl_serialized": not stock,
            "kinds": list(kinds),
            "seconds": round(elapsed, 1),
            "lost": sum(sum(c.values()) for c in lost.values()),
            "client_warnings": dict(said.counts.most_common(10)),
            "login_deadline_log_lines": deadline_lines[:10],
            "broker_warnings": warnings[:10],
        }
        for kind in kinds:
            took = sorted(times[kind])
            result[kind] = {
                "logins": len(took),
                "lost": sum(lost[kind].values()),
                "errors": dict(lost[kind].most_common(5)),
                "p50_ms": round(statistics.median(took) * 1000, 1) if took else None,
                "p99_ms": round(took[int(len(took) * 0.99)] * 1000, 1) if took else None,
            }
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=3000, help="logins in all")
    parser.add_argument("--threads", type=int, default=12, help="client threads")
    parser.add_argument("--burners", type=int, default=2, help="processes spinning on the CPU")
    parser.add_argument(
        "--stock-stomp", action="store_true", help="stomp.py as it comes (its SSL race too)"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated, round robin (default: all of {','.join(KINDS)})",
    )
    args = parser.parse_args()
    kinds = tuple(kind for kind in args.kinds.split(",") if kind)
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds: a comma-separated choice of {', '.join(KINDS)}")
    with contextlib.suppress(KeyboardInterrupt):
        result = run(args.count, args.threads, args.burners, stock=args.stock_stomp, kinds=kinds)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
