"""A browsed message as the admin API shows it."""

from __future__ import annotations

import base64
import json

from chute.admin.messages import body_view, message_view
from chute.core.consumer import Entry
from chute.message import BodyKind, Float, Int, Message


def test_a_text_body_is_text_and_other_kinds_are_base64() -> None:
    assert body_view(b"hello", BodyKind.TEXT) == ("hello", "utf-8", False)
    assert body_view(b"hello", BodyKind.BYTES) == (
        base64.b64encode(b"hello").decode(),
        "base64",
        False,
    )
    assert body_view(b"\xff\xfe", BodyKind.TEXT)[1] == "base64"  # text that is not UTF-8


def test_a_long_body_is_cut_on_a_character_boundary() -> None:
    body = "é".encode() * 10  # 20 bytes
    assert body_view(body, BodyKind.TEXT, cap=7) == ("ééé", "utf-8", True)
    assert body_view(body, BodyKind.BYTES, cap=6) == (
        base64.b64encode(body[:6]).decode(),
        "base64",
        True,
    )


def test_the_view_is_json_with_the_queues_delivery_fields() -> None:
    message = Message.create(
        "hi",
        properties={"i": Int(3), "f": Float(1.5), "inf": float("-inf"), "b": True},
        correlation_id="c",
    )
    view = message_view(Entry(7, message, delivery_count=2, redelivered=True))
    json.dumps(view, allow_nan=False)  # JSON can carry every value
    assert (view["seq"], view["delivery_count"], view["redelivered"]) == (7, 2, True)
    assert view["properties"] == {"i": 3, "f": 1.5, "inf": "-Infinity", "b": True}
    assert view["property_types"] == {"i": "int", "f": "float", "inf": "double", "b": "boolean"}
    assert (view["body"], view["size"], view["truncated"], view["kind"]) == ("hi", 2, False, "text")
