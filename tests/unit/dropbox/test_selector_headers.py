"""Selectors over DropboxMQ files read JMSMessageID, JMSReplyTo and JMSXDeliveryCount as
DropboxMQ's own consumer does (notes/dropboxmq.md, "Seen when DropboxMQ 1.2's own client
ran"): the id with JMS's ``ID:`` prefix, the reply-to destination's plain name, and NULL
for a name without a delivery count."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest

import chute
from chute.core.model.selector import compile_selector
from chute.dropbox.client import DropboxConnection
from chute.dropbox.layout import init_queue
from chute.dropbox.transcoder import decode_filename

VECTORS = Path(__file__).parents[2] / "data" / "dropboxmq-filenames.jsonl.gz"

# Names as DropboxMQ's producer writes them (and, the second, as its consumer puts a
# rolled-back message back into target/: claim prefix and delivery count included).
PLAIN = "4.1700000000000000-1.T....regionS=eu"
RECOVERED = "javaC~4.1700000000001000-2.T...Qreplies..regionS=eu&JMSXDeliveryCountI=1"
TOPIC_REPLY = "4.1700000000002000-3.T...Tnews%2Eeu..regionS=us"


def open_root(root: Path, client: str = "c1") -> DropboxConnection:
    conn = chute.connect(f"dropbox://{root}?client_id={client}&sync=false")
    assert isinstance(conn, DropboxConnection)
    return conn


def drop(root: Path, queue: str, name: str, body: str) -> None:
    """What a DropboxMQ producer does: write the file in working/, then rename it into target/."""
    layout = init_queue(root, queue)
    (layout.working / name).write_text(body)
    os.rename(layout.working / name, layout.target / name)


def received_ids(root: Path, queue: str, selector: str) -> list[str]:
    """The ids a consumer with ``selector`` takes from ``queue`` (browsing first, so the
    files stay for the next selector)."""
    with open_root(root) as conn, conn.session() as s:
        return sorted(m.id for m in s.browse(queue, selector))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    drop(tmp_path, "orders", PLAIN, "plain")
    drop(tmp_path, "orders", RECOVERED, "recovered")
    drop(tmp_path, "orders", TOPIC_REPLY, "topic reply")
    return tmp_path


def test_jms_message_id_carries_the_id_prefix(root: Path) -> None:
    everything = [
        "ID:1700000000000000-1",
        "ID:1700000000001000-2",
        "ID:1700000000002000-3",
    ]
    assert received_ids(root, "orders", "JMSMessageID LIKE 'ID:%'") == everything
    assert received_ids(root, "orders", "JMSMessageID = 'ID:1700000000001000-2'") == [
        "ID:1700000000001000-2"
    ]
    assert received_ids(root, "orders", "JMSMessageID = '1700000000001000-2'") == []


def test_jms_reply_to_compares_with_the_plain_destination_name(root: Path) -> None:
    assert received_ids(root, "orders", "JMSReplyTo = 'replies'") == ["ID:1700000000001000-2"]
    assert received_ids(root, "orders", "JMSReplyTo = 'news.eu'") == ["ID:1700000000002000-3"]
    assert received_ids(root, "orders", "JMSReplyTo = 'queue:replies'") == []
    assert received_ids(root, "orders", "JMSReplyTo IS NULL") == ["ID:1700000000000000-1"]


def test_jms_x_delivery_count_is_null_on_a_name_without_one(root: Path) -> None:
    assert received_ids(root, "orders", "JMSXDeliveryCount IS NULL") == [
        "ID:1700000000000000-1",
        "ID:1700000000002000-3",
    ]
    assert received_ids(root, "orders", "JMSXDeliveryCount = 1") == ["ID:1700000000001000-2"]
    # NULL compares as unknown: neither side of a test on the count takes an uncounted name
    assert received_ids(root, "orders", "JMSXDeliveryCount >= 0") == ["ID:1700000000001000-2"]
    assert received_ids(root, "orders", "NOT (JMSXDeliveryCount >= 0)") == []


def test_a_consumer_s_selector_takes_only_what_it_matches(root: Path) -> None:
    with open_root(root) as conn, conn.session() as s:
        consumer = s.consumer("orders", selector="JMSReplyTo = 'replies'")
        taken = consumer.receive(timeout=0)
        assert taken is not None
        assert (taken.id, taken.text) == ("ID:1700000000001000-2", "recovered")
        assert consumer.receive(timeout=0) is None
    assert sorted(os.listdir(init_queue(root, "orders").target)) == [PLAIN, TOPIC_REPLY]


def test_a_chute_responder_answers_a_jms_requester(tmp_path: Path) -> None:
    """A DropboxMQ requester sends to ``requests`` with reply-to ``replies`` and waits for a
    reply whose JMSCorrelationID is its JMSMessageID; chute's responder sets the reply's
    correlation id to the request's id as it received it."""
    drop(tmp_path, "requests", "4.1700000000000000-7.T...Qreplies", "ping")
    with open_root(tmp_path, "responder") as conn, conn.session() as s:
        request = s.consumer("requests").receive(timeout=0)
        assert request is not None
        assert request.reply_to == "queue:replies"
        s.send(request.reply_to, "pong", correlation_id=request.id)
    [reply_name] = os.listdir(init_queue(tmp_path, "replies").target)
    # DropboxMQ's reading of the name: the fifth field, URL-decoded, is JMSCorrelationID
    assert unquote_plus(reply_name.split(".")[4]) == "ID:1700000000000000-7"
    requester_selects = "JMSCorrelationID = 'ID:1700000000000000-7'"
    with open_root(tmp_path, "requester") as conn, conn.session() as s:
        reply = s.consumer("replies", selector=requester_selects).receive(timeout=0)
    assert reply is not None
    assert reply.text == "pong"


# -- every name DropboxMQ wrote -----------------------------------------------------------


def vectors() -> Iterator[dict[str, Any]]:
    with gzip.open(VECTORS, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)


def quoted(text: str) -> str:
    """``text`` as a selector's string literal."""
    return "'" + text.replace("'", "''") + "'"


def header_selectors(reads: dict[str, Any]) -> list[str]:
    """Selectors that are TRUE for the message DropboxMQ's consumer read."""
    selectors = [f"JMSMessageID = {quoted(reads['id'])}", "JMSMessageID LIKE 'ID:%'"]
    count = reads["jmsx_delivery_count"]
    if count is None:
        selectors.append("JMSXDeliveryCount IS NULL")
    else:
        selectors.append(f"JMSXDeliveryCount = {count}")
    reply_to = reads["reply_to"]
    if reply_to is None:
        selectors.append("JMSReplyTo IS NULL")
    else:
        _kind, _, name = reply_to.partition(":")
        selectors.append(f"JMSReplyTo = {quoted(name)}")
    if reads["correlation_id"] is not None:
        selectors.append(f"JMSCorrelationID = {quoted(reads['correlation_id'])}")
    return selectors


def test_selectors_agree_with_dropboxmq_on_every_name_it_wrote() -> None:
    checked = 0
    disagreements = []
    for vector in vectors():
        message = decode_filename(vector["filename"]).to_message(b"")
        for selector in header_selectors(vector["dropboxmq_reads"]):
            if not compile_selector(selector).matches(message):
                disagreements.append((vector["filename"], selector))
        checked += 1
    assert checked == 12_190
    assert not disagreements, disagreements[:5]


def test_integer_arithmetic_over_dropboxmq_files_is_javas(tmp_path: Path) -> None:
    # DropboxMQ's consumer selects every third of these with "n / 3 * 3 = n" (Java's
    # integer division); an int property is written nI=..., a long one nL=...
    for n in range(1, 31):
        letter = "I" if n % 2 else "L"
        drop(tmp_path, "orders", f"4.17000000{n:05d}000-{n}.T.....n{letter}={n}", str(n))
    with open_root(tmp_path) as conn, conn.session() as s:
        consumer = s.consumer("orders", selector="n / 3 * 3 = n")
        got = []
        while (message := consumer.receive(timeout=0)) is not None:
            got.append(int(message.text))
    assert sorted(got) == list(range(3, 31, 3))
