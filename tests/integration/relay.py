"""A TCP relay between two nodes whose forwarding can be frozen: a cut link, for tests.

:class:`Relay` listens on a loopback port and passes bytes both ways between each
connection made to it and a new connection to ``target``. :meth:`Relay.freeze` stops
it passing anything (nothing is read, nothing written, no connection is closed, new
connections wait in the listener's backlog): to both ends the network went silent, as
when a cable is pulled or a firewall starts dropping packets. :meth:`Relay.thaw` lets
the bytes through again (what waited in the kernel's buffers goes on, as TCP would
deliver it once the network is back).

``delay`` (seconds, 0 by default) holds every chunk read that long before it is
written on: a slow link (a long, thin pipe) rather than a cut one. Chunks keep
their order; a connection's end closes the other at once.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections import deque


class Relay:
    """Forwards ``127.0.0.1:port`` to ``target`` (host, port) in a thread of its own."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        self._held: deque[tuple[float, socket.socket, bytes]] = deque()  # (due, sink, data)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.passed = 0  # bytes forwarded, both ways
        self.accepted = 0  # connections relayed
        self._running = threading.Event()  # set: bytes pass
        self._running.set()
        self._stop = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def freeze(self) -> None:
        """Stop passing bytes (and accepting connections) until :meth:`thaw`."""
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def close(self) -> None:
        self._stop = True
        self._running.set()
        self._thread.join(10)
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _run(self) -> None:
        while not self._stop:
            self._running.wait()
            if self._stop:
                return
            wait = 0.05
            if self._held:
                wait = min(wait, max(0.0, self._held[0][0] - time.monotonic()))
            for key, _events in self._selector.select(timeout=wait):
                if not self._running.is_set():
                    break  # frozen meanwhile: pass nothing more
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._forward(key.fileobj, key.data)  # type: ignore[arg-type]
            self._pass_held()

    def _pass_held(self) -> None:
        """Write on the delayed chunks that are due (a closed sink's are dropped)."""
        now = time.monotonic()
        while self._held and self._held[0][0] <= now and self._running.is_set():
            _, sink, data = self._held.popleft()
            with contextlib.suppress(OSError):
                sink.sendall(data)

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._selector.register(client, selectors.EVENT_READ, server)
        self._selector.register(server, selectors.EVENT_READ, client)
        self.accepted += 1

    def _forward(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            data = source.recv(65536)
            if data:
                if self.delay:
                    self._held.append((time.monotonic() + self.delay, sink, data))
                else:
                    sink.sendall(data)
                self.passed += len(data)
                return
        except OSError:
            pass
        for end in (source, sink):  # one end closed: close the other
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(end)
            with contextlib.suppress(OSError):
                end.close()
