"""The blocking client's confirm window against a real ``chute serve`` with a journal.

``conn.session(confirm_window=N)`` lets a persistent send return while at most N
persistent sends of the session await the broker's confirmation (its fsync);
``flush()`` waits for all of them; a refused send is raised later (by a send,
``flush`` or ``close``) with a note saying so. These tests check what a producer
relies on: nothing confirmed is ever lost (not even by ``kill -9``), order is
kept, errors are not swallowed, and the session goes on working after one.

``session.unconfirmed`` (how many sends are still awaited) is inspected where the
window's size is the point; everything else is observed as a user would: by
consuming, browsing, and restarting the broker on its journal.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import chute
from chute import Session
from chute.errors import ChuteError, ConnectError, ConsumerError, DestinationFull

from .conftest import ChuteServer, start_server

WAIT = 10.0
"""Deadline, in seconds, for anything a test waits on."""
SMALL = "queue:small"
SMALL_MAX = 3
EARLIER_NOTE = "earlier persistent send"
"""What the note on an error raised for an earlier, windowed send says."""


@pytest.fixture
def bounded_server(tmp_path: Path) -> Iterator[ChuteServer]:
    """A broker whose ``queue:small`` holds at most SMALL_MAX messages and refuses more."""
    config = tmp_path / "chute.toml"
    config.write_text(
        f'[destinations."{SMALL}"]\nmax_messages = {SMALL_MAX}\noverflow = "reject"\n'
    )
    srv = start_server(tmp_path, "--config", str(config))
    yield srv
    if srv.process.poll() is None:
        srv.stop()


def restart(server: ChuteServer, tmp_path: Path) -> ChuteServer:
    """``kill -9`` the broker and start another on its journal."""
    server.stop(signal.SIGKILL)
    return start_server(tmp_path, data_dir=server.data_dir)


def bodies(session: Session, address: str) -> list[bytes]:
    return [m.body for m in session.browse(address)]


def wait_for_bodies(
    session: Session, address: str, expected: list[bytes], within: float = WAIT
) -> None:
    """Browse ``address`` until it holds ``expected`` (in that order), or fail after
    ``within`` seconds."""
    deadline = time.monotonic() + within
    got = bodies(session, address)
    while got != expected:
        assert time.monotonic() < deadline, f"{address} holds {got!r}, not {expected!r}"
        got = bodies(session, address)


def receive_bodies(consumer: chute.Consumer, count: int, *, ack: bool = False) -> list[bytes]:
    """The bodies of the next ``count`` messages (each acked if ``ack``)."""
    got: list[bytes] = []
    for _ in range(count):
        message = consumer.receive(timeout=WAIT)
        assert message is not None, f"only {len(got)} of {count} messages arrived"
        if ack:
            message.ack()
        got.append(message.body)
    return got


def flush_errors(session: Session, limit: int = 100) -> list[ChuteError]:
    """Call ``flush`` until it returns; the errors it raised meanwhile (one per call)."""
    errors: list[ChuteError] = []
    for _ in range(limit):
        try:
            session.flush()
        except ChuteError as exc:
            errors.append(exc)
        else:
            return errors
    raise AssertionError(f"flush still raising after {limit} calls: {errors[-1]!r}")


def has_note(exc: BaseException, text: str) -> bool:
    return any(text in note for note in getattr(exc, "__notes__", ()))


def fill_small(url: str) -> None:
    """Fill ``queue:small`` to its bound (with plain, unwindowed sends)."""
    with chute.connect(url) as conn, conn.session() as s:
        for i in range(SMALL_MAX):
            s.send(SMALL, b"full-%d" % i)


# -- 1. everything sent and flushed is there, in order, also after a restart ----------


def test_flushed_sends_are_all_delivered_in_order_and_survive_a_kill(
    server: ChuteServer, tmp_path: Path
) -> None:
    count = 500
    expected = [b"m-%04d" % i for i in range(count)]
    with chute.connect(server.url) as conn:
        producer = conn.session(confirm_window=32)
        for body in expected:
            producer.send("queue:win", body)
        producer.flush()
        assert not producer.unconfirmed
        # client acks, none given: the broker keeps every message for the restart
        consumer = conn.session(ack="client").consumer("queue:win", prefetch=count)
        assert receive_bodies(consumer, count) == expected

    # Every send was confirmed (flush returned): even kill -9 must not lose one.
    server = restart(server, tmp_path)
    try:
        with chute.connect(server.url) as conn:
            session = conn.session()
            assert bodies(session, "queue:win") == expected  # each once, in order
            assert receive_bodies(session.consumer("queue:win"), count) == expected
    finally:
        server.stop()


# -- 2. the window pipelines and stays bounded ----------------------------------------


def test_the_window_pipelines_sends_and_never_exceeds_its_size(server: ChuteServer) -> None:
    window = 8
    with chute.connect(server.url) as conn, chute.connect(server.url) as watcher:
        s = conn.session(confirm_window=window)
        look = watcher.session()
        first = [b"first-%d" % i for i in range(window + 1)]
        for i, body in enumerate(first[:window]):
            s.send("queue:pipe", body)
            assert s.unconfirmed == i + 1  # returned without awaiting anything
        # The next send overflows the window: it awaits the oldest confirmation only,
        # and what the window held went out before (the broker has every one of them).
        s.send("queue:pipe", first[window])
        assert s.unconfirmed == window
        wait_for_bodies(look, "queue:pipe", first)
        assert s.unconfirmed == window  # still: the producer awaited nothing more

        more = [b"more-%d" % i for i in range(200)]
        for body in more:
            s.send("queue:pipe", body)
            assert 1 <= s.unconfirmed <= window
        s.flush()
        assert not s.unconfirmed
        assert bodies(look, "queue:pipe") == first + more
        s.flush()  # nothing left: returns at once
        s.close()


def test_sends_left_in_the_window_reach_the_broker_without_another_call(
    server: ChuteServer,
) -> None:
    with chute.connect(server.url) as conn, chute.connect(server.url) as watcher:
        s = conn.session(confirm_window=8)
        look = watcher.session()
        conn.stat()  # a round trip first: the connection is idle, as between bursts
        sent = [b"%d" % i for i in range(3)]
        for body in sent:
            s.send("queue:linger", body)
        # The producer now does something else; its messages must not wait for it.
        wait_for_bodies(look, "queue:linger", sent, within=3.0)
        assert s.unconfirmed == len(sent)  # none was awaited meanwhile
        s.close()


def test_threads_sharing_a_windowed_session(server: ChuteServer) -> None:
    threads, each, window = 4, 250, 16
    with chute.connect(server.url) as conn:
        s = conn.session(confirm_window=window)
        failures: list[BaseException] = []

        def produce(t: int) -> None:
            try:
                for i in range(each):
                    s.send("queue:shared", b"%d-%d" % (t, i))
                    assert s.unconfirmed <= window + threads  # others' sends in flight
            except BaseException as exc:  # noqa: BLE001 - reported to the test thread
                failures.append(exc)

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(WAIT)
        assert not any(worker.is_alive() for worker in workers)
        assert not failures, failures
        s.flush()
        assert not s.unconfirmed
        got = bodies(s, "queue:shared")
        s.close()
    assert len(got) == threads * each
    for t in range(threads):  # each thread's messages in its order
        assert [b for b in got if b.startswith(b"%d-" % t)] == [
            b"%d-%d" % (t, i) for i in range(each)
        ]


def test_non_persistent_sends_do_not_enter_the_window(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn, conn.session(confirm_window=4) as s:
        for i in range(20):
            s.send("queue:np", b"%d" % i, persistent=False)
            assert not s.unconfirmed
        s.send("queue:np", b"last")
        assert s.unconfirmed == 1
        s.flush()
        assert bodies(s, "queue:np") == [b"%d" % i for i in range(20)] + [b"last"]


# -- 3. a refused send surfaces later, and the session goes on -----------------------


def test_a_refused_send_is_raised_by_a_later_send_then_by_flush(
    bounded_server: ChuteServer,
) -> None:
    fill_small(bounded_server.url)
    with chute.connect(bounded_server.url) as conn:
        s = conn.session(confirm_window=2)
        s.send(SMALL, b"refused-0")  # the window takes it: nothing raised yet
        s.send(SMALL, b"refused-1")
        # The third send overflows the window: awaiting the oldest send raises its error.
        with pytest.raises(DestinationFull) as raised:
            s.send(SMALL, b"refused-2")
        assert has_note(raised.value, EARLIER_NOTE), raised.value.__notes__
        assert s.unconfirmed == 2  # refused-1 and refused-2 still awaited

        # flush raises the other two, one per call, each with the note, then returns.
        errors = flush_errors(s)
        assert [type(e) for e in errors] == [DestinationFull, DestinationFull]
        assert all(has_note(e, EARLIER_NOTE) for e in errors)
        assert not s.unconfirmed
        assert bodies(s, SMALL) == [b"full-%d" % i for i in range(SMALL_MAX)]

        # Make room (a consumer takes and acks everything); the same session goes on.
        with conn.session(ack="client") as reader:  # its close is a request: acks are done
            taken = receive_bodies(reader.consumer(SMALL, prefetch=SMALL_MAX), SMALL_MAX, ack=True)
        assert taken == [b"full-%d" % i for i in range(SMALL_MAX)]
        assert bodies(s, SMALL) == []

        again = [b"again-%d" % i for i in range(SMALL_MAX)]
        for body in again:
            s.send(SMALL, body)
        s.flush()
        assert bodies(s, SMALL) == again
        s.close()


def test_a_refused_send_among_good_ones_fails_only_itself(bounded_server: ChuteServer) -> None:
    fill_small(bounded_server.url)
    with chute.connect(bounded_server.url) as conn:
        s = conn.session(confirm_window=16)
        good = [b"good-%d" % i for i in range(10)]
        for body in good[:5]:
            s.send("queue:big", body)
        s.send(SMALL, b"refused")
        for body in good[5:]:
            s.send("queue:big", body)
        errors = flush_errors(s)
        assert [type(e) for e in errors] == [DestinationFull]
        assert has_note(errors[0], EARLIER_NOTE)
        assert bodies(s, "queue:big") == good
        s.close()


# -- 4. close() waits for the window and raises what it finds -------------------------


def test_closing_waits_for_unconfirmed_sends(server: ChuteServer, tmp_path: Path) -> None:
    expected = [b"c-%d" % i for i in range(50)]
    with chute.connect(server.url) as conn:
        with conn.session(confirm_window=64) as s:
            for body in expected:
                s.send("queue:closing", body)
            assert s.unconfirmed == len(expected)  # none confirmed yet
        assert not s.unconfirmed  # close() awaited every confirmation

    server = restart(server, tmp_path)  # kill -9: confirmed means durable
    try:
        with chute.connect(server.url) as conn, conn.session() as look:
            assert bodies(look, "queue:closing") == expected
    finally:
        server.stop()


def test_closing_raises_a_refused_send_and_closes_the_session(
    bounded_server: ChuteServer,
) -> None:
    fill_small(bounded_server.url)
    with chute.connect(bounded_server.url) as conn:
        with pytest.raises(DestinationFull) as raised, conn.session(confirm_window=8) as s:  # noqa: PT012
            s.send("queue:fine", b"before")
            s.send(SMALL, b"refused")
        assert has_note(raised.value, EARLIER_NOTE)
        with pytest.raises(ConsumerError, match="closed"):
            s.send("queue:fine", b"after close")
        with conn.session() as look:
            assert bodies(look, "queue:fine") == [b"before"]
            assert bodies(look, SMALL) == [b"full-%d" % i for i in range(SMALL_MAX)]
        # the connection is fine: a new session works
        with conn.session(confirm_window=8) as s2:
            s2.send("queue:fine", b"next")
        with conn.session() as look:
            assert bodies(look, "queue:fine") == [b"before", b"next"]


def test_closing_awaits_the_sends_after_a_refused_one(bounded_server: ChuteServer) -> None:
    fill_small(bounded_server.url)
    with chute.connect(bounded_server.url) as conn:
        s = conn.session(confirm_window=8)
        s.send(SMALL, b"refused")
        for i in range(5):
            s.send("queue:after", b"%d" % i)
        with pytest.raises(DestinationFull):
            s.close()
        # close() "waits for unconfirmed sends": none may be left unawaited
        assert not s.unconfirmed


# -- 5. __exit__ with an exception on its way out -------------------------------------


def test_an_exception_in_the_block_wins_over_a_refused_send(bounded_server: ChuteServer) -> None:
    fill_small(bounded_server.url)
    with chute.connect(bounded_server.url) as conn:
        with (  # noqa: PT012 - the session's __exit__ is under test
            pytest.raises(RuntimeError, match="boom") as raised,
            conn.session(confirm_window=8) as s,
        ):
            s.send("queue:fine", b"kept")
            s.send(SMALL, b"refused")
            raise RuntimeError("boom")
        notes = raised.value.__notes__
        assert any(f"closing session {s.id} also failed" in note for note in notes), notes
        with pytest.raises(ConsumerError, match="closed"):
            s.send("queue:fine", b"after close")
        with conn.session() as look:
            assert bodies(look, "queue:fine") == [b"kept"]


def test_an_exception_in_the_block_still_flushes_the_window(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        with pytest.raises(KeyError) as raised, conn.session(confirm_window=8) as s:  # noqa: PT012
            for i in range(5):
                s.send("queue:exit", b"%d" % i)
            raise KeyError("app")
        assert not getattr(raised.value, "__notes__", None)  # nothing failed on close
        assert not s.unconfirmed
        with conn.session() as look:
            assert bodies(look, "queue:exit") == [b"%d" % i for i in range(5)]


# -- 6. kill -9 while a windowed producer sends -----------------------------------------


def test_a_killed_broker_keeps_every_confirmed_send(server: ChuteServer, tmp_path: Path) -> None:
    flush_every, kill_at = 256, 1000  # the kill comes between two flushes
    killable = threading.Event()  # the producer is past kill_at and goes on sending
    state: dict[str, int] = {"sent": 0, "confirmed": 0, "flushed": 0}
    outcome: list[BaseException] = []

    def produce() -> None:
        deadline = time.monotonic() + 2 * WAIT  # a safety net: the kill ends the loop
        try:
            with chute.connect(server.url) as conn:
                s = conn.session(confirm_window=32)
                i = 0
                while time.monotonic() < deadline:
                    s.send("queue:killed", b"%d" % i)
                    i += 1
                    state["sent"] = i
                    state["confirmed"] = i - s.unconfirmed  # left the window: stored
                    if i % flush_every == 0:
                        s.flush()
                        state["flushed"] = state["confirmed"] = i
                    if i == kill_at:
                        killable.set()
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            outcome.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert killable.wait(WAIT), f"the producer is stuck: {state}, {outcome}"
        server.stop(signal.SIGKILL)
        producer.join(WAIT)
        assert not producer.is_alive(), "the producer hangs after the broker died"
    finally:
        producer.join(2 * WAIT)
    assert len(outcome) == 1, outcome
    assert isinstance(outcome[0], ConnectError), repr(outcome[0])
    confirmed, flushed = state["confirmed"], state["flushed"]
    assert flushed >= kill_at // flush_every * flush_every
    assert confirmed > flushed  # some left the window after the last flush

    server = start_server(tmp_path, data_dir=server.data_dir)
    try:
        with chute.connect(server.url) as conn, conn.session() as look:
            got = bodies(look, "queue:killed")
        # What was stored is the sends in order, without a gap, and holds every confirmed
        # one (those that left the window and those before the last flush).
        assert got == [b"%d" % i for i in range(len(got))]
        assert len(got) >= confirmed, (len(got), confirmed, state)
        assert len(got) <= state["sent"] + 1  # at most the send that was under way
    finally:
        server.stop()


# -- 7. the window's edges ------------------------------------------------------------


def test_a_negative_window_is_refused(server: ChuteServer) -> None:
    with chute.connect(server.url) as conn:
        with pytest.raises(ValueError, match="confirm_window"):
            conn.session(confirm_window=-1)
        with conn.session() as s:  # the connection is unharmed
            s.send("queue:neg", b"x")
            assert bodies(s, "queue:neg") == [b"x"]


def test_window_zero_makes_each_send_wait_for_its_own_confirmation(
    bounded_server: ChuteServer,
) -> None:
    with chute.connect(bounded_server.url) as conn:
        for s in (conn.session(), conn.session(confirm_window=0)):
            assert s.confirm_window == 0
            with s:
                for i in range(SMALL_MAX):
                    s.send(SMALL, b"%d" % i)
                    assert not s.unconfirmed  # confirmed before send returned
                # the refused send is raised by itself, not by a later call
                with pytest.raises(DestinationFull) as raised:
                    s.send(SMALL, b"refused")
                assert not has_note(raised.value, EARLIER_NOTE)
                s.flush()  # nothing to wait for
                assert bodies(s, SMALL) == [b"%d" % i for i in range(SMALL_MAX)]
                with conn.session(ack="client") as reader:
                    receive_bodies(reader.consumer(SMALL), SMALL_MAX, ack=True)
                assert bodies(s, SMALL) == []


def test_closing_the_connection_awaits_its_sessions_windows(
    server: ChuteServer, tmp_path: Path
) -> None:
    """A session left open: closing its connection still waits for what it sent."""
    with chute.connect(server.url) as conn:
        s = conn.session(confirm_window=64)
        for i in range(50):
            s.send("queue:left-open", f"m{i}".encode())
        assert s.unconfirmed
    server = restart(server, tmp_path)
    try:
        with chute.connect(server.url) as conn, conn.session() as look:
            assert bodies(look, "queue:left-open") == [f"m{i}".encode() for i in range(50)]
    finally:
        server.stop()


def test_closing_the_connection_raises_a_refused_send(bounded_server: ChuteServer) -> None:
    fill_small(bounded_server.url)
    conn = chute.connect(bounded_server.url)
    s = conn.session(confirm_window=8)
    s.send(SMALL, b"refused")
    with pytest.raises(DestinationFull) as raised:
        conn.close()
    assert has_note(raised.value, EARLIER_NOTE)
    assert conn.closed


def test_windowed_commits_pipeline_transactions(server: ChuteServer, tmp_path: Path) -> None:
    """In a transacted session the window counts commits: each returns while at most N
    await their answer; all of them are stored, in order, once flushed."""
    with chute.connect(server.url) as conn:
        s = conn.session(transacted=True, confirm_window=2)
        for batch in range(20):
            for i in range(10):
                s.send("queue:tx", f"{batch}-{i}".encode())
            s.commit()
            assert s.unconfirmed <= 2
        s.flush()
        assert not s.unconfirmed
        s.close()
    server = restart(server, tmp_path)
    try:
        with chute.connect(server.url) as conn, conn.session() as look:
            expected = [f"{b}-{i}".encode() for b in range(20) for i in range(10)]
            assert bodies(look, "queue:tx") == expected
    finally:
        server.stop()


def test_a_refused_windowed_commit_is_raised_later_and_its_transaction_stays_open(
    bounded_server: ChuteServer,
) -> None:
    """As a refused commit that was waited for: nothing of it applied, the transaction
    (with what was sent since) stays open until the producer rolls it back."""
    with chute.connect(bounded_server.url) as conn:
        s = conn.session(transacted=True, confirm_window=4)
        for i in range(SMALL_MAX + 1):  # one more than the queue holds: refused as a whole
            s.send(SMALL, f"too-many-{i}".encode())
        s.commit()
        s.send("queue:fine", b"joined-the-open-transaction")
        s.commit()
        errors = flush_errors(s)
        assert errors
        assert all(isinstance(e, DestinationFull) for e in errors)
        assert all(has_note(e, EARLIER_NOTE) for e in errors)
        s.rollback()
        s.send("queue:fine", b"after")
        s.commit()
        s.flush()
        s.close()
        with conn.session() as look:
            assert bodies(look, SMALL) == []
            assert bodies(look, "queue:fine") == [b"after"]
