"""Streams with partitions (chute.core.rules.partitions): sends routed by key or in turn,
readers of one partition and of every partition."""

from __future__ import annotations

import zlib

import pytest

from chute.core.model.address import canonical, split_partition
from chute.core.model.consumer import AckMode, BrokerConsumer, Entry
from chute.core.model.settings import DestinationSettings, SettingsResolver, settings_from_mapping
from chute.core.model.stream import Stream
from chute.core.operations.connection import BrokerConnection
from chute.core.operations.session import BrokerSession
from chute.core.rules.broker import Broker
from chute.core.rules.partitions import OFFSET_PROPERTY, PARTITION_PROPERTY, pick
from chute.errors import ConfigError, InvalidAddress
from chute.message import Message

from .helpers import FakeClock, Recorder, make_broker, msg, restart, stored

S = "stream:orders"


@pytest.fixture
def broker() -> Broker:
    return make_broker({S: DestinationSettings(partitions=3)}, clock=FakeClock())


def send(broker: Broker, n: int, *, key: str | None = None, start: int = 0) -> None:
    session = BrokerConnection(broker).session()
    for i in range(start, start + n):
        session.send(S, msg(f"m{i}", key=key))


def kept(broker: Broker) -> list[list[bytes]]:
    """What each partition's stream keeps, partition 0 first."""
    return [stored(broker, a) for a in (S, f"{S}#1", f"{S}#2")]


def read(
    session: BrokerSession, address: str, offset: str | int | None = "first"
) -> tuple[BrokerConsumer, Recorder]:
    recorder = Recorder()
    consumer = session.consumer(
        1, address, recorder, prefetch=1000, offset=offset, ack_mode=AckMode.CLIENT
    )
    return consumer, recorder


def said(entry: Entry) -> tuple[int, int, bytes]:
    """(partition, offset, body) as a reader hands a message on."""
    props = entry.message.properties
    return int(props[PARTITION_PROPERTY]), int(props[OFFSET_PROPERTY]), entry.message.body


# -- addresses and settings ---------------------------------------------------------------


def test_a_partition_has_its_own_address_and_partition_0_is_the_stream() -> None:
    assert canonical("stream:orders#2") == "stream:orders#2"
    assert canonical("/stream/orders#2") == "stream:orders#2"
    assert canonical("stream:orders#0") == S
    assert split_partition("stream:orders#2") == (S, 2)
    assert split_partition(S) == (S, 0)
    for bad in ("stream:orders#", "stream:orders#x", "stream:orders#-1", "stream:o#1#2"):
        with pytest.raises(InvalidAddress):
            canonical(bad)
    with pytest.raises(InvalidAddress):
        canonical("queue:orders#1")  # queues have no partitions


def test_partitions_is_a_setting_and_a_partition_has_its_streams_settings() -> None:
    assert settings_from_mapping({"partitions": 4}, where="x") == {"partitions": 4}
    for bad in (0, -1, True, "2", 5000):
        with pytest.raises(ConfigError, match="partitions"):
            settings_from_mapping({"partitions": bad}, where="x")
    resolver = SettingsResolver({"stream:orders": DestinationSettings(partitions=4, max_bytes=9)})
    assert resolver("stream:orders#3") == resolver(S)
    assert DestinationSettings().partitions == 1


def test_a_partition_the_stream_does_not_have_is_refused(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    with pytest.raises(InvalidAddress, match="has 3"):
        session.send(f"{S}#3", msg("x"))
    with pytest.raises(InvalidAddress, match="has 1"):
        session.send("stream:plain#1", msg("x"))


# -- sends --------------------------------------------------------------------------------


def test_pick_hashes_a_key_and_takes_turns_without_one() -> None:
    assert [pick(None, 3, t) for t in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert pick("alice", 3, 0) == pick("alice", 3, 5) == zlib.crc32(b"alice") % 3
    assert pick("anything", 1, 9) == 0


def test_messages_with_a_key_all_go_to_its_partition(broker: Broker) -> None:
    send(broker, 5, key="alice")
    send(broker, 4, key="bob", start=5)
    where = kept(broker)
    alice, bob = zlib.crc32(b"alice") % 3, zlib.crc32(b"bob") % 3
    assert [m for m in where[alice] if m < b"m5"] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m for m in where[bob] if m >= b"m5"] == [b"m5", b"m6", b"m7", b"m8"]
    assert sum(map(len, where)) == 9


def test_messages_without_a_key_go_round_robin(broker: Broker) -> None:
    send(broker, 7)
    assert kept(broker) == [[b"m0", b"m3", b"m6"], [b"m1", b"m4"], [b"m2", b"m5"]]


def test_each_partition_has_its_own_offsets(broker: Broker) -> None:
    send(broker, 6)
    for address in (S, f"{S}#1", f"{S}#2"):
        stream = broker.streams[address]
        assert (stream.first, stream.head) == (1, 3)


def test_a_send_to_a_partition_stays_there(broker: Broker) -> None:
    session = BrokerConnection(broker).session()
    for i in range(3):
        session.send(f"{S}#2", msg(f"m{i}", key="alice"))
    assert kept(broker) == [[], [], [b"m0", b"m1", b"m2"]]


def test_one_partition_behaves_as_a_stream_always_did() -> None:
    broker = make_broker(clock=FakeClock())
    session = BrokerConnection(broker).session()
    for i in range(3):
        session.send(S, msg(f"m{i}", key=f"k{i}"))
    assert stored(broker, S) == [b"m0", b"m1", b"m2"]
    assert list(broker.streams) == [S]
    _, recorder = read(session, S)
    assert [e.seq for e in recorder.entries] == [1, 2, 3]
    assert all(PARTITION_PROPERTY not in e.message.properties for e in recorder.entries)


def test_a_stream_that_gains_partitions_keeps_its_data_in_partition_0() -> None:
    before = make_broker(clock=FakeClock())
    send(before, 4)
    assert stored(before, S) == [b"m0", b"m1", b"m2", b"m3"]
    after = Broker(
        before.store,
        SettingsResolver({S: DestinationSettings(partitions=2)}),
        clock=before.clock,
    )
    after.recover()
    send(after, 2, start=4)
    assert stored(after, S) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert stored(after, f"{S}#1") == [b"m5"]
    stream = after.streams[S]
    assert isinstance(stream, Stream)
    assert (stream.first, stream.head) == (1, 6)


# -- readers ------------------------------------------------------------------------------


def test_a_reader_of_one_partition_reads_it_and_says_its_partition(broker: Broker) -> None:
    send(broker, 9)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    _, recorder = read(session, f"{S}#1")
    assert [said(e) for e in recorder.entries] == [(1, 1, b"m1"), (1, 2, b"m4"), (1, 3, b"m7")]
    assert [e.seq for e in recorder.entries] == [1, 2, 3]  # its offsets


def test_a_reader_of_the_whole_stream_gets_every_partition_in_order_within_each(
    broker: Broker,
) -> None:
    send(broker, 30)
    send(broker, 5, key="alice", start=30)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, recorder = read(session, S)
    got = [said(e) for e in recorder.entries]
    assert sorted(body for *_, body in got) == sorted(f"m{i}".encode() for i in range(35))
    for partition in range(3):
        offsets = [offset for p, offset, _ in got if p == partition]
        assert offsets == list(range(1, len(offsets) + 1))
    seqs = [e.seq for e in recorder.entries]
    assert seqs == list(range(1, 36))  # its deliveries' numbers: acks' identity
    session.ack(consumer, seqs[-1], cumulative=True)


def test_a_whole_reader_follows_sends_to_every_partition(broker: Broker) -> None:
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    _, recorder = read(session, S, offset=None)
    assert recorder.entries == []
    send(broker, 6)
    got = sorted(said(e) for e in recorder.take())
    assert got == [
        (0, 1, b"m0"),
        (0, 2, b"m3"),
        (1, 1, b"m1"),
        (1, 2, b"m4"),
        (2, 1, b"m2"),
        (2, 2, b"m5"),
    ]


def test_a_whole_reader_is_paced_by_its_credit(broker: Broker) -> None:
    send(broker, 600)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    recorder = Recorder()
    consumer = session.consumer(1, S, recorder, prefetch=10, offset="first")
    got: list[Entry] = []
    taken = recorder.take()
    while taken:
        assert len(taken) <= 10
        got += taken
        for entry in taken:
            session.ack(consumer, entry.seq, cumulative=False)
        BrokerSession.add_credit(consumer, len(taken))
        taken = recorder.take()
    assert len(got) == 600
    assert len({said(e) for e in got}) == 600


def test_closing_a_whole_reader_leaves_every_partition(broker: Broker) -> None:
    send(broker, 3)
    session = BrokerConnection(broker).session(AckMode.CLIENT)
    consumer, _ = read(session, S)
    assert all(len(broker.streams[a].readers) == 1 for a in (S, f"{S}#1", f"{S}#2"))
    session.close_consumer(consumer)
    assert all(broker.streams[a].readers == [] for a in (S, f"{S}#1", f"{S}#2"))


def test_partitions_and_their_offsets_survive_a_restart(broker: Broker) -> None:
    send(broker, 6)
    again = restart(broker)
    send(again, 3, start=6)
    assert kept(again) == [[b"m0", b"m3", b"m6"], [b"m1", b"m4", b"m7"], [b"m2", b"m5", b"m8"]]
    session = BrokerConnection(again).session(AckMode.CLIENT)
    _, recorder = read(session, f"{S}#2", offset=3)
    assert [said(e) for e in recorder.entries] == [(2, 3, b"m8")]


def test_a_message_key_is_its_key_property() -> None:
    message = Message.create(b"x", key="alice")
    assert message.key == "alice"
    assert message.properties == {"key": "alice"}
    assert Message.create(b"x").key is None


def test_a_partition_the_stream_has_exists_once_named(broker: Broker) -> None:
    # as a cursor or a lookup that never creates asks for it: the Spark source's planning
    found = broker.destination(f"{S}#2", create=False)
    assert isinstance(found, Stream)
    assert (found.first, found.head) == (1, 1)
    with pytest.raises(InvalidAddress, match="has 3"):
        broker.destination(f"{S}#3", create=False)
