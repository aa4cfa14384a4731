"""The Python client: one API, two thin drivers (blocking and asyncio) over one protocol."""

from chute.client.blocking import Connection, Consumer, Session, connect
from chute.client.protocol import ClientProtocol
from chute.client.received import Received
from chute.client.url import DEFAULT_PORT, BrokerUrl, parse_url

__all__ = [
    "DEFAULT_PORT",
    "BrokerUrl",
    "ClientProtocol",
    "Connection",
    "Consumer",
    "Received",
    "Session",
    "connect",
    "parse_url",
]
