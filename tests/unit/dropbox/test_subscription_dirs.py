"""A subscription directory appears whole: a DropboxMQ publisher lists ``.subscriptions/``
and writes into each directory's ``working/`` at once, so a directory seen without its
six directories fails that publisher's send (one was seen failing while a broker started
with a new topic mount)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute.dropbox.layout import QUEUE_DIRS, init_subscription, init_topic
from chute.dropbox.maintenance import recover_layout
from chute.dropbox.topic import TopicPublisher
from chute.message import Message


class PublishersView:
    """What a publisher listing ``.subscriptions/`` sees at every directory made or
    renamed in this process (an audit hook runs just before each ``mkdir`` and
    ``rename``, so every intermediate state of the tree is looked at)."""

    watched: Path | None = None
    half_made: list[str] = []  # noqa: RUF012 - one view at a time, reset by the fixture
    installed = False

    @classmethod
    def audit(cls, event: str, args: tuple[object, ...]) -> None:
        subscriptions = cls.watched
        if subscriptions is None or event not in ("os.mkdir", "os.rename"):
            return
        try:
            entries = os.listdir(subscriptions)
        except FileNotFoundError:
            return
        for name in entries:
            missing = [d for d in QUEUE_DIRS if not os.path.isdir(subscriptions / name / d)]
            if missing:
                cls.half_made.append(f"{name} without {'/, '.join(missing)}/")


@pytest.fixture
def view() -> Iterator[type[PublishersView]]:
    if not PublishersView.installed:  # an audit hook cannot be removed: install it once
        sys.addaudithook(PublishersView.audit)
        PublishersView.installed = True
    PublishersView.half_made = []
    yield PublishersView
    PublishersView.watched = None


def test_a_subscription_made_by_the_bridge_or_a_subscriber_appears_whole(
    tmp_path: Path, view: type[PublishersView]
) -> None:
    topic = init_topic(tmp_path, "news")
    view.watched = topic.subscriptions_dir
    init_subscription(topic, "chute-bridge", "chute-bridge")  # what a topic mount does
    url = f"dropbox://{tmp_path}?client_id=app&sync=false"
    with chute.connect(url) as conn, conn.session() as session:
        session.consumer("topic:news", subscription="feed", durable=True).close()
        session.consumer("topic:news").close()  # a non-durable one: made, then removed
    recover_layout(topic.subscription("late", "ops"), "ops")  # `chute dropbox recover`
    view.watched = None
    assert view.half_made == []
    made = sorted(os.listdir(topic.subscriptions_dir))
    assert made == ["chute-bridge.chute-bridge", "feed.app", "late.ops"]
    assert not [n for n in os.listdir(topic.dir) if n.startswith(".new-")]  # nothing aside left


def test_a_publisher_racing_a_new_subscription_writes_into_it_or_not_at_all(
    tmp_path: Path, view: type[PublishersView]
) -> None:
    topic = init_topic(tmp_path, "news")
    publisher = TopicPublisher(tmp_path, "news", durable=False)
    view.watched = topic.subscriptions_dir
    init_subscription(topic, "sub", "c1")
    view.watched = None
    assert view.half_made == []
    assert publisher.send(Message.create("hello")) == ["topic:news/sub.c1"]


def test_an_existing_subscription_missing_a_directory_is_completed(tmp_path: Path) -> None:
    topic = init_topic(tmp_path, "news")
    old = topic.subscriptions_dir / "sub.c1"
    (old / "target").mkdir(parents=True)  # as an older client may have left it
    (old / "target" / "4.1700000000000000-1.T").write_text("kept")
    layout = init_subscription(topic, "sub", "c1")
    assert sorted(os.listdir(layout.base)) == sorted(QUEUE_DIRS)
    assert os.listdir(layout.target) == ["4.1700000000000000-1.T"]
