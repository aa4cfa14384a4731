"""Topic dropboxes: topic-root layout, publish to every subscription, fan-out of .incoming."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chute.dropbox.layout import init_topic, subscription_layouts, topic_layout
from chute.dropbox.queue import QueueConsumer, QueueProducer
from chute.dropbox.topic import (
    DISTRIBUTOR,
    Distributor,
    TopicPublisher,
    distribute,
    lineage,
    subscribe,
)
from chute.errors import InvalidAddress
from chute.message import BodyKind, Message


def names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def test_a_topic_lives_under_topic_root_with_incoming_and_subscriptions(tmp_path: Path) -> None:
    layout = init_topic(tmp_path, "news.eu")
    assert layout.dir == tmp_path.resolve() / "topic-root" / "news" / "eu"
    assert names(layout.dir) == [".incoming", ".subscriptions"]
    assert names(layout.incoming.base) == sorted(
        ["working", "target", "processing", "processed", "expired", "error"]
    )
    sub = subscribe(tmp_path, "news.eu", "daily digest", "client~1")
    assert sub.base == layout.subscriptions_dir / "daily+digest.client%7E1"
    assert names(sub.base) == names(layout.incoming.base)


@pytest.mark.parametrize("name", ["..", "a..b", ".a", "a.", "a/b", "", "x" * 201])
def test_topic_names_that_are_not_a_tree_under_the_root_are_refused(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(InvalidAddress):
        init_topic(tmp_path, name)
    assert names(tmp_path) == []


def test_a_symlink_in_the_topic_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root" / "topic-root").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "topic-root" / "news").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InvalidAddress):
        init_topic(tmp_path / "root", "news.eu")
    assert names(tmp_path / "elsewhere") == []


def test_publish_puts_one_copy_in_every_subscription(tmp_path: Path) -> None:
    a = subscribe(tmp_path, "news", "s1", "alice")
    b = subscribe(tmp_path, "news", "s2", "bob")
    publisher = TopicPublisher(tmp_path, "news", durable=False)
    went = publisher.send(Message(b"hello", kind=BodyKind.TEXT, properties={"k": 1}))
    assert went == ["topic:news/s1.alice", "topic:news/s2.bob"]
    [name_a] = names(a.target)
    assert names(b.target) == [name_a]  # the same name, so the same id, in each
    got = QueueConsumer(a, "", "alice").receive()
    assert got is not None
    assert got.message.body == b"hello"
    assert got.message.properties == {"k": 1}


def test_publish_with_no_subscription_goes_nowhere(tmp_path: Path) -> None:
    assert TopicPublisher(tmp_path, "news").send(Message(b"x")) == []
    assert subscription_layouts(topic_layout(tmp_path, "news")) == []


def test_distribute_fans_incoming_files_out(tmp_path: Path) -> None:
    a = subscribe(tmp_path, "news", "s1", "alice")
    b = subscribe(tmp_path, "news", "s2", "bob")
    incoming = init_topic(tmp_path, "news").incoming
    # what a shell script does: write in working/, then mv into target/
    (incoming.working / "tmp").write_bytes(b"from a script")
    os.rename(incoming.working / "tmp", incoming.target / "6.1700000000000001-1.T....nameS=x")
    (incoming.target / "4.1700000000000002-1.T.1000").write_bytes(b"expired")
    assert distribute(tmp_path, "news", durable=False) == 1
    for sub in (a, b):
        [name] = names(sub.target)
        assert name.startswith("6.1700000000000001-1.T")
    assert names(incoming.target) == names(incoming.processing) == []
    assert len(names(incoming.processed)) == 1
    assert len(names(incoming.expired)) == 1


def test_a_killed_distributor_leaves_files_the_next_one_takes_back(tmp_path: Path) -> None:
    sub = subscribe(tmp_path, "news", "s1", "alice")
    incoming = init_topic(tmp_path, "news").incoming
    QueueProducer(incoming, durable=False).send(Message(b"m", kind=BodyKind.TEXT))
    claimed = QueueConsumer(incoming, "", DISTRIBUTOR).receive()  # then "killed"
    assert claimed is not None
    assert len(names(incoming.processing)) == 1
    assert distribute(tmp_path, "news", durable=False) == 1
    assert names(incoming.processing) == []
    [copy] = names(sub.target)
    got = QueueConsumer(sub, "", "alice").receive()
    assert got is not None
    assert got.message.body == b"m"
    assert not got.message.redelivered  # a fresh copy for the subscriber
    assert "JMSXDeliveryCount" not in copy


def test_publish_reaches_the_subscribers_of_every_topic_above(tmp_path: Path) -> None:
    # DropboxMQ: a subscriber of "news" also gets what is published to "news.eu.sport"
    top = subscribe(tmp_path, "news", "all", "alice")
    middle = subscribe(tmp_path, "news.eu", "europe", "bob")
    own = subscribe(tmp_path, "news.eu.sport", "scores", "carol")
    sibling = subscribe(tmp_path, "news.us", "america", "dave")
    below = subscribe(tmp_path, "news.eu.sport.golf", "golf", "erin")
    went = TopicPublisher(tmp_path, "news.eu.sport", durable=False).send(
        Message(b"goal", kind=BodyKind.TEXT)
    )
    assert went == [
        "topic:news.eu.sport/scores.carol",
        "topic:news.eu/europe.bob",
        "topic:news/all.alice",
    ]
    for sub, client in ((own, "carol"), (middle, "bob"), (top, "alice")):
        got = QueueConsumer(sub, "", client).receive()
        assert got is not None
        assert got.message.body == b"goal"
    assert names(sibling.target) == names(below.target) == []


def test_publish_to_a_topic_creates_no_directory_above_it(tmp_path: Path) -> None:
    TopicPublisher(tmp_path, "news.eu", durable=False).send(Message(b"x"))
    assert names(tmp_path / "topic-root" / "news") == ["eu"]  # no .incoming made for "news"
    assert lineage(tmp_path, "news.eu") == [
        topic_layout(tmp_path, "news.eu"),
        topic_layout(tmp_path, "news"),
    ]


def test_distribute_walks_up_to_topic_root(tmp_path: Path) -> None:
    top = subscribe(tmp_path, "news", "all", "alice")
    own = subscribe(tmp_path, "news.eu", "europe", "bob")
    incoming = init_topic(tmp_path, "news.eu").incoming
    (incoming.working / "tmp").write_bytes(b"from a script")
    os.rename(incoming.working / "tmp", incoming.target / "4.1700000000000001-1.T")
    assert distribute(tmp_path, "news.eu", durable=False) == 1
    assert names(top.target) == names(own.target) == ["4.1700000000000001-1.T"]
    # what is dropped for "news" does not go down to "news.eu"
    upper = init_topic(tmp_path, "news").incoming
    (upper.working / "tmp").write_bytes(b"for news only")
    os.rename(upper.working / "tmp", upper.target / "4.1700000000000002-1.T")
    assert distribute(tmp_path, "news", durable=False) == 1
    assert len(names(top.target)) == 2
    assert names(own.target) == ["4.1700000000000001-1.T"]


def test_a_file_the_distributor_cannot_copy_goes_to_error(tmp_path: Path) -> None:
    sub = subscribe(tmp_path, "news", "s1", "alice")
    incoming = init_topic(tmp_path, "news").incoming
    head = "4.1700000000000001-1.T....noteS="
    # readable, but no subscriber could claim a copy of it: no room for "alice~"
    too_long = head + "x" * (252 - len(head))
    (incoming.target / too_long).write_bytes(b"long")
    QueueProducer(incoming, durable=False).send(Message(b"fine", kind=BodyKind.TEXT))
    distributor = Distributor(tmp_path, "news", client_id="d", durable=False)
    assert distributor.run() == 1  # the other file still went
    assert len(names(sub.target)) == 1
    assert names(incoming.error) == [f"d~{too_long}"]
    assert names(incoming.target) == names(incoming.processing) == []


def test_the_distributor_keeps_bodies_dropboxmq_cannot_read_out_of_subscriptions(
    tmp_path: Path,
) -> None:
    topic = init_topic(tmp_path, "news")
    sub = subscribe(tmp_path, "news", "reader", "c1")
    incoming = topic.incoming
    for name, body in (
        ("4.1700000000000000-1.P", b"a=1"),  # a map a shell script wrote: not Java's
        ("4.1700000000001000-2.P", b"\xac\xed\x00\x05sr\x00\x11java.util.HashMap"),
    ):
        (incoming.working / name).write_bytes(body)
        os.rename(incoming.working / name, incoming.target / name)
    assert distribute(tmp_path, "news") == 1
    assert names(incoming.error) == ["distributor~4.1700000000000000-1.P.....JMSXDeliveryCountI=1"]
    [copied] = names(sub.target)
    assert copied.startswith("4.1700000000001000-2.P")
