"""A journal written by the release before record batches, and what recovering it gives.

:func:`write` made ``tests/data/journal-v1.tar.gz`` with the code of that release (a
queue, a topic with a durable subscription, a topic cursor, streams sent to one by one,
with ``send_many`` and in transactions, a prepared transaction left open, a sink's
committed batch, acks and retention); :func:`describe_broker` made
``tests/data/journal-v1.json`` from the broker that recovered it. The new code must
recover the same (``test_old_journal.py``). Run as a script to make both again: only
ever with the release whose format the files stand for.
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.settings import DestinationSettings, SettingsResolver
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.broker import Broker
from chute.message import Int, Message
from chute.store.journal import Journal

DATA = Path(__file__).resolve().parents[2] / "data"
ARCHIVE = DATA / "journal-v1.tar.gz"
EXPECTED = DATA / "journal-v1.json"
START = 1_700_000_000_000
SETTINGS = {"stream:kept": DestinationSettings(max_messages=50)}


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        self.now += 1
        return self.now


class Taker:
    def __init__(self) -> None:
        self.got: list[Entry] = []

    def handle(self, consumer: BrokerConsumer, entry: Entry) -> None:
        self.got.append(entry)


def open_broker(directory: Path) -> tuple[Journal, Broker]:
    journal = Journal(directory, sync="never", segment_size=64 << 10)
    broker = Broker(journal, SettingsResolver(SETTINGS), clock=Clock())
    broker.recover()
    return journal, broker


def _message(i: int, tag: str) -> Message:
    return Message.create(
        f"{tag}-{i}".encode() * (1 + i % 7),
        properties={"i": Int(i), "tag": tag},
        type="t" if i % 2 else None,
    )


def write(directory: Path) -> None:
    """Fill a journal in ``directory`` with every kind of record the release writes."""
    journal, broker = open_broker(directory)
    session = BrokerConnection(broker).session()
    for i in range(30):
        session.send("queue:orders", _message(i, "q"))
    for i in range(200):  # the stream's older messages are paged (read back from the store)
        session.send("stream:s", _message(i, "s"))
    session.send_many("stream:s", [_message(i, "many") for i in range(200, 260)])
    session.send_many("queue:orders", [_message(i, "qm") for i in range(30, 40)])
    for i in range(120):  # retention removes the oldest 70
        session.send("stream:kept", _message(i, "k"))
    # a topic with a durable subscription and a cursor
    taker = Taker()
    sub = BrokerConnection(broker, client_id="app").session(AckMode.CLIENT)
    consumer = sub.consumer(1, "topic:news", taker, subscription="sub1", durable=True)
    sub.close_consumer(consumer)
    head = broker.cursors.open("topic:news", "c1")[1]
    for i in range(12):
        session.send("topic:news", _message(i, "n"))
    broker.cursors.ack("topic:news", "c1", head + 8)
    # a queue consumer acks some
    reader = BrokerConnection(broker).session(AckMode.CLIENT)
    taker = Taker()
    consumer = reader.consumer(2, "queue:orders", taker, prefetch=10)
    reader.ack(consumer, taker.got[4].seq)
    reader.close_consumer(consumer)
    # transactions: one committed, one prepared and left open
    tx = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    for i in range(5):
        tx.send("stream:s", _message(i, "tx"))
        tx.send("queue:orders", _message(i, "txq"))
    tx.commit()
    tx.send("stream:s", _message(0, "prepared"))
    tx.send("queue:orders", _message(1, "prepared"))
    tx.prepare("xid-open")
    for i in range(3):
        session.send("stream:s", _message(i, "after"))
    # a sink's batch, committed through its marker
    sink = BrokerConnection(broker).session(AckMode.CLIENT, transacted=True)
    sink.send_many("stream:s", [_message(i, "sink") for i in range(8)])
    sink.prepare("sink-1-0")
    broker.batches.commit("sink-1", 0, ("sink-1-0",))
    journal.flush()
    journal.close()


def describe_message(message: Message) -> dict[str, Any]:
    out = message.to_json()
    out["size"] = message.size
    return out


def describe_broker(broker: Broker) -> dict[str, Any]:
    """What a recovered broker holds, as JSON: every queue's and stream's messages with
    their numbers, the subscriptions, cursors and prepared transactions."""
    store = broker.store
    queues: dict[str, Any] = {}
    for name in sorted(broker.queues):
        stored = store.page_in(name, 0, 1 << 20)
        queues[name] = [[s.seq, describe_message(s.message)] for s in stored]
    streams: dict[str, Any] = {}
    for address in sorted(broker.streams):
        stream = broker.streams[address]
        entries = store.page_in(address, 0, 1 << 20)  # past the head too
        streams[address] = {
            "first": stream.first,
            "head": stream.head,
            "next_seq": stream.next_seq,
            "count": stream.count,
            "bytes": stream.bytes,
            "messages": [[e.seq, describe_message(e.message)] for e in entries],
            "read": [e.seq for e in stream.read(stream.first, stream.head)[1]],
        }
    topics = {
        address: {
            key: [[s.seq, s.message.body.decode()] for s in store.page_in(key, 0, 1 << 20)]
            for key in sorted(topic.subscriptions)
        }
        for address, topic in sorted(broker.topics.items())
    }
    return {
        "queues": queues,
        "streams": streams,
        "topics": topics,
        "cursors": sorted(f"{c.address} {c.name}" for c in broker.cursors.all()),
        "prepared": sorted(broker.xa.xids()),
    }


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "journal"
        write(directory)
        with tarfile.open(ARCHIVE, "w:gz") as archive:
            archive.add(directory, arcname="journal")
        journal, broker = open_broker(directory)
        try:
            EXPECTED.write_text(json.dumps(describe_broker(broker), indent=1) + "\n")
        finally:
            journal.close()
    sys.stdout.write(f"wrote {ARCHIVE} and {EXPECTED}\n")


if __name__ == "__main__":
    main()
