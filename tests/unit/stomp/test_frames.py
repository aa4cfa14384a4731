"""Frame: header lookup, command sets and the server frames' constructors."""

from __future__ import annotations

from chute.stomp import (
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Command,
    Frame,
)


def test_repeated_headers_first_wins() -> None:
    # STOMP 1.2 §Repeated Header Entries: "only the first header entry SHOULD be used"
    frame = Frame("SEND", (("foo", "World"), ("foo", "Hello"), ("destination", "/queue/a")))
    assert frame.header("foo") == "World"
    assert frame.header_values("foo") == ["World", "Hello"]
    assert frame.header("destination") == "/queue/a"
    assert frame.header("missing") is None
    assert frame.header_values("missing") == []


def test_frames_are_values() -> None:
    a = Frame("ACK", (("id", "1"),))
    assert a == Frame(Command.ACK, (("id", "1"),))
    assert hash(a) == hash(Frame("ACK", (("id", "1"),)))
    assert Frame("DISCONNECT").headers == ()
    assert Frame("DISCONNECT").body == b""


def test_command_sets() -> None:
    # STOMP 1.2 §Client Frames and §Server Frames
    assert {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    } == CLIENT_COMMANDS
    assert {"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"} == SERVER_COMMANDS
    assert not CLIENT_COMMANDS & SERVER_COMMANDS
    assert {str(c) for c in Command} == CLIENT_COMMANDS | SERVER_COMMANDS
    # STOMP 1.2 §Body: only SEND, MESSAGE and ERROR may have a body
    assert {"SEND", "MESSAGE", "ERROR"} == BODY_COMMANDS
    # STOMP 1.2 §Value Encoding: CONNECT and CONNECTED are not escaped (STOMP is CONNECT)
    assert {"CONNECT", "STOMP", "CONNECTED"} == UNESCAPED_COMMANDS


def test_connected() -> None:
    # STOMP 1.2 §CONNECTED Frame: version, heart-beat, session, server
    frame = Frame.connected("1.2", heart_beat=(10_000, 5_000), session="s-1", server="chute/0.1")
    assert frame == Frame(
        "CONNECTED",
        (
            ("version", "1.2"),
            ("heart-beat", "10000,5000"),
            ("session", "s-1"),
            ("server", "chute/0.1"),
        ),
    )
    assert Frame.connected("1.0").headers == (("version", "1.0"), ("heart-beat", "0,0"))


def test_message() -> None:
    # STOMP 1.2 §MESSAGE: destination, message-id, subscription, ack; content-length SHOULD be set
    frame = Frame.message(
        "/queue/a", "m-7", "sub-0", b"hi\x00", ack="a-7", headers=[("priority", "4")]
    )
    assert frame.command == "MESSAGE"
    assert frame.headers == (
        ("destination", "/queue/a"),
        ("message-id", "m-7"),
        ("subscription", "sub-0"),
        ("ack", "a-7"),
        ("priority", "4"),
        ("content-length", "3"),
    )
    assert frame.body == b"hi\x00"
    assert Frame.message("/topic/t", "m", "s").header("content-length") == "0"
    assert Frame.message("/topic/t", "m", "s").header("ack") is None


def test_receipt() -> None:
    # STOMP 1.2 §RECEIPT: receipt-id is the value of the frame's receipt header
    assert Frame.receipt("77") == Frame("RECEIPT", (("receipt-id", "77"),))


def test_error() -> None:
    # STOMP 1.2 §ERROR: message header, receipt-id if the frame asked, body with detail
    frame = Frame.error("malformed frame\nreceived", "line 1\nline 2", receipt_id="r-1")
    assert frame.headers == (
        ("message", "malformed frame received"),
        ("receipt-id", "r-1"),
        ("content-type", "text/plain"),
        ("content-length", "13"),
    )
    assert frame.body == b"line 1\nline 2"
    assert Frame.error("bye").headers == (("message", "bye"), ("content-length", "0"))
    typed = Frame.error("x", b"{}", headers=[("content-type", "application/json")])
    assert typed.header_values("content-type") == ["application/json"]
