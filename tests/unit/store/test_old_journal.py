"""A journal written by the release before record batches is read by this one, exactly."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from chute.core.operations.connection import BrokerConnection
from tests.unit.store.old_journal import ARCHIVE, EXPECTED, describe_broker, open_broker


def unpack(tmp_path: Path) -> Path:
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "journal"


def test_the_previous_release_s_journal_is_recovered_exactly(tmp_path: Path) -> None:
    journal, broker = open_broker(unpack(tmp_path))
    try:
        assert describe_broker(broker) == json.loads(EXPECTED.read_text())
    finally:
        journal.close()


def test_it_goes_on_from_there_and_is_recovered_again(tmp_path: Path) -> None:
    directory = unpack(tmp_path)
    journal, broker = open_broker(directory)
    try:
        stream = broker.streams["stream:s"]
        next_seq = stream.next_seq
        session = BrokerConnection(broker).session()
        session.send_many("stream:s", [stream.read(1, 4)[1][0].message] * 3)
        broker.xa.commit("xid-open")
        assert stream.head == next_seq + 3
        before = describe_broker(broker)
        journal.flush()
    finally:
        journal.close()
    journal, broker = open_broker(directory)
    try:
        assert describe_broker(broker) == before
    finally:
        journal.close()
