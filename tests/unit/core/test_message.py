"""The message model (DESIGN.md "The message")."""

from __future__ import annotations

import os
import re
import threading
from typing import Any

import pytest

from chute.core.model.consumer import AckMode
from chute.core.operations import looking
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.errors import InvalidMessage
from chute.message import (
    GENERATED_ID_SIZE,
    BodyKind,
    Byte,
    Float,
    Int,
    Long,
    Message,
    PropertyType,
    Short,
    check_properties,
    new_message_id,
    now_ms,
    property_type,
    typed_value,
)

from .helpers import FakeClock, Recorder


def test_defaults_follow_the_design_table() -> None:
    m = Message.create()
    assert re.fullmatch(r"[0-9a-f]{32}", m.id)
    assert m.priority == 4
    assert m.timestamp == 0  # set when the broker accepts it
    assert m.expiration == 0
    assert m.correlation_id is None
    assert m.reply_to is None
    assert m.type is None
    assert m.persistent is True
    assert m.redelivered is False
    assert m.delivery_count == 0
    assert m.properties == {}
    assert m.kind is BodyKind.BYTES
    assert m.body == b""


def test_generated_ids_are_unique_and_time_ordered() -> None:
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    ms = int(ids[0][:12], 16)
    assert abs(ms - now_ms()) < 60_000


def test_the_bytes_and_str_forms_come_from_one_sequence() -> None:
    a, b, c = new_message_id(), new_message_id.next_bytes(), new_message_id()
    assert len(b) == GENERATED_ID_SIZE
    assert a < b.decode() < c
    assert a[12:20] == b[12:20].decode() == c[12:20]  # one process: one random part


def test_threads_never_share_an_id() -> None:
    out: list[list[bytes]] = [[] for _ in range(4)]

    def make(into: list[bytes]) -> None:
        into.extend(new_message_id.next_bytes() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(ids,)) for ids in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids in out for i in ids]
    assert len(set(every)) == len(every)


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    read, write = os.pipe()
    parent_next = new_message_id()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_message_id.next_bytes())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    assert len(child) == GENERATED_ID_SIZE
    assert child[12:20] != parent_next[12:20]  # the child drew its own random part


def test_a_producer_may_choose_the_id() -> None:
    assert Message.create(id="order-17").id == "order-17"


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\nb", "nul\x00"])
def test_bad_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidMessage):
        Message.create(id=bad)


@pytest.mark.parametrize("priority", [0, 9])
def test_priority_bounds_are_allowed(priority: int) -> None:
    assert Message.create(priority=priority).priority == priority


@pytest.mark.parametrize("bad", [-1, 10, True, 4.0, "4"])
def test_bad_priorities_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidMessage):
        Message.create(priority=bad)


def test_a_text_body_is_utf8_and_makes_a_text_message() -> None:
    m = Message.create("grüß")
    assert m.kind is BodyKind.TEXT
    assert m.body == "grüß".encode()
    assert m.text == "grüß"
    assert Message.create("{}", kind=BodyKind.MAP).kind is BodyKind.MAP
    assert Message.create(bytearray(b"ab")).body == b"ab"


def test_a_body_must_be_bytes_or_text() -> None:
    with pytest.raises(InvalidMessage):
        Message.create(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["correlation_id", "reply_to", "type"])
def test_string_headers_must_be_strings(field: str) -> None:
    fields: dict[str, Any] = {field: 5}
    with pytest.raises(InvalidMessage):
        Message.create(**fields)


def test_negative_ttl_or_expiration_is_refused() -> None:
    with pytest.raises(InvalidMessage):
        Message.create(ttl=-1)
    with pytest.raises(InvalidMessage):
        Message.create(expiration=-1)


def test_ttl_given_to_create_becomes_an_expiration() -> None:
    before = now_ms()
    m = Message.create(ttl=5000)
    assert before + 5000 <= m.expiration <= now_ms() + 5000
    assert Message.create(expiration=123).expiration == 123
    with pytest.raises(InvalidMessage):
        Message.create(ttl=1, expiration=123)


def test_the_broker_turns_ttl_into_an_expiration_by_its_clock(
    broker: Broker, clock: FakeClock
) -> None:
    s = BrokerConnection(broker).session()
    s.send("queue:q", Message.create(b"a"), ttl=1000)
    s.send("queue:q", Message.create(b"b"))
    a, b = looking.browse(broker, "queue:q")
    assert a.message.timestamp == clock.now
    assert a.message.expiration == clock.now + 1000
    assert b.message.expiration == 0


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, PropertyType.BOOLEAN),
        (Byte(-128), PropertyType.BYTE),
        (Short(300), PropertyType.SHORT),
        (Int(70_000), PropertyType.INT),
        (Long(1 << 40), PropertyType.LONG),
        (1 << 40, PropertyType.LONG),
        (Float(1.5), PropertyType.FLOAT),
        (1.5, PropertyType.DOUBLE),
        ("s", PropertyType.STRING),
    ],
)
def test_properties_keep_their_jms_type(value: Any, kind: PropertyType) -> None:
    assert property_type(value) is kind
    again = typed_value(kind, value)
    assert again == value
    assert property_type(again) is kind
    m = Message.create(properties={"p": value})
    assert property_type(m.properties["p"]) is kind


@pytest.mark.parametrize(
    "make",
    [lambda: Byte(128), lambda: Short(-40_000), lambda: Int(1 << 31), lambda: Long(1 << 63)],
)
def test_narrow_integers_are_range_checked(make: Any) -> None:
    with pytest.raises(InvalidMessage):
        make()


@pytest.mark.parametrize("bad", [None, [1], b"bytes", {"a": 1}, 1 << 64])
def test_non_jms_property_values_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidMessage):
        Message.create(properties={"p": bad})


@pytest.mark.parametrize("name", ["", "x" * 257])
def test_bad_property_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidMessage):
        check_properties({name: 1})


def test_replace_copies_and_leaves_the_original_alone() -> None:
    m = Message.create(b"body", priority=7, properties={"a": 1})
    m.encoded = b"wire"
    copy = m.replace(redelivered=True, delivery_count=2)
    assert copy.redelivered
    assert copy.delivery_count == 2
    assert not m.redelivered
    assert m.delivery_count == 0
    assert copy.id == m.id
    assert copy.priority == 7
    assert copy.body == b"body"
    assert copy.encoded is None
    copy.properties["b"] = 2
    assert m.properties == {"a": 1}
    assert m.replace() == m


def test_size_counts_body_and_properties() -> None:
    small = Message.create(b"")
    big = Message.create(b"x" * 100, properties={"name": "value"})
    assert small.size > 0
    assert big.size == small.size + 100 + len("name") + len("value")


def test_expiry_is_inclusive_and_zero_means_never() -> None:
    m = Message.create(expiration=1000)
    assert not m.is_expired(999)
    assert m.is_expired(1000)
    assert not Message.create().is_expired(1 << 60)


def test_body_kind_letters_round_trip() -> None:
    assert [k.letter for k in BodyKind] == ["M", "B", "T", "P", "S", "O"]
    for kind in BodyKind:
        assert BodyKind.from_letter(kind.letter) is kind
    with pytest.raises(InvalidMessage):
        BodyKind.from_letter("Z")


def test_to_json_keeps_types_and_encodes_binary_bodies() -> None:
    text = Message.create("hi", properties={"n": Short(3), "f": 1.0}).to_json()
    assert text["body"] == "hi"
    assert text["kind"] == "text"
    assert text["property_types"] == {"n": "short", "f": "double"}
    binary = Message.create(b"\xff\x00").to_json()
    assert binary["body_base64"] == "/wA="
    assert "body" not in binary


def test_an_object_body_stays_opaque_bytes(broker: Broker) -> None:
    payload = b"\x80\x04\x95 not unpickled"
    s = BrokerConnection(broker).session(AckMode.AUTO)
    r = Recorder()
    s.consumer(1, "queue:q", r)
    s.send("queue:q", Message.create(payload, kind=BodyKind.OBJECT))
    [entry] = r.entries
    assert entry.message.body == payload
    assert entry.message.kind is BodyKind.OBJECT
