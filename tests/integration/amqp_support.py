"""What the AMQP integration tests share: a ``chute serve`` with its AMQP and STOMP
listeners on, and pika connections to it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika

from .conftest import ChuteServer, free_port, start_server

TIMEOUT = 10.0


@dataclass
class AmqpServer:
    server: ChuteServer
    amqp_port: int
    stomp_port: int

    def params(self, **kwargs: object) -> pika.ConnectionParameters:
        return pika.ConnectionParameters(
            "127.0.0.1", self.amqp_port, blocked_connection_timeout=TIMEOUT, **kwargs
        )

    def connect(self, **kwargs: object) -> pika.BlockingConnection:
        return pika.BlockingConnection(self.params(**kwargs))

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}//"


def serve(tmp: Path, *extra: str) -> Iterator[AmqpServer]:
    """Run a broker with AMQP and STOMP on; on the way out, check it never failed."""
    amqp_port, stomp_port = free_port(), free_port()
    srv = start_server(tmp, "--amqp-port", str(amqp_port), "--stomp-port", str(stomp_port), *extra)
    yield AmqpServer(srv, amqp_port, stomp_port)
    assert srv.process.poll() is None, "the broker died:\n" + srv.output
    assert srv.stop() == 0
    assert "Traceback" not in srv.output, srv.output
