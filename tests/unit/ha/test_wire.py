"""The replication link's frames: each kind round-trips, split anywhere."""

from __future__ import annotations

import pytest

from chute.ha.wire import (
    Ack,
    Decoder,
    Delete,
    Frame,
    Hello,
    State,
    Truncate,
    Welcome,
    WireError,
    Write,
    encode,
    position,
)

FRAMES: list[Frame] = [
    Hello("backup-1", 7, ((1, 100, 12345), (2, 16, 0))),
    Welcome(9, "live-1"),
    Ack(9, position(3, 4096)),
    Write(9, 3, 16, b"\x00abc" * 100),
    Truncate(9, 3, 16),
    Delete(9, 2),
    State(9, in_sync=True),
    State(9, in_sync=False),
]


def test_every_frame_round_trips_fed_a_byte_at_a_time() -> None:
    data = b"".join(encode(frame) for frame in FRAMES)
    decoder = Decoder()
    got: list[Frame] = []
    for i in range(len(data)):
        got += decoder.feed(data[i : i + 1])
    assert got == FRAMES


def test_positions_order_by_segment_then_offset() -> None:
    assert position(1, 1 << 30) < position(2, 16) < position(2, 17)


def test_an_unknown_kind_or_a_bad_body_is_an_error() -> None:
    with pytest.raises(WireError, match="unknown"):
        Decoder().feed(b"\x00\x00\x00\x01\x63")
    with pytest.raises(WireError, match="bad replication frame"):
        Decoder().feed(b"\x00\x00\x00\x03\x02ab")
    with pytest.raises(WireError, match="frame of 0 bytes"):
        Decoder().feed(b"\x00\x00\x00\x00\x02")
