"""How a listener accepts (``chute.server.listener``, ``chute.server.accept``), in-process,
on asyncio's loop and uvloop's.

The broker runs uvloop, which starts reading a connection as soon as its
protocol's ``connection_made`` returns: the ClientHello may arrive before the
handshake task took the transport. These tests run a tiny echo protocol behind
the broker's :class:`Listener` and :class:`Accepting` on real sockets with each
loop and check what a client sees, what is logged, and that every connection's
ticket is released once it is gone.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trustme
import uvloop

from chute.config import LimitSettings
from chute.server.accept import Accepting, Front, TlsAccept
from chute.server.limits import ConnectionLimits
from chute.server.listener import Listener, bind
from chute.server.tls import server_context

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


class Echo(asyncio.Protocol):
    """Answers every chunk in upper case; remembers what it was told."""

    made: ClassVar[list[Echo]] = []

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.received += data
        assert self.transport is not None
        self.transport.write(data.upper())


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def contexts(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pki")
    broker = tmp / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(broker))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return {"server": server_context(str(broker)), "client": client, "dir": Path(tmp)}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        loop = LOOPS[request.param]()
        try:
            return loop.run_until_complete(asyncio.wait_for(coro, 10))
        finally:
            loop.close()

    Echo.made.clear()
    return runner


async def _listen(front: Front) -> tuple[Listener, int]:
    listener = Listener("test", bind("127.0.0.1", 0), front, ConnectionLimits(LimitSettings()))
    listener.start()
    return listener, listener.sockets[0].getsockname()[1]


async def _all_released(admission: ConnectionLimits) -> None:
    """Wait until no connection is counted (each ticket released as its connection went)."""
    deadline = asyncio.get_running_loop().time() + 5
    while admission.open:
        assert asyncio.get_running_loop().time() < deadline, admission.stats()
        await asyncio.sleep(0.01)
    assert admission.before_login == 0
    assert not admission.by_listener


def test_a_tls_client_is_handed_to_the_protocol_with_nothing_lost(
    run: Callable[[Coroutine[Any, Any, Any]], Any], contexts: dict[str, Any]
) -> None:
    async def main() -> list[bytes]:
        accepting = Accepting()
        server, port = await _listen(accepting.tls("test", Echo, contexts["server"]))
        answers = []
        for word in (b"hello", b"again"):  # the second: the listener goes on
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=contexts["client"]
            )
            writer.write(word)  # at once: may arrive with the handshake's end
            answers.append(await reader.readexactly(len(word)))
            assert server.limits.open == 1
            writer.close()
        assert not accepting.pending
        await _all_released(server.limits)
        server.close()
        return answers

    assert run(main()) == [b"HELLO", b"AGAIN"]
    assert all(e.transport is not None for e in Echo.made)
    assert Echo.made[0].transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]


def test_plain_text_to_a_tls_listener_is_one_log_line(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    contexts: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> bytes:
        accepting = Accepting()
        server, port = await _listen(accepting.tls("test-tls", Echo, contexts["server"]))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"CONNECT\naccept-version:1.2\n\n\x00")
        answer = await reader.read()  # the broker closes
        writer.close()
        await _all_released(server.limits)
        server.close()
        return answer

    with caplog.at_level(logging.INFO, logger="chute.server"):
        assert run(main()) == b""
    [record] = [r for r in caplog.records if r.name == "chute.server"]
    assert record.getMessage().startswith("test-tls: TLS handshake with 127.0.0.1:")
    assert "plain text, not TLS" in record.getMessage()
    assert record.exc_info is None
    assert not Echo.made


def test_a_plain_listener_refuses_tls_and_passes_anything_else_on(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    contexts: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> bytes:
        server, port = await _listen(Accepting.plain("test", Echo))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection("127.0.0.1", port, ssl=contexts["client"])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16")  # one byte that could begin a TLS record: it waits for the next
        writer.write(b"plain")
        answer = await reader.readexactly(6)
        writer.close()
        await _all_released(server.limits)
        server.close()
        return answer

    with caplog.at_level(logging.WARNING, logger="chute.server"):
        assert run(main()) == b"\x16PLAIN"
    [record] = [r for r in caplog.records if r.name == "chute.server"]
    assert "began a TLS handshake on this plain port" in record.getMessage()
    assert len(Echo.made) == 2  # made as each connection was accepted, before a word


def test_closing_ends_a_handshake_that_never_came(
    run: Callable[[Coroutine[Any, Any, Any]], Any], contexts: dict[str, Any]
) -> None:
    async def main() -> bytes:
        accepting = Accepting()
        accepted = asyncio.Event()

        class Watched(TlsAccept):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                accepted.set()

        server, port = await _listen(
            lambda ticket: Watched(accepting, "test", Echo, contexts["server"], ticket)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # says nothing
        await accepted.wait()
        assert accepting.pending
        accepting.close()
        answer = await reader.read()
        writer.close()
        server.close()
        return answer

    assert run(main()) == b""


def _outdated_client(version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that offers ``version`` only (OpenSSL sends such hellos at level 0)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("DEFAULT@SECLEVEL=0")
    with warnings.catch_warnings():  # the versions are deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = context.maximum_version = version
    return context


@pytest.mark.parametrize(
    ("version", "name"), [("TLSv1", "TLS 1.0"), ("TLSv1_1", "TLS 1.1")], ids=["1.0", "1.1"]
)
def test_an_outdated_tls_hello_is_logged_as_such_not_as_plain_text(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    contexts: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    version: str,
    name: str,
) -> None:
    client = _outdated_client(getattr(ssl.TLSVersion, version))

    async def main() -> None:
        accepting = Accepting()
        server, port = await _listen(accepting.tls("test-tls", Echo, contexts["server"]))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection("127.0.0.1", port, ssl=client)
        await _all_released(server.limits)
        server.close()

    with caplog.at_level(logging.INFO, logger="chute.server"):
        run(main())
    [record] = [r for r in caplog.records if r.name == "chute.server"]
    message = record.getMessage()
    assert f"it offered {name}, an outdated TLS version, refused" in message, message
    assert "TLS 1.2 and 1.3 only" in message
    assert "plain text" not in message
    assert not Echo.made


def test_a_client_that_never_begins_its_handshake_is_closed_and_told_once(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
    contexts: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("chute.server.tls.HANDSHAKE_TIMEOUT", 0.2)

    async def main() -> bytes:
        accepting = Accepting()
        server, port = await _listen(accepting.tls("test-tls", Echo, contexts["server"]))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # says nothing
        answer = await reader.read()  # the broker closes
        writer.close()
        await _all_released(server.limits)
        assert not accepting.pending
        server.close()
        return answer

    with caplog.at_level(logging.INFO, logger="chute.server"):
        assert run(main()) == b""
    [record] = [r for r in caplog.records if r.name == "chute.server"]
    assert "no TLS handshake within 0.2 s" in record.getMessage()
