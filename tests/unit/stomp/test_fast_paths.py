"""The STOMP hot paths give the same answers as the general code they stand in for.

* the codec's plain-frame reader (and its memo of header blocks) against its
  general line-by-line reader, which byte-by-byte feeding forces;
* :class:`MessageEncoder` against ``codec.send(message_frame(...))``;
* ``send_receipt`` against ``send(Frame.receipt(...))``;
* :class:`SendReader`, whose memo must never share a message's parts.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chute.errors import InvalidMessage, LocalProtocolError, RemoteProtocolError
from chute.message import BodyKind, Byte, Float, Message, PropertyValue
from chute.stomp import CLOSED, SERVER_COMMANDS, Frame, HeartBeat, NeedData, StompCodec
from chute.stomp.adapter import AckToken, SendReader, message_frame
from chute.stomp.delivery import MessageEncoder

# -- the codec: plain frames whole == byte by byte ----------------------------------------

NAMES = st.sampled_from(
    ["destination", "receipt", "content-type", "content-length", "k", "x-y", "a:b", ""]
)
VALUES = st.sampled_from(["/queue/a", "1", "0", "12", "text/plain", "v:w", "", "é", "a\\cb"])
COMMANDS = st.sampled_from(["SEND", "SEND", "ACK", "SUBSCRIBE", "CONNECT", "BOGUS"])


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Mostly well-formed frames: the fast path's ground, with its edges mixed in."""
    command = draw(COMMANDS)
    headers = draw(st.lists(st.tuples(NAMES, VALUES), max_size=5))
    body = draw(st.sampled_from([b"", b"hello", b"a\x00b", b"\n\n"]))
    lines = [command.encode()] + [f"{n}:{v}".encode() for n, v in headers]
    if draw(st.booleans()):
        length = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1]))
        lines.append(b"content-length:%d" % length)
    eol = draw(st.sampled_from([b"\n", b"\n", b"\n", b"\r\n"]))
    before = draw(st.sampled_from([b"", b"", b"\n", b"\r\n"]))
    return before + eol.join(lines) + eol + eol + body + b"\x00"


def outcome(codec: StompCodec, chunks: list[bytes]) -> tuple[list[Frame], str | None]:
    got: list[Frame] = []
    try:
        for chunk in chunks:
            codec.receive_data(chunk)
            while not isinstance(item := codec.next_frame(), NeedData):
                assert isinstance(item, Frame | HeartBeat)
                if isinstance(item, Frame):
                    got.append(item)
        codec.receive_data(b"")
        assert codec.next_frame() is CLOSED
    except RemoteProtocolError as exc:
        return got, exc.error_code
    return got, None


OPTIONS = st.fixed_dictionaries(
    {
        "max_frame_size": st.sampled_from([16 << 20, 40]),
        "max_header_count": st.sampled_from([100, 2]),
        "max_header_length": st.sampled_from([8192, 12]),
        "version": st.sampled_from(["1.0", "1.1", "1.2"]),
    }
)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(
    stream=st.lists(frames(), min_size=1, max_size=6),
    repeat=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    options=OPTIONS,
)
def test_plain_frames_read_as_the_general_reader_reads_them(
    stream: list[bytes], repeat: int, cuts: list[int], options: dict[str, Any]
) -> None:
    data = b"".join(stream) * repeat  # repeats hit the memo of header blocks
    bytewise = outcome(StompCodec(**options), [data[i : i + 1] for i in range(len(data))])
    whole = outcome(StompCodec(**options), [data])
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    split = outcome(StompCodec(**options), [data[a:b] for a, b in itertools.pairwise(points)])
    if options["max_frame_size"] == 16 << 20 and options["max_header_length"] == 8192:
        assert whole == bytewise
        assert split == bytewise
    else:  # at a limit only the error code may differ (which limit is seen first)
        assert whole[0] == bytewise[0][: len(whole[0])] or bytewise[1] is not None
        assert (whole[1] is None) == (bytewise[1] is None)


def test_a_repeated_header_block_is_read_once_and_shared() -> None:
    codec = StompCodec()
    frame = b"SEND\ndestination:/queue/a\ncontent-length:2\n\nhi\x00"
    codec.receive_data(frame * 3)
    got = [codec.next_frame() for _ in range(3)]
    assert all(isinstance(item, Frame) for item in got)
    first, second, third = (item for item in got if isinstance(item, Frame))
    assert (
        first
        == second
        == third
        == Frame("SEND", (("destination", "/queue/a"), ("content-length", "2")), b"hi")
    )
    assert first.headers is second.headers is third.headers  # what SendReader relies on


def test_the_memo_of_header_blocks_is_bounded() -> None:
    codec = StompCodec()
    for n in range(1000):
        codec.receive_data(b"SEND\ndestination:/queue/q%d\n\nx\x00" % n)
        assert isinstance(codec.next_frame(), Frame)
    assert len(codec._seen) <= 16


def test_a_new_version_forgets_the_header_blocks_read_under_the_old_one() -> None:
    codec = StompCodec()
    frame = b"SEND\ndestination: /queue/a \n\nx\x00"
    codec.receive_data(frame)
    assert codec.next_frame() == Frame("SEND", (("destination", " /queue/a "),), b"x")
    codec.version = "1.0"  # trims
    codec.receive_data(frame)
    assert codec.next_frame() == Frame("SEND", (("destination", "/queue/a"),), b"x")


def test_a_frame_after_an_error_is_never_returned() -> None:
    codec = StompCodec()
    codec.receive_data(b"\rX" + b"SEND\ndestination:/queue/a\n\nx\x00")
    for _ in range(2):
        with pytest.raises(RemoteProtocolError):
            codec.next_frame()


# -- MESSAGE frames: MessageEncoder == codec.send(message_frame(...)) -----------------------

TEXT = st.text(
    alphabet=st.sampled_from(["a", "Z", "0", ":", "\\", "\n", "\r", " ", "é", "/", "."]),
    max_size=8,
)
PROPERTY_VALUES: st.SearchStrategy[PropertyValue] = st.one_of(
    TEXT,
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-128, 127).map(Byte),
    st.floats(allow_nan=False),
    st.floats(allow_nan=False, width=32).map(Float),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    optional = st.none() | TEXT
    message = Message(
        draw(st.binary(max_size=20)),
        id=draw(st.sampled_from(["0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4", "my:id", "id\\x"])),
        priority=draw(st.integers(0, 9)),
        timestamp=draw(st.integers(0, 2**45)),
        expiration=draw(st.integers(0, 2**45)),
        correlation_id=draw(optional),
        reply_to=draw(st.none() | st.sampled_from(["queue:replies", "topic:t", "x:y\nz"])),
        type=draw(optional),
        persistent=draw(st.booleans()),
        properties=draw(
            st.dictionaries(
                st.one_of(TEXT.filter(bool), st.sampled_from(["content-type", "priority"])),
                PROPERTY_VALUES,
                max_size=4,
            )
        ),
        kind=draw(st.sampled_from([BodyKind.BYTES, BodyKind.TEXT])),
    )
    return message


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=messages(),
    version=st.sampled_from(["1.0", "1.1", "1.2"]),
    destination=st.sampled_from(["/queue/a", "/topic/t:x", "/queue/a\\b"]),
    subscription=st.sampled_from(["0", "sub:1", "s\\2"]),
    consumer_id=st.none() | st.integers(1, 10**6),
    seq=st.integers(1, 2**40),
    delivery_count=st.integers(1, 12),
    redelivered=st.booleans(),
)
def test_message_encoder_writes_what_the_codec_writes(
    *,
    message: Message,
    version: str,
    destination: str,
    subscription: str,
    consumer_id: int | None,
    seq: int,
    delivery_count: int,
    redelivered: bool,
) -> None:
    codec = StompCodec(version=version, commands=SERVER_COMMANDS)
    ack = None if consumer_id is None else AckToken.make(consumer_id, seq)
    prefix = None if consumer_id is None else AckToken.prefix(consumer_id)
    encoder = MessageEncoder(destination, subscription, prefix, version)
    expected = codec.send(
        message_frame(
            message,
            destination=destination,
            subscription=subscription,
            ack=ack,
            delivery_count=delivery_count,
            redelivered=redelivered or delivery_count > 1,
            version=version,
        )
    )
    assert encoder.encode(message, seq, delivery_count, redelivered) == expected
    # again, from the memo (a topic's fan-out), and for the other escaping
    assert encoder.encode(message, seq, delivery_count, redelivered) == expected
    other = "1.0" if version != "1.0" else "1.2"
    codec.version = other
    assert MessageEncoder(destination, subscription, prefix, other).encode(
        message, seq, delivery_count, redelivered
    ) == codec.send(
        message_frame(
            message,
            destination=destination,
            subscription=subscription,
            ack=ack,
            delivery_count=delivery_count,
            redelivered=redelivered or delivery_count > 1,
            version=other,
        )
    )


def test_message_encoder_decodes_as_a_client_reads_it() -> None:
    message = Message(b"body\x00!", id="m-1", correlation_id="c:1", properties={"n": 5})
    message.timestamp = 1700000000000
    encoder = MessageEncoder("/queue/a", "sub-0", AckToken.prefix(7), "1.2")
    client = StompCodec(commands=SERVER_COMMANDS)
    client.receive_data(encoder.encode(message, 42, 1, False))
    frame = client.next_frame()
    assert isinstance(frame, Frame)
    assert frame.command == "MESSAGE"
    assert frame.body == b"body\x00!"
    assert frame.header("ack") == "7.42"
    assert frame.header("correlation-id") == "c:1"
    assert frame.header("n") == "5"
    assert frame.header("subscription") == "sub-0"
    assert frame.header("redelivered") == "false"


def test_a_lone_surrogate_is_refused_by_both_encoders() -> None:
    message = Message(b"", id="m", properties={"k": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        MessageEncoder("/queue/a", "0", None, "1.2").encode(message, 1, 1, False)
    frame = message_frame(
        message,
        destination="/queue/a",
        subscription="0",
        ack=None,
        delivery_count=1,
        redelivered=False,
        version="1.2",
    )
    with pytest.raises(LocalProtocolError):
        StompCodec(commands=SERVER_COMMANDS).send(frame)


# -- RECEIPT ---------------------------------------------------------------------------------


@pytest.mark.parametrize("receipt", ["77", "a:b", "x\\y", "é", "line\nbreak", "cr\r"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_send_receipt_is_send_of_a_receipt_frame(receipt: str, version: str) -> None:
    codec = StompCodec(version=version, commands=SERVER_COMMANDS)
    try:
        expected: bytes | type[LocalProtocolError] = codec.send(Frame.receipt(receipt))
    except LocalProtocolError:
        expected = LocalProtocolError
    if expected is LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            codec.send_receipt(receipt)
    else:
        assert codec.send_receipt(receipt) == expected


# -- SEND frames -----------------------------------------------------------------------------


def test_send_reader_reads_fields_and_properties_first_one_wins() -> None:
    frame = Frame(
        "SEND",
        (
            ("destination", "/queue/a"),
            ("priority", "7"),
            ("priority", "x"),  # ignored: the first one counts
            ("persistent", "false"),
            ("expiration", "5000"),
            ("expires", "123"),
            ("receipt", "r1"),
            ("transaction", "t1"),
            ("reply-to", "/temp-queue/r"),
            ("correlation-id", "c"),
            ("type", "order"),
            ("content-type", "text/plain"),
            ("x", "1"),
            ("x", "2"),
            ("content-length", "2"),
            ("message-id", "not-used"),
        ),
        b"hi",
    )
    send = SendReader().read(frame)
    assert (send.destination, send.receipt, send.transaction, send.reply_to, send.ttl) == (
        "/queue/a",
        "r1",
        "t1",
        "/temp-queue/r",
        5000,
    )
    m = send.message
    assert (m.priority, m.persistent, m.expiration, m.correlation_id, m.type) == (
        7,
        False,
        123,
        "c",
        "order",
    )
    assert m.kind is BodyKind.TEXT
    assert m.properties == {"content-type": "text/plain", "x": "1"}
    assert m.id
    assert m.id != "not-used"
    assert m.body == b"hi"


def test_send_reader_memo_shares_nothing_between_messages() -> None:
    reader = SendReader()
    headers = (("destination", "/queue/a"), ("k", "v"))
    first = reader.read(Frame("SEND", headers, b"1")).message
    first.properties["changed"] = "yes"
    second = reader.read(Frame("SEND", headers, b"2")).message
    assert second.properties == {"k": "v"}
    assert second.id != first.id
    assert second.body == b"2"


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ((("k", "v"),), RemoteProtocolError),
        ((("destination", "/queue/a"), ("priority", "high")), InvalidMessage),
        ((("destination", "/queue/a"), ("priority", "10")), InvalidMessage),
        ((("destination", "/queue/a"), ("persistent", "yes")), InvalidMessage),
        ((("destination", "/queue/a"), ("expiration", "-5")), InvalidMessage),
    ],
)
def test_send_reader_refuses(headers: tuple[tuple[str, str], ...], error: type) -> None:
    reader = SendReader()
    for _ in range(2):  # a refused header tuple is not remembered
        with pytest.raises(error):
            reader.read(Frame("SEND", headers))
