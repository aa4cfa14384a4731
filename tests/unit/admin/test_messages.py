"""A browsed message as the admin API shows it."""

from __future__ import annotations

import base64
import json

from chute.admin.messages import body_view, message_view
from chute.core.model.consumer import Entry
from chute.message import BodyKind, Float, Int, Message


def test_a_text_body_is_text_and_binary_data_base64() -> None:
    assert body_view(b"hello", BodyKind.TEXT) == ("hello", "utf-8", False)
    assert body_view(b"\xff\xfe", BodyKind.TEXT)[1] == "base64"  # text that is not UTF-8
    binary = bytes(range(256))
    assert body_view(binary, BodyKind.BYTES) == (base64.b64encode(binary).decode(), "base64", False)
    assert body_view(b"ab\x00cd", BodyKind.BYTES)[1] == "base64"  # decodes, but a NUL


def test_text_of_any_kind_is_text() -> None:
    # a chute send from standard input: bytes, no content type, clean UTF-8
    assert body_view("line 1\n\tné\r\n".encode(), BodyKind.BYTES) == (
        "line 1\n\tné\r\n",
        "utf-8",
        False,
    )
    # a STOMP application/json message: bytes with a content-type property
    json_type = "application/json;charset=utf-8"
    assert body_view(b'{"a": 1}', BodyKind.BYTES, content_type=json_type)[1] == "utf-8"
    for media in ("text/csv", "application/vnd.api+json", "application/soap+xml"):
        assert body_view(b"x\x01y", BodyKind.BYTES, content_type=media)[1] == "utf-8"
    assert body_view(b"hi", BodyKind.BYTES, content_type="application/octet-stream")[1] == (
        "base64"
    )
    assert body_view(b"hi", BodyKind.OBJECT)[1] == "base64"  # a serialized object
    assert body_view(b"hi", BodyKind.OBJECT, content_type="application/json")[1] == "utf-8"
    message = Message(b'{"id": 7}', properties={"content-type": "application/json"})
    assert message_view(Entry(1, message))["body"] == '{"id": 7}'


def test_a_long_body_is_cut_on_a_character_boundary() -> None:
    body = "é".encode() * 10  # 20 bytes
    assert body_view(body, BodyKind.TEXT, cap=7) == ("ééé", "utf-8", True)
    assert body_view(body, BodyKind.BYTES, cap=7) == ("ééé", "utf-8", True)  # text too
    binary = b"\x00" + body
    assert body_view(binary, BodyKind.BYTES, cap=6) == (
        base64.b64encode(binary[:6]).decode(),
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
