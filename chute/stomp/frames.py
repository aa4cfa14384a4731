"""STOMP frames: one frozen dataclass for every command, and the server frames' constructors;
and :data:`HEARTBEAT`, what a frame stream carries between frames.

A frame is a command, an ordered tuple of ``(name, value)`` headers and a body.
Headers stay a tuple of pairs, not a dict: STOMP 1.2 §Repeated Header Entries
lets a header repeat, and only the first occurrence counts (:meth:`Frame.header`),
but a relay must pass the others on unchanged.

Header names and values here are always *decoded* text: the escaping of
§Value Encoding belongs to the codec (:mod:`chute.stomp.codec`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

SUPPORTED_VERSIONS: Final = ("1.0", "1.1", "1.2")
"""The STOMP versions chute speaks, oldest first (§Protocol Negotiation)."""


class HeartBeat(enum.Enum):
    """One or more EOLs between frames (§Heart-beating)."""

    HEARTBEAT = "heart-beat"


HEARTBEAT: Final = HeartBeat.HEARTBEAT


class Command(enum.StrEnum):
    """Every STOMP 1.2 command (§Client Frames, §Server Frames)."""

    # client frames
    CONNECT = "CONNECT"
    STOMP = "STOMP"
    SEND = "SEND"
    SUBSCRIBE = "SUBSCRIBE"
    UNSUBSCRIBE = "UNSUBSCRIBE"
    ACK = "ACK"
    NACK = "NACK"
    BEGIN = "BEGIN"
    COMMIT = "COMMIT"
    ABORT = "ABORT"
    DISCONNECT = "DISCONNECT"
    # server frames
    CONNECTED = "CONNECTED"
    MESSAGE = "MESSAGE"
    RECEIPT = "RECEIPT"
    ERROR = "ERROR"


CLIENT_COMMANDS: Final = frozenset(
    str(c)
    for c in (
        Command.CONNECT,
        Command.STOMP,
        Command.SEND,
        Command.SUBSCRIBE,
        Command.UNSUBSCRIBE,
        Command.ACK,
        Command.NACK,
        Command.BEGIN,
        Command.COMMIT,
        Command.ABORT,
        Command.DISCONNECT,
    )
)
"""What a client may send (§Client Frames); a server's codec accepts only these."""

SERVER_COMMANDS: Final = frozenset(
    str(c) for c in (Command.CONNECTED, Command.MESSAGE, Command.RECEIPT, Command.ERROR)
)
"""What a server may send (§Server Frames); a client's codec accepts only these."""

ALL_COMMANDS: Final = CLIENT_COMMANDS | SERVER_COMMANDS

BODY_COMMANDS: Final = frozenset((Command.SEND.value, Command.MESSAGE.value, Command.ERROR.value))
"""§Body: "Only the SEND, MESSAGE, and ERROR frames MAY have a body"."""

UNESCAPED_COMMANDS: Final = frozenset(
    (Command.CONNECT.value, Command.STOMP.value, Command.CONNECTED.value)
)
"""§Value Encoding: CONNECT and CONNECTED headers are not escaped (1.0 compatibility).

STOMP is CONNECT under another name, so it is treated alike (as RabbitMQ does).
"""


@dataclass(frozen=True, slots=True)
class Frame:
    """One STOMP frame, as sent or received.

    Immutable, so it may be shared across tasks and threads.
    """

    command: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The value of the first header called ``name``, or None.

        STOMP 1.2 §Repeated Header Entries: only the first occurrence is used.
        """
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name``, in order (first is the one that counts)."""
        return [value for key, value in self.headers if key == name]

    # -- server frames (§Server Frames) --------------------------------------------------

    @classmethod
    def connected(
        cls,
        version: str,
        *,
        heart_beat: tuple[int, int] = (0, 0),
        session: str | None = None,
        server: str | None = None,
    ) -> Frame:
        """A CONNECTED frame (§CONNECTED Frame, §Heart-beating).

        ``heart_beat`` is the server's ``(can send every ms, wants every ms)``.
        """
        headers = [("version", version), ("heart-beat", f"{heart_beat[0]},{heart_beat[1]}")]
        if session is not None:
            headers.append(("session", session))
        if server is not None:
            headers.append(("server", server))
        return cls("CONNECTED", tuple(headers))

    @classmethod
    def message(
        cls,
        destination: str,
        message_id: str,
        subscription: str,
        body: bytes = b"",
        *,
        ack: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> Frame:
        """A MESSAGE frame (§MESSAGE), always with ``content-length`` (§Header content-length).

        ``ack`` is set when the subscription's ack mode is client or
        client-individual (STOMP 1.2); ``headers`` come after the standard ones.
        """
        out = [
            ("destination", destination),
            ("message-id", message_id),
            ("subscription", subscription),
        ]
        if ack is not None:
            out.append(("ack", ack))
        out.extend(headers)
        out.append(("content-length", str(len(body))))
        return cls("MESSAGE", tuple(out), body)

    @classmethod
    def receipt(cls, receipt_id: str) -> Frame:
        """A RECEIPT frame answering a frame's ``receipt`` header (§RECEIPT)."""
        return cls("RECEIPT", (("receipt-id", receipt_id),))

    @classmethod
    def error(
        cls,
        message: str,
        body: bytes | str = b"",
        *,
        receipt_id: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> Frame:
        """An ERROR frame (§ERROR): ``message`` is the short description, ``body`` the detail.

        Line breaks in ``message`` become spaces, so the frame can be encoded in
        STOMP 1.0 too, where headers cannot be escaped.
        """
        if isinstance(body, str):
            body = body.encode()
        out = [("message", " ".join(message.splitlines()))]
        if receipt_id is not None:
            out.append(("receipt-id", receipt_id))
        out.extend(headers)
        if body and not any(name == "content-type" for name, _ in out):
            out.append(("content-type", "text/plain"))
        out.append(("content-length", str(len(body))))
        return cls("ERROR", tuple(out), body)
