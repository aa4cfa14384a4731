"""A transaction's ``ops`` payload encodes a run of adds (a ``send_many``, a prepared
chunk) with the names once: the bytes are exactly those of each add encoded alone, so
every reader of the journal (recovery, paging, reclaiming, old releases) reads them."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from chute.content import encode_content
from chute.core.model.store import AckOp, AddOp, TxOp
from chute.message import Message
from chute.store.payload import Names, decode_ops, encode_ack, encode_add, encode_ops

from .helpers import describe, rich_message


def one_by_one(ops: list[TxOp]) -> bytes:
    """The ``ops`` payload as each operation encodes alone (the layout's definition)."""
    parts = [struct.pack(">I", len(ops))]
    for op in ops:
        if isinstance(op, AddOp):
            payload, tag = encode_add(op), 1
        else:
            payload, tag = encode_ack(op), 2
        parts += [struct.pack(">BI", tag, len(payload)), payload]
    return b"".join(parts)


def message(i: int, encoded: bool) -> Message:
    m = rich_message() if i % 5 == 0 else Message(b"x" * i, id=f"m{i}", timestamp=1000 + i)
    m.expiration = i * 7 if i % 3 == 0 else 0
    m.redelivered = i % 4 == 0
    m.delivery_count = i % 3
    if encoded:
        m.encoded = encode_content(m)
    return m


op = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(["stream:s", "queue:q", "topic:t"]),
        st.sampled_from([("stream:s",), ("queue:q",), ("a", "b"), ()]),
        st.booleans(),
    ),
    st.tuples(st.just("ack"), st.sampled_from(["queue:q", "stream:s"]), st.just(()), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=30))
def test_runs_encode_as_each_add_alone(steps: list[tuple[str, str, tuple[str, ...], bool]]) -> None:
    ops: list[TxOp] = []
    for i, (kind, destination, queues, encoded) in enumerate(steps):
        if kind == "add":
            ops.append(AddOp(destination, queues, 100 + i, message(i, bool(encoded))))
        else:
            ops.append(AckOp(destination, 50 + i))
    data = encode_ops(ops)
    assert data == one_by_one(ops)
    back = decode_ops(data, 0, len(data), Names())
    assert [type(o) for o in back] == [type(o) for o in ops]
    for got, want in zip(back, ops, strict=True):
        if isinstance(got, AddOp) and isinstance(want, AddOp):
            assert (got.destination, got.queues, got.seq) == (
                want.destination,
                want.queues,
                want.seq,
            )
            assert describe(got.message) == describe(want.message)
