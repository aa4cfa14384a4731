"""Every name DropboxMQ 1.2 wrote reads in chute as DropboxMQ's own consumer read it.

``tests/data/dropboxmq-filenames.jsonl.gz`` holds 12,190 names that DropboxMQ 1.2's
producer and consumers wrote (claim prefixes ``<client id>~`` included), each with
the message DropboxMQ's consumer delivered for it (``dropboxmq_reads``: its id with
JMS's ``ID:``, Java property types and values as Java prints them). The expected side
is always that record, field by field: nothing here derives it from chute's decoder.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any, Final

from chute.dropbox.names import DEFAULT_CLAIM_ROOM, NAME_MAX_BYTES, claim_name, claim_room
from chute.dropbox.transcoder import DecodedName, decode_filename, encode_filename
from chute.message import Message, PropertyType, PropertyValue, property_type

VECTORS: Final = Path(__file__).parents[2] / "data" / "dropboxmq-filenames.jsonl.gz"

JAVA_TYPES: Final = {
    PropertyType.BOOLEAN: "Boolean",
    PropertyType.BYTE: "Byte",
    PropertyType.SHORT: "Short",
    PropertyType.INT: "Integer",
    PropertyType.LONG: "Long",
    PropertyType.FLOAT: "Float",
    PropertyType.DOUBLE: "Double",
    PropertyType.STRING: "String",
}


def _records() -> list[dict[str, Any]]:
    with gzip.open(VECTORS, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


RECORDS: Final = _records()


def _java_value(java_type: str, text: str) -> object:
    """A value as Java printed it, in a form that compares exactly (floats as hex)."""
    if java_type in ("Float", "Double"):
        return float(text).hex()  # Python reads Java's NaN, -Infinity, 1.0E300, -0.0
    if java_type == "Boolean":
        return text == "true"
    if java_type == "String":
        return text
    return int(text)


def _value(value: PropertyValue) -> object:
    return float(value).hex() if isinstance(value, float) else value


def _expected(record: dict[str, Any]) -> dict[str, object]:
    """What DropboxMQ's consumer read, in the shape :func:`_shown` gives chute's reading."""
    reads = record["dropboxmq_reads"]
    count = reads["jmsx_delivery_count"]
    return {
        "id": reads["id"],
        "timestamp": reads["timestamp"],
        "priority": reads["priority"],
        "expiration": reads["expiration"],
        "correlation_id": reads["correlation_id"],
        "reply_to": reads["reply_to"],
        "type": reads["type"],
        # chute has no "no count": a name without one was delivered 0 times before
        "delivery_count": count or 0,
        # DropboxMQ 1.2 never sets JMSRedelivered from a name; chute does when the name
        # says the message was delivered before (a documented difference)
        "redelivered": reads["redelivered"] or bool(count),
        "kind": reads["kind"],
        "properties": {
            name: (java_type, _java_value(java_type, text))
            for name, (java_type, text) in reads["properties"].items()
        },
    }


def _shown(decoded: DecodedName) -> dict[str, object]:
    message = decoded.to_message(b"")
    return {
        "id": message.id,
        "timestamp": message.timestamp,
        "priority": message.priority,
        "expiration": message.expiration,
        "correlation_id": message.correlation_id,
        "reply_to": message.reply_to,
        "type": message.type,
        "delivery_count": message.delivery_count,
        "redelivered": message.redelivered,
        "kind": message.kind.letter,
        "properties": {
            name: (JAVA_TYPES[property_type(value)], _value(value))
            for name, value in message.properties.items()
        },
    }


def _read(record: dict[str, Any]) -> DecodedName:
    """The name decoded when DropboxMQ read it (its time of receipt is the record's
    timestamp: a name whose id holds no time is stamped at receipt)."""
    return decode_filename(record["filename"], now_ms=record["dropboxmq_reads"]["timestamp"])


def _unclaimed(record: dict[str, Any]) -> str:
    name: str = record["filename"]
    return name.split("~", 1)[1] if record["claimed_by"] is not None else name


def _mismatches(pairs: list[tuple[str, dict[str, object], dict[str, object]]]) -> list[str]:
    out = []
    for name, got, want in pairs:
        diff = {k: (got[k], v) for k, v in want.items() if got[k] != v}
        if diff:
            out.append(f"{name}: {diff}")
    return out


def test_the_whole_file_is_read() -> None:
    assert len(RECORDS) == 12_190
    assert sum(r["claimed_by"] is not None for r in RECORDS) == 12_107


def test_every_name_reads_as_dropboxmq_read_it() -> None:
    pairs = [(r["filename"], _shown(_read(r)), _expected(r)) for r in RECORDS]
    assert _mismatches(pairs)[:5] == []


def test_the_claim_prefix_is_understood_not_read_as_the_name() -> None:
    for record in RECORDS:
        decoded = _read(record)
        assert decoded.claimed_by == record["claimed_by"], record["filename"]
        assert decoded.name == record["filename"]


def test_encoding_what_was_read_writes_the_id_field_dropboxmq_wrote() -> None:
    """So a reply correlated with ``JMSMessageID`` (``ID:...``) matches at DropboxMQ."""
    for record in RECORDS:
        unclaimed = _unclaimed(record)
        if record["dropboxmq_reads"]["id"] == "ID:" + unclaimed:
            continue  # a foreign name: it has no id field (the next test covers it)
        name = encode_filename(_read(record).to_message(b""))
        assert name.split(".")[1] == unclaimed.split(".")[1], record["filename"]


def test_every_message_round_trips_and_fits_once_claimed() -> None:
    pairs = []
    for record in RECORDS:
        claimant = record["claimed_by"]
        room = DEFAULT_CLAIM_ROOM if claimant is None else claim_room([claimant])
        message: Message = _read(record).to_message(b"")
        name = encode_filename(message, claim_room=room)  # refused if it would not fit
        again = decode_filename(name, now_ms=record["dropboxmq_reads"]["timestamp"])
        pairs.append((name, _shown(again), _expected(record)))
        counted = again.with_delivery_count(again.delivery_count + 1, claim_room=room)
        claimed = claim_name(claimant or "1795419216341000-0462377156", counted)
        assert len(claimed.encode()) <= NAME_MAX_BYTES
    assert _mismatches(pairs)[:5] == []


def test_floats_are_compared_exactly() -> None:
    """The comparison above tells -0.0 from 0.0 and NaN from any number."""
    assert _java_value("Double", "-0.0") != _java_value("Double", "0.0")
    assert _java_value("Float", "NaN") == _value(math.nan)
