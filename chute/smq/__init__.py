"""Simple-message-queue's wire protocol: a sans-IO codec and its settings.

The asyncio listeners that serve it are in :mod:`chute.server.smq`.
"""

from chute.sansio import CLOSED, NEED_DATA, NeedData
from chute.smq.codec import DEFAULT_MAX_BODY_SIZE, SinkCodec, SourceCodec
from chute.smq.events import (
    ID_SIZE,
    STORED,
    Ack,
    Deliver,
    EndOfSession,
    Publish,
    Refuse,
    SinkEvent,
    SourceEvent,
)
from chute.smq.ids import to_message_id, to_wire_id
from chute.smq.settings import SmqSettings

__all__ = [
    "CLOSED",
    "DEFAULT_MAX_BODY_SIZE",
    "ID_SIZE",
    "NEED_DATA",
    "STORED",
    "Ack",
    "Deliver",
    "EndOfSession",
    "NeedData",
    "Publish",
    "Refuse",
    "SinkCodec",
    "SinkEvent",
    "SmqSettings",
    "SourceCodec",
    "SourceEvent",
    "to_message_id",
    "to_wire_id",
]
