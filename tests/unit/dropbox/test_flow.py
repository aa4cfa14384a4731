"""DropboxMQ's flow control over real directories: read locks stop consumers, the
write lock holds producers back, as DropboxMQ's admin guide ("Flow Control") says."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chute.dropbox.flow import WriteLimits, WriteLock, parse_write_limits
from chute.dropbox.layout import init_queue
from chute.dropbox.queue import Delivery, QueueConsumer, QueueProducer
from chute.dropbox.topic import Distributor, TopicPublisher, subscribe
from chute.errors import DestinationFull
from chute.message import BodyKind, Message

POLL = 0.02


def text(body: str) -> Message:
    return Message(body.encode(), kind=BodyKind.TEXT)


class Said(logging.Handler):
    """Sets ``event`` when the ``chute.dropbox`` logger says something containing ``words``."""

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


@pytest.fixture
def said() -> Iterator[Callable[[str], Said]]:
    made: list[Said] = []
    logger = logging.getLogger("chute.dropbox")

    def make(words: str) -> Said:
        handler = Said(words)
        logger.addHandler(handler)
        made.append(handler)
        return handler

    yield make
    for handler in made:
        logger.removeHandler(handler)


def lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


# -- read locks -------------------------------------------------------------------------


@pytest.mark.parametrize("lock", ["orders/incoming/read-lock", "global-read-lock"])
def test_a_read_lock_makes_the_dropbox_look_empty_until_it_goes(tmp_path: Path, lock: str) -> None:
    QueueProducer(tmp_path, "orders").send(text("held"))
    consumer = QueueConsumer(tmp_path, "orders", "c1")
    (tmp_path / lock).touch()
    assert consumer.receive() is None
    assert consumer.receive_wait(timeout=3 * POLL, poll_interval=POLL) is None
    assert len(list(consumer.layout.target.iterdir())) == 1  # not claimed, still waiting
    (tmp_path / lock).unlink()
    delivery = consumer.receive()
    assert delivery is not None
    assert delivery.message.body == b"held"


def test_a_local_read_lock_stops_only_its_own_dropbox(tmp_path: Path) -> None:
    for name in ("orders", "invoices"):
        QueueProducer(tmp_path, name).send(text(name))
    (tmp_path / "orders" / "incoming" / "read-lock").touch()
    assert QueueConsumer(tmp_path, "orders", "c1").receive() is None
    assert QueueConsumer(tmp_path, "invoices", "c1").receive() is not None


def test_the_global_read_lock_stops_topic_subscribers_too(tmp_path: Path) -> None:
    layout = subscribe(tmp_path, "news.eu", "daily", "c1")
    TopicPublisher(tmp_path, "news.eu").send(text("headline"))
    consumer = QueueConsumer(layout, "", "c1")
    (tmp_path / "global-read-lock").write_text("lock\n")  # what the Windows example writes
    assert consumer.receive() is None
    (tmp_path / "global-read-lock").unlink()
    (layout.base / "read-lock").touch()  # a subscription's own read lock, beside its target/
    assert consumer.receive() is None
    (layout.base / "read-lock").unlink()
    assert consumer.receive() is not None


def test_a_waiting_consumer_resumes_within_a_poll_when_the_lock_goes(
    tmp_path: Path, said: Callable[[str], Said]
) -> None:
    QueueProducer(tmp_path, "orders").send(text("later"))
    lock = tmp_path / "orders" / "incoming" / "read-lock"
    lock.touch()
    consumer = QueueConsumer(tmp_path, "orders", "c1")
    locked = said("read-locked")
    got: list[Delivery | None] = []
    waiting = threading.Thread(
        target=lambda: got.append(consumer.receive_wait(timeout=30, poll_interval=POLL))
    )
    waiting.start()
    assert locked.event.wait(10)  # the consumer has seen the lock
    lifted = time.monotonic()
    lock.unlink()
    waiting.join(10)
    [delivery] = got
    assert delivery is not None
    assert delivery.message.body == b"later"
    assert time.monotonic() - lifted < 10 * POLL + 1  # a poll or so, not the 30 s timeout
    consumer.close()


def test_a_read_lock_is_logged_when_it_comes_and_when_it_goes_not_per_look(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "chute.dropbox")
    consumer = QueueConsumer(tmp_path, "orders", "c1")
    lock = tmp_path / "global-read-lock"
    lock.touch()
    for _ in range(5):
        assert consumer.receive() is None
    lock.unlink()
    for _ in range(5):
        consumer.receive()
    locked = lines(caplog, "read-locked")
    assert len(locked) == 1
    assert "queue:orders" in locked[0]
    assert str(lock) in locked[0]
    assert len(lines(caplog, "reading again")) == 1


# -- the write lock ---------------------------------------------------------------------


def write_lock(root: Path, queue: str, content: str = "") -> Path:
    path = init_queue(root, queue).base / "write-lock.properties"
    path.write_text(content)
    return path


def test_an_empty_write_lock_stops_every_send_until_the_timeout(tmp_path: Path) -> None:
    write_lock(tmp_path, "orders")
    producer = QueueProducer(tmp_path, "orders", block_timeout=3 * POLL, poll_interval=POLL)
    with pytest.raises(DestinationFull, match=r"queue:orders: write-locked by .*write-lock"):
        producer.send(text("stopped"))
    assert list(producer.layout.target.iterdir()) == []
    assert list(producer.layout.working.iterdir()) == []


def test_a_send_goes_while_fewer_files_than_the_target_limit_wait(tmp_path: Path) -> None:
    write_lock(tmp_path, "orders", "target-limit=2\n")
    producer = QueueProducer(tmp_path, "orders", block_timeout=3 * POLL, poll_interval=POLL)
    producer.send(text("1"))
    producer.send(text("2"))  # one was waiting: below the limit
    with pytest.raises(DestinationFull):
        producer.send(text("3"))  # two wait: at the limit
    assert QueueConsumer(tmp_path, "orders", "c1").receive() is not None
    producer.send(text("3"))  # a consumer took one: below the limit again
    assert len(list(producer.layout.target.iterdir())) == 2


def test_delay_milliseconds_delays_each_send_then_lets_it_go(tmp_path: Path) -> None:
    write_lock(tmp_path, "orders", "delay-milliseconds=150\ntarget-limit=1\n")
    producer = QueueProducer(tmp_path, "orders", block_timeout=30, poll_interval=POLL)
    started = time.monotonic()
    producer.send(text("first"))  # nothing waits yet: not delayed
    producer.send(text("second"))  # one waits, the limit is 1: delayed 150 ms
    assert time.monotonic() - started >= 0.15
    assert len(list(producer.layout.target.iterdir())) == 2


def test_a_send_waiting_on_the_lock_goes_when_the_lock_is_removed(
    tmp_path: Path, said: Callable[[str], Said]
) -> None:
    lock = write_lock(tmp_path, "orders")
    producer = QueueProducer(tmp_path, "orders", poll_interval=POLL)  # no limit: as DropboxMQ
    held = said("write-locked")
    sent: list[str] = []
    sending = threading.Thread(target=lambda: sent.append(producer.send(text("patient"))))
    sending.start()
    assert held.event.wait(10)
    assert list(producer.layout.target.iterdir()) == []
    lock.unlink()
    sending.join(10)
    assert [p.name for p in producer.layout.target.iterdir()] == sent


def test_a_stop_event_ends_the_wait_without_sending(
    tmp_path: Path, said: Callable[[str], Said]
) -> None:
    write_lock(tmp_path, "orders")
    lock = WriteLock(init_queue(tmp_path, "orders"), POLL)
    stop = threading.Event()
    held = said("write-locked")
    answers: list[bool] = []
    waiting = threading.Thread(target=lambda: answers.append(lock.wait(None, stop)))
    waiting.start()
    assert held.event.wait(10)
    stop.set()
    waiting.join(10)
    assert answers == [False]


def test_a_changed_write_lock_is_read_again(tmp_path: Path) -> None:
    path = write_lock(tmp_path, "orders")
    lock = WriteLock(init_queue(tmp_path, "orders"), POLL)
    assert lock.holds(0)
    path.write_text("target-limit=100\n")
    assert not lock.holds(0)
    path.write_text("delay-milliseconds=0")
    assert not lock.holds(0)
    path.write_text("")
    assert lock.holds(3600)
    path.unlink()
    assert not lock.holds(0)


def test_a_write_lock_is_logged_when_it_starts_holding_and_when_it_lifts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "chute.dropbox")
    path = write_lock(tmp_path, "orders", "delay-milliseconds=30\ntarget-limit=1\n")
    producer = QueueProducer(tmp_path, "orders", poll_interval=POLL)
    for n in range(4):  # from the second on, each is held back 30 ms
        producer.send(text(str(n)))
    path.unlink()
    producer.send(text("free"))
    producer.send(text("free"))
    assert len(lines(caplog, "write-locked")) == 1
    assert "delay-milliseconds=30, target-limit=1" in lines(caplog, "write-locked")[0]
    assert len(lines(caplog, "write lock lifted")) == 1


@pytest.mark.parametrize(
    ("content", "limits"),
    [
        ("", WriteLimits(-1, 0)),
        ("delay-milliseconds=8000\ntarget-limit=1000\n", WriteLimits(8000, 1000)),
        ("delay-milliseconds = 8000\r\ntarget-limit:1000", WriteLimits(8000, 1000)),
        ("  delay-milliseconds 8000\n# target-limit=5\n! target-limit=6\n", WriteLimits(8000, 0)),
        ("other=1\ntarget-limit=+7\n", WriteLimits(-1, 7)),
        ("target-limit=3\ntarget-limit=4\n", WriteLimits(-1, 4)),  # the last one counts
    ],
)
def test_write_lock_properties_are_read_as_java_properties(
    content: str, limits: WriteLimits
) -> None:
    assert parse_write_limits(content) == limits


def test_a_value_that_is_not_a_number_keeps_its_default_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parsed = parse_write_limits("delay-milliseconds=8s\ntarget-limit=1_000\n", "the-lock")
    assert parsed == WriteLimits(-1, 0)
    warned = [r.getMessage() for r in caplog.records]
    assert any("the-lock" in m and "delay-milliseconds='8s'" in m for m in warned)
    assert any("target-limit='1_000'" in m for m in warned)


def test_a_topic_send_obeys_the_topic_s_write_lock_not_its_subscriptions(tmp_path: Path) -> None:
    daily = subscribe(tmp_path, "news", "daily", "c1")
    publisher = TopicPublisher(tmp_path, "news", block_timeout=3 * POLL, poll_interval=POLL)
    (daily.base / "write-lock.properties").touch()  # DropboxMQ's publisher never looks here
    publisher.send(text("goes"))
    assert len(list(daily.target.iterdir())) == 1
    (publisher.layout.incoming.base / "write-lock.properties").touch()  # the topic's own
    with pytest.raises(DestinationFull, match=r"write-locked"):
        publisher.send(text("held"))
    assert len(list(daily.target.iterdir())) == 1  # no copy anywhere


def test_a_distributor_is_no_producer_the_topic_s_write_lock_does_not_stop_it(
    tmp_path: Path,
) -> None:
    daily = subscribe(tmp_path, "news", "daily", "c1")
    incoming = TopicPublisher(tmp_path, "news").layout.incoming
    QueueProducer(incoming).send(text("dropped by a script"))  # into .incoming/target
    (incoming.base / "write-lock.properties").touch()
    assert Distributor(tmp_path, "news").run() == 1
    assert len(list(daily.target.iterdir())) == 1
