"""Arrow batches into SendMany packets (chute.spark.framing): what the broker decodes is
what ``send_many`` of each body would send, cut within SendMany's limits."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute.client.outgoing import SEND_MANY_BYTES
from chute.message import DEFAULT_PRIORITY, GENERATED_ID_SIZE, BodyKind, Message
from chute.protocol import Header, PacketType, decode_body
from chute.protocol.packets import SEND_MANY_MAX, SendMany
from chute.protocol.spec import HEADER_SIZE
from chute.protocol.splice import encode_send_many_framed
from chute.spark.framing import framed, packets, plain

BODIES = st.lists(st.none() | st.binary(max_size=300), max_size=60)


def decoded(batch: pa.RecordBatch, max_bytes: int = SEND_MANY_BYTES) -> list[list[Message]]:
    """The messages of each packet ``batch`` becomes, as the broker decodes them."""
    out = []
    for packet in packets(framed(batch), max_bytes=max_bytes):
        data = encode_send_many_framed(3, b"stream:s", packet.entries, packet.framed)
        sent = decode_body(PacketType.SEND_MANY, Header(), data, HEADER_SIZE, len(data), 100)
        assert isinstance(sent, SendMany)
        assert sent.address == "stream:s"
        assert len(sent.messages) == packet.entries
        assert packet.body_bytes == sum(len(m.body) for m in sent.messages)
        out.append(list(sent.messages))
    return out


@settings(max_examples=60, deadline=None)
@given(BODIES, st.integers(1, 2000))
def test_bodies_arrive_as_send_many_sends_them(bodies: list[bytes | None], cut: int) -> None:
    batch = pa.record_batch({"body": pa.array(bodies, pa.binary())})
    runs = decoded(batch, max_bytes=cut)
    messages = [m for run in runs for m in run]
    assert [m.body for m in messages] == [b or b"" for b in bodies]
    for m in messages:
        assert (m.kind, m.priority, m.persistent) == (BodyKind.BYTES, DEFAULT_PRIORITY, True)
        assert (m.correlation_id, m.reply_to, m.type, m.properties) == (None, None, None, {})
        assert len(m.id) == GENERATED_ID_SIZE
        assert int(m.id, 16) >= 0
    assert len({m.id for m in messages}) == len(messages)
    for run in runs:  # within the limit, or one message alone
        framed_bytes = sum(4 + len(m.encoded or b"") for m in run)
        assert framed_bytes <= cut or len(run) == 1


def test_a_text_body_is_text() -> None:
    batch = pa.record_batch({"body": pa.array(["héllo", None], pa.string())})
    (run,) = decoded(batch)
    assert [(m.body, m.kind) for m in run] == [
        ("héllo".encode(), BodyKind.TEXT),
        (b"", BodyKind.TEXT),
    ]


def test_packets_hold_at_most_send_many_max() -> None:
    batch = pa.record_batch({"body": pa.array([b"x"] * (2 * SEND_MANY_MAX + 5), pa.binary())})
    assert [p.entries for p in packets(framed(batch))] == [SEND_MANY_MAX, SEND_MANY_MAX, 5]


def test_ids_are_new_for_every_batch() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", b"b"], pa.binary())})
    first = [m.id for run in decoded(batch) for m in run]
    second = [m.id for run in decoded(batch) for m in run]
    assert not set(first) & set(second)


def test_a_slice_of_a_batch_frames_its_own_rows() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", b"bb", b"ccc", b"dddd"], pa.binary())})
    (run,) = decoded(batch.slice(1, 2))
    assert [m.body for m in run] == [b"bb", b"ccc"]


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"body": pa.array([b"a"])}, True),
        ({"body": pa.array(["a"])}, True),
        ({"body": pa.array(["a", None])}, False),  # a null text body is sent as bytes
        ({"body": pa.array([b"a", None])}, True),
        ({"body": pa.array([b"a"]), "other": pa.array([1])}, True),  # not the sink's
        ({"body": pa.array([b"a"]), "key": pa.nulls(1, pa.string())}, True),
        ({"body": pa.array([b"a"]), "key": pa.array(["k"])}, False),
        ({"body": pa.array([b"a"]), "priority": pa.array([7])}, False),
        ({"body": pa.array([b"a"]), "destination": pa.array(["queue:q"])}, False),
        ({"body": pa.array([1])}, False),
        ({"other": pa.array([b"a"])}, False),
    ],
)
def test_plain_batches_set_only_their_bodies(columns: dict[str, pa.Array], expected: bool) -> None:
    assert plain(pa.record_batch(columns)) is expected
