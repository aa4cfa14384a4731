"""Names as a real DropboxMQ 1.2 client leaves them, over real dropbox directories.

- DropboxMQ's consumer puts a recovered or rolled-back file back into ``target/`` as
  ``<client id>~<name with JMSXDeliveryCountI=n>``, operators re-drive ``error/``
  files that way, and any reader drops everything up to the first ``~``.
- DropboxMQ's only name limit is the filesystem's 255 bytes for the claimed name;
  realistic messages make names of 200-230 bytes.
- DropboxMQ refuses a property name that is not a Java identifier, and drops every
  property after it: such names are not written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from chute.dropbox.names import claim_room, split_claim_name
from chute.dropbox.queue import ConsumerOptions, QueueConsumer, QueueProducer
from chute.dropbox.transcoder import encode_filename
from chute.errors import InvalidMessage
from chute.message import BodyKind, Byte, Float, Int, Message, Short, now_ms

# A name DropboxMQ's consumer "javaC" recovered into target/ after one delivery.
RECOVERED = (
    "javaC~7.1795418162369000-0340358224.B...Tnews%2Eeu.Order%2Ev1."
    "bB=false&rS=base&JMSXDeliveryCountI=1&lL=9223372036854775807"
)


def put(directory: Path, name: str, body: bytes = b"body") -> None:
    (directory / name).write_bytes(body)


def test_a_file_recovered_by_dropboxmq_is_read_as_its_message(tmp_path: Path) -> None:
    consumer = QueueConsumer(tmp_path, "orders", "chuteC")
    put(consumer.layout.target, RECOVERED)
    delivery = consumer.receive()
    assert delivery is not None
    m = delivery.message
    assert (m.id, m.priority, m.timestamp) == (
        "ID:1795418162369000-0340358224",
        7,
        1795418162369,
    )
    assert (m.kind, m.reply_to, m.type) == (BodyKind.BYTES, "topic:news.eu", "Order.v1")
    assert m.properties == {"b": False, "r": "base", "l": 9223372036854775807}
    assert m.redelivered  # its name says it was delivered before
    assert m.delivery_count == 1  # deliveries before this one
    # claimed under this consumer's prefix only, not stacked on javaC's
    (claimed,) = os.listdir(consumer.layout.processing)
    assert split_claim_name(claimed) == ("chuteC", RECOVERED.split("~", 1)[1])


def test_an_expired_message_put_back_by_dropboxmq_is_not_delivered(tmp_path: Path) -> None:
    consumer = QueueConsumer(tmp_path, "orders", "chuteC")
    expired = f"javaC~4.1795418161834000-1189107306.T.{now_ms() - 1000}.....JMSXDeliveryCountI=1"
    put(consumer.layout.target, expired)
    assert consumer.receive() is None
    assert [split_claim_name(n)[1] for n in os.listdir(consumer.layout.expired)] == [
        expired.split("~", 1)[1]
    ]


def test_chutes_own_error_file_moved_back_to_target_is_redelivered(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "orders")
    producer.send(Message(b"x", id="ID:a-1", priority=8, expiration=now_ms() + 60_000))
    first = QueueConsumer(tmp_path, "orders", "first")
    delivery = first.receive()
    assert delivery is not None
    in_error = first.reject(delivery)
    os.rename(in_error, first.layout.target / in_error.name)  # an operator re-drives it
    again = QueueConsumer(tmp_path, "orders", "second").receive()
    assert again is not None
    assert (again.message.id, again.message.priority) == ("ID:a-1", 8)
    assert again.message.expiration == delivery.message.expiration
    assert again.message.redelivered
    assert again.message.delivery_count == 1


def realistic(**fields: object) -> Message:
    """What DropboxMQ's own producers write: ten typed properties, a correlation id,
    a reply-to and a JMS type (a name of about 220 bytes)."""
    properties = {
        "b": True,
        "r": "base",
        "s": "a.b&c=d~e%f/g+ é€",
        "d": 220.75,
        "f": Float(110.375),
        "h": Short(12671),
        "y": Byte(-13),
        "i": Int(883002649),
        "l": 883000006181,
        "n": Int(883),
    }
    base: dict[str, object] = {
        "correlation_id": "c-883.x",
        "reply_to": "topic:news.eu",
        "type": "Order.v1",
        "properties": properties,
    }
    base.update(fields)
    return Message(b"x", **base)  # type: ignore[arg-type]


def test_a_realistic_name_is_written_claimed_and_redelivered(tmp_path: Path) -> None:
    producer = QueueProducer(tmp_path, "orders", claim_room=claim_room(["javaC"]))
    name = producer.send(realistic())
    assert len(name) > 200
    consumer = QueueConsumer(
        tmp_path, "orders", "javaC", options=ConsumerOptions(redelivery_attempts=12)
    )
    for before in range(13):  # twelve redeliveries, the count growing to two digits
        delivery = consumer.receive()
        assert delivery is not None
        assert delivery.message.delivery_count == before
        consumer.recover(delivery)
    assert len(os.listdir(consumer.layout.error)) == 1  # the thirteenth: attempts spent
    assert os.listdir(consumer.layout.target) == []


def test_a_name_too_long_for_the_claimants_is_refused_at_send(tmp_path: Path) -> None:
    long_id = "c" * 47
    producer = QueueProducer(tmp_path, "orders", claim_room=claim_room([long_id]))
    with pytest.raises(InvalidMessage, match="must fit 255 bytes"):
        producer.send(realistic(correlation_id="c-883.x" + "c" * 12))
    assert os.listdir(producer.layout.target) == []
    assert os.listdir(producer.layout.working) == []


def test_a_name_too_long_for_this_consumer_goes_to_error_intact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Written for short client ids, met by a consumer with a long one: kept, said."""
    producer = QueueProducer(tmp_path, "orders", claim_room=claim_room(["javaC"]))
    name = producer.send(realistic(correlation_id="c-883.x" + "c" * 12))
    assert len(name) + len("c" * 47 + "~") > 255
    consumer = QueueConsumer(tmp_path, "orders", "c" * 47)
    with caplog.at_level(logging.WARNING, "chute.dropbox"):
        assert consumer.receive() is None
    assert os.listdir(consumer.layout.error) == [name]
    assert "over the filesystem's 255" in caplog.text
    assert "move it back to target/" in caplog.text


def test_property_names_dropboxmq_cannot_read_are_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    producer = QueueProducer(tmp_path, "orders")
    stomp_text = Message(
        b"hi",
        id="ID:s-1",
        kind=BodyKind.TEXT,
        properties={"content-type": "text/plain", "after": Int(1)},
    )
    with caplog.at_level(logging.WARNING, "chute.dropbox"):
        name = producer.send(stomp_text)
    assert "content-type" not in name
    assert caplog.text == ""  # the body kind says what content-type said
    assert producer.lost_properties == 0
    with caplog.at_level(logging.WARNING, "chute.dropbox"):
        producer.send(Message(b"", id="ID:s-2", properties={"x-trace": "1", "ok": "2"}))
        producer.send(Message(b"", id="ID:s-3", properties={"x-trace": "3", "y.z": "4"}))
    assert producer.lost_properties == 3
    assert caplog.text.count("not a Java identifier") == 1
    consumer = QueueConsumer(tmp_path, "orders", "c")
    got = {}
    while (delivery := consumer.receive()) is not None:
        got[delivery.message.id] = delivery.message.properties
    assert got == {"ID:s-1": {"after": 1}, "ID:s-2": {"ok": "2"}, "ID:s-3": {}}


def test_a_name_with_no_room_left_for_a_count_is_acked_as_it_is_and_not_redelivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A name that fits its claim exactly (as DropboxMQ allows) has no room for a
    delivery count: acked, it keeps its name; recovered, it goes to error/ (a
    redelivery without its count could never reach the redelivery limit)."""
    producer = QueueProducer(tmp_path, "orders", claim_room=claim_room(["javaC"]))
    base = realistic(id="1700000000000000-1", correlation_id="c")
    pad = 255 - len("javaC~") - len(encode_filename(base, claim_room=0))
    names = [
        producer.send(realistic(id=f"{1700000000000000 + i}-1", correlation_id="c" * (1 + pad)))
        for i in range(2)
    ]
    assert {len("javaC~" + n) for n in names} == {255}
    consumer = QueueConsumer(
        tmp_path, "orders", "javaC", options=ConsumerOptions(redelivery_attempts=5)
    )
    first = consumer.receive()
    assert first is not None
    consumer.ack(first)
    assert os.listdir(consumer.layout.processed) == ["javaC~" + first.decoded.name]
    second = consumer.receive()
    assert second is not None
    with caplog.at_level(logging.WARNING, "chute.dropbox"):
        consumer.recover(second)
    assert os.listdir(consumer.layout.error) == ["javaC~" + second.decoded.name]
    assert "no room in the name for a delivery count" in caplog.text
