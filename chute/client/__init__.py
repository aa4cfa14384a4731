"""The Python client: one API (:mod:`chute.client.api`), three clients.

The blocking client (:mod:`chute.client.blocking`, over the threads of
:mod:`chute.client.link`) and the asyncio client (:mod:`chute.client.aio_client`,
over :mod:`chute.client.aio_link`) drive one sans-IO state machine
(:mod:`chute.client.protocol`); the blocking client is written from the asyncio
one (``scripts/unasync.py``), the two links by hand. The dropbox client
(:mod:`chute.dropbox.client`) offers the same API with no broker.
"""

from chute.client.blocking import BlockingConnection, BlockingConsumer, BlockingSession, connect
from chute.client.protocol import ClientProtocol
from chute.client.received import Received
from chute.client.url import DEFAULT_PORT, BrokerUrl, parse_url

__all__ = [
    "DEFAULT_PORT",
    "BlockingConnection",
    "BlockingConsumer",
    "BlockingSession",
    "BrokerUrl",
    "ClientProtocol",
    "Received",
    "connect",
    "parse_url",
]
