"""StompCodec: every frame whole, byte by byte and with trailing bytes (h11's tr()),
escaping, content-length, heart-beats, limits, and the fuzz invariant."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chute.errors import LocalProtocolError, RemoteProtocolError
from chute.stomp import (
    CLOSED,
    HEARTBEAT,
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    HeartBeat,
    NeedData,
    StompCodec,
)

Item = Frame | HeartBeat


def feed(codec: StompCodec, data: bytes) -> list[Item]:
    """Feed ``data`` and return every frame and heart-beat it completes."""
    codec.receive_data(data)
    out: list[Item] = []
    while not isinstance(item := codec.next_frame(), NeedData):
        out.append(item)
    return out


def feed_bytewise(codec: StompCodec, data: bytes) -> list[Item]:
    """Feed ``data`` one byte at a time."""
    out: list[Item] = []
    for i in range(len(data)):
        out.extend(feed(codec, data[i : i + 1]))
    return out


def tr(data: bytes, expected: Frame, **options: Any) -> None:
    """Feed one frame whole, byte by byte, and followed by the start of another."""
    # whole
    codec = StompCodec(**options)
    assert feed(codec, data) == [expected]
    assert codec.buffered == 0

    # byte by byte: nothing until the last byte
    codec = StompCodec(**options)
    for i in range(len(data) - 1):
        assert feed(codec, data[i : i + 1]) == [], i
    assert feed(codec, data[-1:]) == [expected]
    assert codec.buffered == 0

    # with trailing bytes: the frame, then the rest stays buffered
    codec = StompCodec(**options)
    trailing = b"\nMESSA" if "commands" in options else b"\nSUBSC"
    assert feed(codec, data + trailing) == [expected, HEARTBEAT]
    assert codec.buffered == 5


def error_code(data: bytes, **options: Any) -> str:
    codec = StompCodec(**options)
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, data)
    return info.value.error_code


# -- every client frame, as a client writes it (STOMP 1.2 §Client Frames) ----------------

CLIENT_WIRE: list[tuple[bytes, Frame]] = [
    (
        # §CONNECT or STOMP Frame
        b"CONNECT\naccept-version:1.0,1.1,1.2\nhost:stomp.example\nlogin:bob\n"
        b"passcode:s3cr:t\nheart-beat:10000,10000\n\n\x00",
        Frame(
            "CONNECT",
            (
                ("accept-version", "1.0,1.1,1.2"),
                ("host", "stomp.example"),
                ("login", "bob"),
                ("passcode", "s3cr:t"),
                ("heart-beat", "10000,10000"),
            ),
        ),
    ),
    (
        b"STOMP\naccept-version:1.2\nhost:stomp.example\n\n\x00",
        Frame("STOMP", (("accept-version", "1.2"), ("host", "stomp.example"))),
    ),
    (
        # §SEND: a body without content-length ends at the first NUL
        b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\x00",
        Frame(
            "SEND",
            (("destination", "/queue/a"), ("content-type", "text/plain")),
            b"hello queue a",
        ),
    ),
    (
        # §Header content-length: the body may contain NULs
        b"SEND\ndestination:/queue/a\ncontent-length:5\nreceipt:77\n\n\x00\x01\x00\n\n\x00",
        Frame(
            "SEND",
            (("destination", "/queue/a"), ("content-length", "5"), ("receipt", "77")),
            b"\x00\x01\x00\n\n",
        ),
    ),
    (
        b"SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client\n\n\x00",
        Frame("SUBSCRIBE", (("id", "0"), ("destination", "/queue/foo"), ("ack", "client"))),
    ),
    (b"UNSUBSCRIBE\nid:0\n\n\x00", Frame("UNSUBSCRIBE", (("id", "0"),))),
    (
        b"ACK\nid:12345\ntransaction:tx1\n\n\x00",
        Frame("ACK", (("id", "12345"), ("transaction", "tx1"))),
    ),
    (b"NACK\nid:12345\n\n\x00", Frame("NACK", (("id", "12345"),))),
    (b"BEGIN\ntransaction:tx1\n\n\x00", Frame("BEGIN", (("transaction", "tx1"),))),
    (b"COMMIT\ntransaction:tx1\n\n\x00", Frame("COMMIT", (("transaction", "tx1"),))),
    (b"ABORT\ntransaction:tx1\n\n\x00", Frame("ABORT", (("transaction", "tx1"),))),
    (b"DISCONNECT\nreceipt:77\n\n\x00", Frame("DISCONNECT", (("receipt", "77"),))),
    (b"DISCONNECT\n\n\x00", Frame("DISCONNECT")),
]

SERVER_FRAMES: list[Frame] = [
    Frame.connected("1.2", heart_beat=(0, 10_000), session="s:1", server="chute/0.1"),
    Frame.message("/queue/a", "m-1", "0", b"hello\x00world", ack="a:1", headers=[("x", "a\nb")]),
    Frame.message("/topic/t", "m-2", "1"),
    Frame.receipt("77"),
    Frame.error("malformed frame", "detail\n", receipt_id="r\\1"),
]


@pytest.mark.parametrize(("data", "frame"), CLIENT_WIRE, ids=lambda x: repr(x)[:30])
def test_client_frames(data: bytes, frame: Frame) -> None:
    tr(data, frame)


@pytest.mark.parametrize(("data", "frame"), CLIENT_WIRE, ids=lambda x: repr(x)[:30])
def test_client_frames_with_crlf(data: bytes, frame: Frame) -> None:
    # STOMP 1.2 §STOMP Frames: "EOL = [CR] LF"
    head, _, body = data.partition(b"\n\n")
    tr(head.replace(b"\n", b"\r\n") + b"\r\n\r\n" + body, frame)


@pytest.mark.parametrize(("data", "frame"), CLIENT_WIRE, ids=lambda x: repr(x)[:30])
def test_client_frames_encode_and_decode(data: bytes, frame: Frame) -> None:
    encoded = StompCodec().send(frame)
    assert encoded == data
    tr(encoded, frame)


@pytest.mark.parametrize("frame", SERVER_FRAMES, ids=lambda f: f.command)
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_server_frames_encode_and_decode(frame: Frame, version: str) -> None:
    # a client's codec reads what a server's writes
    if version == "1.0":  # 1.0 cannot carry a header with a line break
        frame = Frame(
            frame.command, tuple(h for h in frame.headers if "\n" not in h[1]), frame.body
        )
    data = StompCodec(version=version).send(frame)
    tr(data, frame, commands=SERVER_COMMANDS, version=version)


def test_mixed_eols_in_one_frame() -> None:
    # STOMP 1.2 §STOMP Frames: each EOL may be LF or CRLF
    frame = Frame("SEND", (("destination", "/queue/a"), ("k", "v")), b"body\r\n")
    tr(b"SEND\ndestination:/queue/a\r\nk:v\n\r\nbody\r\n\x00", frame)
    tr(b"SEND\r\ndestination:/queue/a\nk:v\r\n\nbody\r\n\x00", frame)


def test_many_frames_in_one_read_and_split_reads() -> None:
    data = b"\n".join(wire for wire, _ in CLIENT_WIRE)
    expected = [frame for _, frame in CLIENT_WIRE]
    codec = StompCodec()
    assert [x for x in feed(codec, data) if isinstance(x, Frame)] == expected
    for size in (1, 2, 3, 7, 100, 1000):
        codec = StompCodec()
        got: list[Item] = []
        for i in range(0, len(data), size):
            got.extend(feed(codec, data[i : i + size]))
        assert [x for x in got if isinstance(x, Frame)] == expected, size
        assert codec.buffered == 0


# -- §Value Encoding -----------------------------------------------------------------


def test_escapes_are_decoded() -> None:
    # STOMP 1.2 §Value Encoding: \r \n \c \\ in names and values
    data = b"SEND\ndestination:/queue/a\nk\\cey:a\\nb\\rc\\cd\\\\e\n\n\x00"
    tr(data, Frame("SEND", (("destination", "/queue/a"), ("k:ey", "a\nb\rc:d\\e"))))


def test_escapes_are_encoded() -> None:
    frame = Frame("SEND", (("k:ey", "a\nb\rc:d\\e"),))
    assert StompCodec().send(frame) == b"SEND\nk\\cey:a\\nb\\rc\\cd\\\\e\n\n\x00"


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP"])
def test_connect_headers_are_not_unescaped(command: bytes) -> None:
    # STOMP 1.2 §Value Encoding: "CONNECT and CONNECTED frames do not escape ..."
    data = command + b"\nlogin:a\\nb\\t\npasscode:x:y\n\n\x00"
    tr(data, Frame(command.decode(), (("login", "a\\nb\\t"), ("passcode", "x:y"))))


def test_connected_headers_are_not_escaped() -> None:
    frame = Frame("CONNECTED", (("version", "1.2"), ("server", "a\\b:c")))
    assert StompCodec().send(frame) == b"CONNECTED\nversion:1.2\nserver:a\\b:c\n\n\x00"


@pytest.mark.parametrize("escape", [b"\\t", b"\\", b"\\x41", b"\\C", b"\\ "])
def test_undefined_escape_is_fatal(escape: bytes) -> None:
    # STOMP 1.2 §Value Encoding: "Undefined escape sequences such as \t MUST be treated
    # as a fatal protocol error"
    data = b"SEND\ndestination:/queue/a\nk:a" + escape + b"\n\n\x00"
    assert error_code(data) == "bad-escape"
    assert error_code(data.replace(b"\n", b"\r\n")) == "bad-escape"
    with pytest.raises(RemoteProtocolError) as info:
        feed_bytewise(StompCodec(), data)
    assert info.value.error_code == "bad-escape"


def test_stomp_1_1_accepts_the_cr_escape() -> None:
    # 1.1 defines \n \c \\ only; \r is accepted (lenient) and written by us in 1.1 too
    frame = Frame("SEND", (("k", "a\rb"),))
    assert StompCodec(version="1.1").send(frame) == b"SEND\nk:a\\rb\n\n\x00"
    tr(b"SEND\nk:a\\rb\n\n\x00", frame, version="1.1")


def test_stomp_1_0_neither_escapes_nor_unescapes_but_trims() -> None:
    # STOMP 1.0 has no escaping; ActiveMQ and RabbitMQ trim its headers
    tr(
        b"SEND\ndestination: /queue/a \nk:a\\nb\\t:c\n\n\x00",
        Frame("SEND", (("destination", "/queue/a"), ("k", "a\\nb\\t:c"))),
        version="1.0",
    )
    codec = StompCodec(version="1.0")
    assert codec.send(Frame("SEND", (("k", "a\\b:c"),))) == b"SEND\nk:a\\b:c\n\n\x00"
    with pytest.raises(LocalProtocolError):
        codec.send(Frame("SEND", (("k", "a\nb"),)))
    with pytest.raises(LocalProtocolError):
        codec.send(Frame("SEND", (("k:x", "a"),)))


def test_version_can_change_once_negotiated() -> None:
    codec = StompCodec()
    assert codec.version == "1.2"
    assert feed(codec, b"CONNECT\naccept-version:1.0\n\n\x00")[0].command == "CONNECT"  # type: ignore[union-attr]
    codec.version = "1.0"
    assert feed(codec, b"SEND\nk:\\t\n\n\x00") == [Frame("SEND", (("k", "\\t"),))]
    with pytest.raises(ValueError, match="unsupported"):
        codec.version = "2.0"


header_text = st.text(max_size=30)


@settings(max_examples=300)
@given(
    headers=st.lists(st.tuples(header_text.filter(bool), header_text), max_size=8),
    body=st.binary(max_size=50),
    version=st.sampled_from(["1.1", "1.2"]),
)
def test_escaping_round_trip(headers: list[tuple[str, str]], body: bytes, version: str) -> None:
    # STOMP 1.2 §Value Encoding: encode then decode gives back any unicode header
    # first, so that a generated "content-length" is a repeat, which is ignored
    frame = Frame("SEND", (("content-length", str(len(body))), *headers), body)
    data = StompCodec(version=version).send(frame)
    assert feed(StompCodec(version=version), data) == [frame]
    assert feed_bytewise(StompCodec(version=version), data) == [frame]


@given(
    headers=st.lists(
        st.tuples(
            st.text(
                st.characters(codec="utf-8", exclude_characters=":\r\n"), min_size=1, max_size=20
            ).filter(lambda name: name != "content-length"),
            st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20),
        ),
        max_size=8,
    ),
)
def test_unescaped_connect_round_trip(headers: list[tuple[str, str]]) -> None:
    # §Value Encoding: CONNECT is written raw, so only CR/LF (and ':' in names) are out
    frame = Frame("CONNECT", tuple(headers))
    assert feed(StompCodec(), StompCodec().send(frame)) == [frame]


# -- §Header content-length, §Body --------------------------------------------------------


def test_content_length_body_with_nul_bytes() -> None:
    body = bytes(range(256)) * 4
    frame = Frame("SEND", (("destination", "/queue/bin"), ("content-length", "1024")), body)
    data = StompCodec().send(frame)
    assert data.count(b"\x00") == 5
    tr(data, frame)


def test_repeated_content_length_first_wins() -> None:
    # §Repeated Header Entries applies to content-length too
    data = b"SEND\ncontent-length:3\ncontent-length:x\n\na\x00b\x00"
    tr(data, Frame("SEND", (("content-length", "3"), ("content-length", "x")), b"a\x00b"))


@pytest.mark.parametrize("value", [b"x", b"-1", b"", b" 3", b"3 ", b"0x3", b"\xd9\xa3"])
def test_bad_content_length(value: bytes) -> None:
    assert error_code(b"SEND\ncontent-length:" + value + b"\n\nabc\x00") == "bad-content-length"


def test_content_length_must_be_followed_by_nul() -> None:
    # §Header content-length: the frame still ends with a NUL
    assert error_code(b"SEND\ncontent-length:2\n\nabc\x00") == "bad-content-length"
    codec = StompCodec()
    assert feed(codec, b"SEND\ncontent-length:4\n\nabc\x00") == []  # a NUL in the body
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, b"x")
    assert info.value.error_code == "bad-content-length"


@pytest.mark.parametrize("command", [b"SUBSCRIBE", b"ACK", b"CONNECT", b"DISCONNECT"])
def test_body_on_a_frame_that_may_not_have_one(command: bytes) -> None:
    # §Body: "Only the SEND, MESSAGE, and ERROR frames MAY have a body"
    assert error_code(command + b"\nid:1\n\nbody\x00") == "malformed-frame"
    assert error_code(command + b"\ncontent-length:1\n\n\x00\x00") == "malformed-frame"
    tr(command + b"\ncontent-length:0\n\n\x00", Frame(command.decode(), (("content-length", "0"),)))


# -- §Heart-beating -------------------------------------------------------------------


def test_heart_beats_between_frames() -> None:
    codec = StompCodec()
    assert feed(codec, b"\n") == [HEARTBEAT]
    assert feed(codec, b"\r\n\n\r\n") == [HEARTBEAT]  # a run of EOLs is one heart-beat
    assert feed(codec, b"\r") == []  # maybe the start of a CRLF
    assert feed(codec, b"\n") == [HEARTBEAT]
    assert feed(codec, b"\nBEGIN\ntransaction:t\n\n\x00\n\n") == [
        HEARTBEAT,
        Frame("BEGIN", (("transaction", "t"),)),
        HEARTBEAT,
    ]
    assert codec.buffered == 0
    assert codec.send(HEARTBEAT) == b"\n"


def test_cr_without_lf_between_frames_is_malformed() -> None:
    assert error_code(b"\rSEND\n\n\x00") == "malformed-frame"
    assert error_code(b"\n\r\rSEND\n\n\x00") == "malformed-frame"


# -- end of stream --------------------------------------------------------------------


def test_eof_between_frames_is_closed() -> None:
    codec = StompCodec()
    assert feed(codec, b"DISCONNECT\n\n\x00\n") == [Frame("DISCONNECT"), HEARTBEAT]
    codec.receive_data(b"")
    assert codec.next_frame() is CLOSED
    assert codec.next_frame() is CLOSED
    with pytest.raises(RemoteProtocolError) as info:
        codec.receive_data(b"x")
    assert info.value.error_code == "eof-mid-frame"


@pytest.mark.parametrize("partial", [b"SE", b"SEND\nk:v", b"SEND\n\nbody", b"\r"])
def test_eof_in_the_middle_of_a_frame(partial: bytes) -> None:
    codec = StompCodec()
    assert feed(codec, partial) == []
    codec.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as info:
        codec.next_frame()
    assert info.value.error_code == "eof-mid-frame"


def test_an_error_is_final() -> None:
    codec = StompCodec()
    codec.receive_data(b"HELLO\n\n\x00SEND\n\n\x00")
    with pytest.raises(RemoteProtocolError) as first:
        codec.next_frame()
    with pytest.raises(RemoteProtocolError) as second:
        codec.next_frame()
    assert second.value is first.value


# -- malformed frames -----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"HELLO\n\n\x00",
        b"send\n\n\x00",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"SEND \n\n\x00",
        b"\x00\n",
        b"MESSAGE\ndestination:/queue/a\n\n\x00",  # a server frame sent to the server
        b"CONNECTEDX",  # refused before the EOL: no command starts so
        b"GET ",
    ],
)
def test_unknown_command(data: bytes) -> None:
    assert error_code(data) == "unknown-command"


def test_a_client_codec_accepts_only_server_frames() -> None:
    assert error_code(b"SEND\n\n\x00", commands=SERVER_COMMANDS) == "unknown-command"
    with pytest.raises(ValueError, match="not a STOMP command"):
        StompCodec(commands=["SEND", "PUBLISH"])


@pytest.mark.parametrize(
    "data",
    [
        b"SEND\nno colon\n\n\x00",
        b"SEND\n:value\n\n\x00",
        b"SEND\ndestination:\xff\xfe\n\n\x00",
        b"SEND\nk:v\r\n\r\n\xff\x00",  # fine: the body is bytes; the next line is the error
    ],
)
def test_malformed_headers(data: bytes) -> None:
    if data.endswith(b"\xff\x00"):
        assert feed(StompCodec(), data) == [Frame("SEND", (("k", "v"),), b"\xff")]
        return
    assert error_code(data) == "malformed-frame"
    assert error_code(data.replace(b"\n", b"\r\n")) == "malformed-frame"


# -- §Size Limits -----------------------------------------------------------------------


def test_frame_with_content_length_over_the_limit_is_refused_before_its_body() -> None:
    codec = StompCodec(max_frame_size=1000)
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, b"SEND\ndestination:/queue/a\ncontent-length:5000\n\n")
    assert info.value.error_code == "frame-too-large"


def test_frame_without_content_length_is_refused_at_the_limit() -> None:
    codec = StompCodec(max_frame_size=1000)
    assert feed(codec, b"SEND\n\n" + b"x" * 993) == []  # 999 bytes: a NUL may still come
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, b"x")
    assert info.value.error_code == "frame-too-large"
    assert error_code(b"SEND\n\n" + b"x" * 5000 + b"\x00", max_frame_size=1000) == (
        "frame-too-large"
    )


def test_the_frame_limit_may_change_between_reads() -> None:
    # a server takes small frames until the client logged in, then max_packet_size
    codec = StompCodec(max_frame_size=1000)
    assert feed(codec, b"CONNECT\naccept-version:1.2\n\n\x00") == [
        Frame("CONNECT", (("accept-version", "1.2"),))
    ]
    codec.max_frame_size = 100_000
    body = b"x" * 5000
    frame = b"SEND\ncontent-length:5000\n\n" + body + b"\x00"
    assert feed(codec, frame) == [Frame("SEND", (("content-length", "5000"),), body)]
    codec.max_frame_size = 1000
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, frame)
    assert info.value.error_code == "frame-too-large"


def test_a_frame_announced_too_large_is_refused_before_its_body_arrives() -> None:
    codec = StompCodec(max_frame_size=64 << 10)
    head = b"SEND\ndestination:/queue/a\ncontent-length:%d\n\n" % (15 << 20)
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, head + b"x" * 1000)
    assert info.value.error_code == "frame-too-large"
    assert codec.buffered <= len(head) + 1000


def test_frame_at_the_size_limit_is_accepted() -> None:
    for frame in (
        Frame("SEND", (("content-length", "500"),), b"x" * 500),
        Frame("SEND", (), b"x" * 500),
    ):
        data = StompCodec().send(frame)
        tr(data, frame, max_frame_size=len(data))
        with pytest.raises(RemoteProtocolError) as info:
            feed(StompCodec(max_frame_size=len(data) - 1), data)
        assert info.value.error_code == "frame-too-large"


def test_headers_alone_over_the_frame_limit() -> None:
    data = b"SEND\n" + b"k:" + b"v" * 100 + b"\n" * 10
    assert error_code(data, max_frame_size=50) == "frame-too-large"
    with pytest.raises(RemoteProtocolError) as info:
        feed_bytewise(StompCodec(max_frame_size=50), data)
    assert info.value.error_code == "frame-too-large"


def test_header_count_limit() -> None:
    def frame(n: int) -> bytes:
        return b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(n)) + b"\n\x00"

    assert len(feed(StompCodec(max_header_count=10), frame(10))) == 1
    assert error_code(frame(11), max_header_count=10) == "too-many-headers"
    codec = StompCodec(max_header_count=10)
    with pytest.raises(RemoteProtocolError) as info:
        feed(codec, frame(11)[:-2])  # refused before the blank line
    assert info.value.error_code == "too-many-headers"


def test_header_length_limit() -> None:
    def frame(n: int) -> bytes:
        return b"SEND\nk:" + b"v" * (n - 2) + b"\r\n\r\n\x00"

    tr(frame(100), Frame("SEND", (("k", "v" * 98),)), max_header_length=100)
    assert error_code(frame(101), max_header_length=100) == "header-too-long"
    # refused before its EOL arrives
    assert error_code(b"SEND\nk:" + b"v" * 200, max_header_length=100) == "header-too-long"


# -- buffering --------------------------------------------------------------------------


@pytest.mark.parametrize("content_length", [True, False])
def test_byte_by_byte_feeding_of_a_large_frame_is_linear(content_length: bool) -> None:
    # O(n^2) buffering would take minutes here; linear takes a fraction of a second.
    body = b"x" * 300_000
    headers = (("content-length", str(len(body))),) if content_length else ()
    frame = Frame("SEND", (("destination", "/queue/a"), *headers), body)
    data = StompCodec().send(frame)
    codec = StompCodec()
    start = time.perf_counter()
    for i in range(len(data) - 1):
        codec.receive_data(data[i : i + 1])
        assert codec.next_frame() is NEED_DATA
    codec.receive_data(data[-1:])
    assert codec.next_frame() == frame
    assert time.perf_counter() - start < 10


def test_receive_data_accepts_bytes_like() -> None:
    codec = StompCodec()
    codec.receive_data(bytearray(b"SEND\n\nab"))  # type: ignore[arg-type]
    codec.receive_data(memoryview(b"c\x00"))  # type: ignore[arg-type]
    assert codec.next_frame() == Frame("SEND", (), b"abc")


# -- send() refuses what cannot be decoded -----------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Frame("PUBLISH"),
        Frame("RECEIPT", (("receipt-id", "1"),), b"body"),
        Frame("SEND", (("", "v"),)),
        Frame("CONNECTED", (("server", "a\nb"),)),
        Frame("CONNECT", (("login", "a\rb"),)),
        Frame("SEND", (("content-length", "3"),), b"ab"),
        Frame("SEND", (), b"a\x00b"),
        Frame("SEND", (("k", "\ud800"),)),
    ],
)
def test_send_refuses(frame: Frame) -> None:
    with pytest.raises(LocalProtocolError):
        StompCodec().send(frame)


# -- the fuzz invariant -----------------------------------------------------------------

FRAGMENTS = [
    b"SEND",
    b"CONNECT",
    b"MESSAGE",
    b"ACK",
    b"\n",
    b"\r\n",
    b"\r",
    b":",
    b"\\",
    b"\\n",
    b"\\c",
    b"\\t",
    b"\x00",
    b"content-length:",
    b"0",
    b"3",
    b"12",
    b"-",
    b"k",
    b"v",
    b"\xff",
    b"\xc3\xa9",
    b" ",
]
garbage = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(b"".join),
)
OPTIONS = st.fixed_dictionaries(
    {
        "max_frame_size": st.sampled_from([16 << 20, 64]),
        "max_header_count": st.sampled_from([100, 2]),
        "max_header_length": st.sampled_from([8192, 10]),
        "version": st.sampled_from(["1.0", "1.1", "1.2"]),
    }
)


def outcome(codec: StompCodec, chunks: list[bytes]) -> tuple[list[Frame], str | None]:
    """The frames decoded and the error raised, if any; nothing else may escape."""
    frames: list[Frame] = []
    try:
        for chunk in chunks:
            for item in feed(codec, chunk):
                assert isinstance(item, Frame | HeartBeat)
                if isinstance(item, Frame):
                    frames.append(item)
        codec.receive_data(b"")
        assert codec.next_frame() is CLOSED
    except RemoteProtocolError as exc:
        return frames, exc.error_code
    return frames, None


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(data=garbage, cuts=st.lists(st.integers(0, 300), max_size=10), options=OPTIONS)
def test_garbage_raises_only_remote_protocol_error(
    data: bytes, cuts: list[int], options: dict[str, Any]
) -> None:
    # h11 fuzz/afl-server.py: "we either successfully parse it, or else throw a
    # RemoteProtocolError, never any other error"
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    frames, code = outcome(StompCodec(**options), chunks)
    # whole and split, the same frames and the same verdict (with the default limits,
    # which small inputs cannot reach, the order of the checks cannot differ)
    if options["max_frame_size"] == 16 << 20 and options["max_header_length"] == 8192:
        whole = outcome(StompCodec(**options), [data] if data else [])
        assert whole == (frames, code)


@settings(max_examples=300)
@given(data=garbage)
def test_garbage_byte_by_byte_same_as_whole(data: bytes) -> None:
    whole = outcome(StompCodec(), [data] if data else [])
    split = outcome(StompCodec(), [data[i : i + 1] for i in range(len(data))])
    assert whole == split


def test_head_of_a_frame_whose_body_is_still_to_come() -> None:
    codec = StompCodec()
    codec.receive_data(b"SEND\ndestination:/queue/a\ncontent-length:100\n\nabc")
    assert isinstance(codec.next_frame(), NeedData)
    assert codec.head == ("SEND", [("destination", "/queue/a"), ("content-length", "100")])
    codec.discard()
    assert codec.buffered == 0
    assert codec.head is None
    codec.receive_data(b"SEND\ndestination:/queue/b\n\nx\0")
    frame = codec.next_frame()
    assert isinstance(frame, Frame)
    assert frame.body == b"x"
