"""Record framing and scanning: good frames, zero tails, torn tails, corrupt regions."""

from __future__ import annotations

import pytest

from chute.store.record import HEADER_SIZE, MAGIC, Kind, Scan, checksum, frame

SEGMENT = 7


def frames(payloads: list[bytes], start: int = 0, segment: int = SEGMENT) -> bytes:
    out = b""
    for payload in payloads:
        out += frame(segment, start + len(out), Kind.ACK, payload)
    return out


def scan(data: bytes, segment: int = SEGMENT) -> tuple[list[bytes], Scan]:
    s = Scan(data, segment)
    return [data[start:end] for _, _, start, end in s], s


PAYLOADS = [b"first", b"", b"third" * 10, bytes(range(256))]


def test_good_frames_come_back_in_order() -> None:
    data = frames(PAYLOADS)
    found, s = scan(data)
    assert found == PAYLOADS
    assert s.damage == []
    assert s.end == len(data)


def test_offsets_and_kinds_are_reported() -> None:
    data = frame(SEGMENT, 0, Kind.ADD, b"a") + frame(SEGMENT, HEADER_SIZE + 1, Kind.DEFINE, b"")
    assert [(o, k) for o, k, _, _ in Scan(data, SEGMENT)] == [
        (0, Kind.ADD),
        (HEADER_SIZE + 1, Kind.DEFINE),
    ]


def test_zeros_after_the_last_frame_are_a_clean_end() -> None:
    data = frames(PAYLOADS)
    found, s = scan(data + bytes(5000))
    assert found == PAYLOADS
    assert s.damage == []
    assert s.end == len(data)


def test_the_crc_covers_the_position() -> None:
    """A frame copied to another offset or segment does not check."""
    payload = b"payload"
    good = frame(SEGMENT, 0, Kind.ACK, payload)
    assert scan(good)[0] == [payload]
    assert scan(good, segment=SEGMENT + 1)[0] == []
    assert scan(b"\x01" + good)[0] == []  # one byte later
    assert checksum(SEGMENT, 0, Kind.ACK, payload) != checksum(SEGMENT, 1, Kind.ACK, payload)


@pytest.mark.parametrize("cut", range(1, 40))
def test_a_torn_last_frame_is_a_tail(cut: int) -> None:
    data = frames([b"one", b"two" * 10])
    last = HEADER_SIZE + 3
    torn = data[: min(last + cut, len(data) - 1)]
    found, s = scan(torn)
    assert found == [b"one"]
    assert len(s.damage) == 1
    assert s.damage[0].tail
    assert s.damage[0].offset == last
    assert s.end == last


def test_a_torn_frame_followed_by_zeros_is_a_tail() -> None:
    data = bytearray(frames([b"one", b"two" * 10]) + bytes(100))
    data[HEADER_SIZE + 3 + 20 :] = bytes(len(data) - (HEADER_SIZE + 3 + 20))
    found, s = scan(bytes(data))
    assert found == [b"one"]
    assert [d.tail for d in s.damage] == [True]


@pytest.mark.parametrize("position", range(HEADER_SIZE + 6))
def test_a_corrupt_frame_in_the_middle_is_skipped(position: int) -> None:
    payloads = [b"one", b"middle", b"three", b"four"]
    data = bytearray(frames(payloads))
    start = HEADER_SIZE + 3
    data[start + position] ^= 0x40
    found, s = scan(bytes(data))
    assert found == [b"one", b"three", b"four"]
    assert len(s.damage) == 1
    assert not s.damage[0].tail
    assert s.damage[0].offset == start
    assert s.damage[0].end == start + HEADER_SIZE + 6


def test_garbage_between_frames_is_skipped() -> None:
    first = frame(SEGMENT, 0, Kind.ACK, b"a")
    garbage = b"garbage" + MAGIC + b"more garbage"
    second = frame(SEGMENT, len(first) + len(garbage), Kind.ACK, b"b")
    found, s = scan(first + garbage + second)
    assert found == [b"a", b"b"]
    assert [(d.offset, d.end, d.tail) for d in s.damage] == [
        (len(first), len(first) + len(garbage), False)
    ]


@pytest.mark.parametrize(("segment", "start"), [(SEGMENT, 0), (SEGMENT - 1, HEADER_SIZE)])
def test_frames_inside_a_payload_are_not_resynchronised_to(segment: int, start: int) -> None:
    """A payload holding frames (a journal file sent as a message) is not read as records.

    Frames copied from anywhere else, this segment's start or the same offset
    of an older segment, fail their CRC where they now sit.
    """
    inner = frames([b"inner-1", b"inner-2"], start=start, segment=segment)
    data = bytearray(frame(SEGMENT, 0, Kind.ADD, inner))
    data[1] ^= 0xFF  # break the outer frame's marker
    found, s = scan(bytes(data))
    assert found == []
    assert [d.tail for d in s.damage] == [True]


def test_an_empty_buffer_and_a_short_header() -> None:
    assert scan(b"")[0] == []
    found, s = scan(MAGIC[:3])
    assert found == []
    assert [d.tail for d in s.damage] == [True]
