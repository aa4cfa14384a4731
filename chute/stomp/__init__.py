"""STOMP 1.0/1.1/1.2: a sans-IO codec (bytes in, frames out) and the pure mapping onto the core."""

from chute.sansio import CLOSED, NEED_DATA, NeedData
from chute.stomp.codec import StompCodec
from chute.stomp.frames import (
    ALL_COMMANDS,
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    HEARTBEAT,
    SERVER_COMMANDS,
    SUPPORTED_VERSIONS,
    UNESCAPED_COMMANDS,
    Command,
    Frame,
    HeartBeat,
)

__all__ = [
    "ALL_COMMANDS",
    "BODY_COMMANDS",
    "CLIENT_COMMANDS",
    "CLOSED",
    "HEARTBEAT",
    "NEED_DATA",
    "SERVER_COMMANDS",
    "SUPPORTED_VERSIONS",
    "UNESCAPED_COMMANDS",
    "Command",
    "Frame",
    "HeartBeat",
    "NeedData",
    "StompCodec",
]
