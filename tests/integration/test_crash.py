"""Crash tests: ``kill -9`` a real ``chute serve`` at random moments and count every message.

The kill cycle (:func:`run_scenario`, also driven by ``scripts/crash_soak.py``
for hundreds of kills): a producer thread sends persistent messages with
unique bodies and records each one the broker acknowledged, in one of the
:data:`MODES` (:attr:`Scenario.mode`):

* ``sync``: each ``send`` waits for its confirmation; it is acknowledged once
  ``send`` returned;
* ``window``: sends with a confirm window of N (docs/client.md): when ``send``
  returns, all but the last N sends of the session are confirmed, and a
  ``flush()`` (called every few hundred sends) confirms everything before it;
  the producer keeps its own list of the last N and acknowledges a message only
  once it left that list or a flush after it returned;
* ``tx-window``: a transacted session committing every 1..50 sends, with a
  confirm window of 4 commits: a transaction (all its messages) is acknowledged
  the same way, once it left the window of commits or a flush returned.

When the connection breaks, what was sent and not acknowledged is
*unconfirmed*: it may or may not be there after the restart; the messages of a
transaction whose commit was never asked for are *uncommitted*: never there.
A consumer thread takes and acks part of them meanwhile (a random
quota from each broker, acked in random batches, then it idles with the last
batch unacked and more prefetched, so a backlog builds up and messages are in
flight at each kill); the main thread SIGKILLs the broker after a random delay,
restarts it on the same data directory, and the threads reconnect and go on.
At the end a consumer drains the queue. Then (:meth:`Outcome.violations`):

* every acknowledged message was delivered at least once (none **lost**);
* nothing **unknown** appears: only bodies the producer tried to send (an
  unconfirmed one may or may not have been stored);
* no **uncommitted** message appears, and every transaction is delivered
  whole or not at all (atomicity across ``kill -9``, for those a kill left
  unconfirmed too);
* every message the producer tried to send is acknowledged, unconfirmed or
  uncommitted (the producer's own bookkeeping);
* a message delivered again carries ``redelivered=True`` on the later
  delivery, always: a delivery leaves the broker only once its delivery mark
  is durable (docs/durability.md), so no kill can lose the mark of a message
  a client may have seen;
* a message whose consumer ack went out :data:`ACK_WINDOW` seconds or more
  before a kill does not come back (**resurrected**): acks are written within
  a few ms, and SIGKILL does not lose what was written to the kernel.

A failure prints the seed; ``CHUTE_CRASH_SEED=<seed>`` replays the same kill delays,
transaction sizes and flush points (thread timing still varies).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import chute
from chute.errors import ConnectError, RequestTimeout

from .conftest import ChuteServer, start_server

pytestmark = pytest.mark.crash

QUEUE = "queue:crash"
ACK_WINDOW = 2.0
"""Seconds before a kill after which an ack sent must have survived it."""
WAIT = 30.0
"""Deadline for a worker waiting for a broker to come back, and for each drained message."""
LOST_CONNECTION = (ConnectError, RequestTimeout)
MODES = ("sync", "window", "tx-window")
"""How the producer sends (:attr:`Scenario.mode`; the module docstring says what each is)."""
FLUSH_SPREAD = 8
"""A windowed producer flushes every 1..FLUSH_SPREAD * window sends (or commits)."""


def seed_from_env() -> int:
    """``CHUTE_CRASH_SEED`` if set (to replay a failure), else a fresh random seed."""
    text = os.environ.get("CHUTE_CRASH_SEED")
    return int(text) if text else random.SystemRandom().randrange(1 << 32)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """How a crash run goes: how many kills, how long between them, who runs meanwhile."""

    kills: int
    seed: int
    min_delay: float = 0.05  # seconds from "chute listening" to SIGKILL
    max_delay: float = 1.0
    producers: int = 1
    consume: bool = True  # a consumer takes and acks messages during the kills
    max_quota: int = 1000  # it takes 0..max_quota from each broker, then idles until the kill
    max_ack_batch: int = 8  # it acks every 1..max_ack_batch messages
    prefetch: int = 10
    segment_size: str = "256KiB"  # small, so segments roll over and get reclaimed
    mode: str = "sync"  # one of MODES
    send_window: int = 64  # "window": persistent sends awaiting confirmation
    commit_window: int = 4  # "tx-window": commits awaiting confirmation
    max_transaction: int = 50  # "tx-window": each transaction sends 1..max_transaction

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to the application by a consumer."""

    redelivered: bool
    incarnation: int  # which broker process delivered it (0 = the first)
    at: float  # time.monotonic() when receive returned
    acked_at: float | None  # when the consumer sent an ack that settles it


@dataclasses.dataclass
class Outcome:
    """Everything a run observed, and what it means (:meth:`summary`, :meth:`violations`)."""

    seed: int
    kills: int = 0
    attempted: set[bytes] = dataclasses.field(default_factory=set)
    acknowledged: set[bytes] = dataclasses.field(default_factory=set)
    # sent, not acknowledged when the connection broke: stored or not
    unconfirmed: set[bytes] = dataclasses.field(default_factory=set)
    # sent in a transaction whose commit was never asked for: never stored
    uncommitted: set[bytes] = dataclasses.field(default_factory=set)
    # every transaction whose commit was asked for: each all delivered or none of it
    transactions: list[tuple[bytes, ...]] = dataclasses.field(default_factory=list)
    deliveries: dict[bytes, list[Delivery]] = dataclasses.field(default_factory=dict)
    killed_at: dict[int, float] = dataclasses.field(default_factory=dict)  # incarnation -> time
    recovery_warnings: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)  # unexpected failures

    @property
    def lost(self) -> list[bytes]:
        return sorted(self.acknowledged - self.deliveries.keys())

    @property
    def unknown(self) -> list[bytes]:
        return sorted(self.deliveries.keys() - self.attempted)

    @property
    def uncommitted_delivered(self) -> list[bytes]:
        return sorted(self.uncommitted & self.deliveries.keys())

    @property
    def unaccounted(self) -> list[bytes]:
        """Tried, yet neither acknowledged, unconfirmed nor uncommitted: a producer's slip."""
        return sorted(self.attempted - self.acknowledged - self.unconfirmed - self.uncommitted)

    def partial_transactions(self) -> list[str]:
        """One line for each transaction delivered in part."""
        found = []
        for bodies in self.transactions:
            got = [body for body in bodies if body in self.deliveries]
            if 0 < len(got) < len(bodies):
                missing = sorted(set(bodies) - set(got))
                state = "acknowledged" if bodies[0] in self.acknowledged else "unconfirmed"
                found.append(
                    f"{state} transaction {bodies[0].decode()}..{bodies[-1].decode()}: "
                    f"{len(got)} of {len(bodies)} delivered, missing "
                    f"{', '.join(b.decode() for b in missing)}"
                )
        return found

    def duplicates(self) -> Iterator[tuple[bytes, Delivery, Delivery]]:
        """(body, earlier, later) for every delivery after a message's first."""
        for body, got in self.deliveries.items():
            for earlier, later in itertools.pairwise(got):
                yield body, earlier, later

    def _before_kill(self, delivery: Delivery, when: float | None) -> float | None:
        """Seconds from ``when`` to the kill that ended ``delivery``'s broker, if it was killed."""
        killed = self.killed_at.get(delivery.incarnation)
        return None if killed is None or when is None else killed - when

    def classify(self) -> dict[str, list[str]]:
        """Duplicates sorted by kind, one line of evidence each."""
        kinds: dict[str, list[str]] = {
            "unflagged": [],  # no redelivered flag, no kill to explain it: a bug
            "ack_lost": [],  # acked just before a kill, delivered again
            "resurrected": [],  # acked well before a kill, delivered again: a bug
        }
        for body, earlier, later in self.duplicates():
            gap = self._before_kill(earlier, earlier.at)
            where = (
                f"{body.decode()}: delivered by broker #{earlier.incarnation} "
                f"{'(not killed)' if gap is None else f'{gap * 1000:.0f} ms before its kill'}"
                f", again by #{later.incarnation} with redelivered={later.redelivered}"
            )
            if not later.redelivered:
                kinds["unflagged"].append(where)
            ack_gap = self._before_kill(earlier, earlier.acked_at)
            if ack_gap is not None:
                where += f"; its ack went {ack_gap * 1000:.0f} ms before the kill"
                kinds["ack_lost" if ack_gap < ACK_WINDOW else "resurrected"].append(where)
        return kinds

    def summary(self) -> dict[str, Any]:
        kinds = self.classify()
        deliveries = sum(len(d) for d in self.deliveries.values())
        delivered = self.deliveries.keys()
        unconfirmed_tx = [t for t in self.transactions if t[0] in self.unconfirmed]
        return {
            "seed": self.seed,
            "kills": self.kills,
            "attempted": len(self.attempted),
            "acknowledged": len(self.acknowledged),
            "unconfirmed": len(self.unconfirmed),
            "unconfirmed_stored": len(self.unconfirmed & delivered),
            "uncommitted": len(self.uncommitted),
            "uncommitted_stored": len(self.uncommitted & delivered),
            "transactions": len(self.transactions),
            "transactions_unconfirmed": len(unconfirmed_tx),
            "transactions_unconfirmed_stored": sum(t[0] in delivered for t in unconfirmed_tx),
            "transactions_partial": len(self.partial_transactions()),
            "delivered": len(self.deliveries),
            "deliveries": deliveries,
            "duplicates": deliveries - len(self.deliveries),
            "duplicates_without_redelivered": len(kinds["unflagged"]),
            "duplicates_after_lost_ack": len(kinds["ack_lost"]),
            "resurrected": len(kinds["resurrected"]),
            "lost": len(self.lost),
            "unknown": len(self.unknown),
            "unaccounted": len(self.unaccounted),
            "recovery_warnings": len(self.recovery_warnings),
            "errors": len(self.errors),
        }

    def violations(self) -> list[str]:
        """What breaks the guarantees (empty if nothing), for an assertion message."""
        kinds = self.classify()
        found = [f"lost (acknowledged, never delivered): {b.decode()}" for b in self.lost]
        found += [f"unknown body delivered: {b!r}" for b in self.unknown]
        found += [
            f"delivered, though its transaction was never committed: {b.decode()}"
            for b in self.uncommitted_delivered
        ]
        found += [f"transaction delivered in part: {t}" for t in self.partial_transactions()]
        found += [
            f"neither acknowledged, unconfirmed nor uncommitted (producer bookkeeping): "
            f"{b.decode()}"
            for b in self.unaccounted
        ]
        found += [f"duplicate without redelivered: {w}" for w in kinds["unflagged"]]
        found += [f"resurrected after its ack: {w}" for w in kinds["resurrected"]]
        found += [f"error: {e}" for e in self.errors]
        return found

    def describe(self) -> str:
        lines = [f"seed {self.seed} (replay with CHUTE_CRASH_SEED={self.seed})"]
        lines += self.violations()
        lines += [f"recovery: {w}" for w in self.recovery_warnings]
        return "\n".join(lines)


class Brokers:
    """The succession of ``chute serve`` processes on one data directory.

    Workers ask :meth:`current` for a broker to talk to and, when their
    connection fails, :meth:`after_failure` for the next one. Thread-safe.
    """

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.cond = threading.Condition()
        self.incarnation = -1
        self.up = False
        self.stopping = False
        self.server: ChuteServer | None = None

    def start(self) -> ChuteServer:
        """Start the next broker; returns once it listens."""
        server = start_server(self.data_dir, *self.extra, data_dir=self.data_dir)
        with self.cond:
            self.server = server
            self.incarnation += 1
            self.up = True
            self.cond.notify_all()
        return server

    def kill(self) -> tuple[float, ChuteServer]:
        """SIGKILL the broker; returns when, and the dead server (for its output)."""
        with self.cond:
            server = self.server
            self.up = False  # before the kill: a worker failing now knows it was killed
        assert server is not None
        at = time.monotonic()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(WAIT)
        return at, server

    def stop(self) -> None:
        """Wake every waiting worker for good."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def current(self) -> tuple[int, str] | None:
        """(incarnation, url) of a running broker, waiting for one; None once stopping."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.stopping or self.up, WAIT):
                raise TimeoutError(f"no broker came up within {WAIT} s")
            if self.stopping or self.server is None:
                return None
            return self.incarnation, self.server.url

    def was_killed(self, incarnation: int) -> bool:
        """Did the broker ``incarnation`` stop being the live one (a kill explains a failure)?"""
        with self.cond:
            return not (self.up and self.incarnation == incarnation)

    def after_failure(self, incarnation: int) -> None:
        """Wait until the broker that failed us has been replaced (or we are stopping)."""
        with self.cond:

            def replaced() -> bool:
                return self.stopping or (self.up and self.incarnation != incarnation)

            if not self.cond.wait_for(replaced, WAIT):
                raise TimeoutError(f"the broker was not restarted within {WAIT} s")

    def wait_gone(self, incarnation: int) -> None:
        """Wait until the broker ``incarnation`` is killed (or we are stopping)."""
        with self.cond:
            self.cond.wait_for(
                lambda: self.stopping or not (self.up and self.incarnation == incarnation)
            )


class CrashRun:
    """The threads of one run and what they record into an :class:`Outcome`."""

    def __init__(self, scenario: Scenario, brokers: Brokers) -> None:
        self.scenario = scenario
        self.brokers = brokers
        self.outcome = Outcome(scenario.seed)
        self.lock = threading.Lock()  # guards self.outcome
        self.stop = threading.Event()
        self.next_body = iter(range(1 << 62))
        self.miscounted = False  # a producer's window disagreed with the client's

    def guarded(self, name: str, work: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - reported in the outcome, asserted on
                with self.lock:
                    self.outcome.errors.append(f"{name} thread: {exc!r}")

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def _disconnected(self, who: str, incarnation: int, exc: Exception) -> None:
        if not self.brokers.was_killed(incarnation):
            with self.lock:
                self.outcome.errors.append(f"{who} lost broker #{incarnation} alive: {exc!r}")
        self.brokers.after_failure(incarnation)

    def produce(self, index: int) -> None:
        """Send until stopped, in the scenario's mode; reconnect after each kill."""
        rng = random.Random(self.scenario.seed + 2 + index)
        while not self.stop.is_set():
            if (found := self.brokers.current()) is None:
                return
            incarnation, url = found
            # Sent, not acknowledged yet, oldest first: the confirm window as the
            # producer sees it, one entry per send (a transaction's: per commit).
            window: collections.deque[tuple[bytes, ...]] = collections.deque()
            try:
                with chute.connect(url) as conn:
                    if self.scenario.mode == "tx-window":
                        self._commit_windowed(conn, window, rng)
                    else:
                        self._send_windowed(conn, window, rng)
            except LOST_CONNECTION as exc:
                with self.lock:
                    for bodies in window:
                        self.outcome.unconfirmed.update(bodies)
                self._disconnected("producer", incarnation, exc)

    def _send_windowed(
        self,
        conn: chute.Connection,
        window: collections.deque[tuple[bytes, ...]],
        rng: random.Random,
    ) -> None:
        """Persistent sends, ``send_window`` at a time in flight (mode ``window``) or
        each waited for (``sync``: a window of 0, so nothing is ever left in it)."""
        size = self.scenario.send_window if self.scenario.mode == "window" else 0
        with conn.session(confirm_window=size) as session:
            until_flush = rng.randint(1, FLUSH_SPREAD * size) if size else 0
            while not self.stop.is_set():
                body = self.new_body()
                window.append((body,))  # if send raises, it may have gone out
                session.send(QUEUE, body, persistent=True)
                self._confirmed(session, window, size)
                until_flush = self._count_down(session, window, rng, size, until_flush)
            session.flush()
            self._confirmed(session, window, 0)

    def _commit_windowed(
        self,
        conn: chute.Connection,
        window: collections.deque[tuple[bytes, ...]],
        rng: random.Random,
    ) -> None:
        """Transactions of 1..max_transaction sends, ``commit_window`` commits in flight."""
        size = self.scenario.commit_window
        with conn.session(transacted=True, confirm_window=size) as session:
            until_flush = rng.randint(1, FLUSH_SPREAD * size) if size else 0
            while not self.stop.is_set():
                transaction: list[bytes] = []
                try:
                    for _ in range(rng.randint(1, self.scenario.max_transaction)):
                        transaction.append(self.new_body())
                        session.send(QUEUE, transaction[-1], persistent=True)
                except LOST_CONNECTION:
                    with self.lock:  # no commit asked for: the broker drops them
                        self.outcome.uncommitted.update(transaction)
                    raise
                bodies = tuple(transaction)
                with self.lock:
                    self.outcome.transactions.append(bodies)
                window.append(bodies)  # if commit raises, it may have gone out
                session.commit()
                self._confirmed(session, window, size)
                until_flush = self._count_down(session, window, rng, size, until_flush)
            session.flush()
            self._confirmed(session, window, 0)

    def _count_down(
        self,
        session: chute.Session,
        window: collections.deque[tuple[bytes, ...]],
        rng: random.Random,
        size: int,
        until_flush: int,
    ) -> int:
        """One more send or commit toward the next ``flush()`` (every 1..FLUSH_SPREAD x
        ``size`` of them); returns the new count."""
        if not size:
            return until_flush
        until_flush -= 1
        if until_flush:
            return until_flush
        session.flush()
        self._confirmed(session, window, 0)
        return rng.randint(1, FLUSH_SPREAD * size)

    def new_body(self) -> bytes:
        body = b"m-%010d" % next(self.next_body)
        with self.lock:
            self.outcome.attempted.add(body)
        return body

    def _confirmed(
        self, session: chute.Session, window: collections.deque[tuple[bytes, ...]], keep: int
    ) -> None:
        """A send, commit or flush returned: all but the last ``keep`` entries of
        ``window`` are confirmed (docs/client.md); acknowledge them."""
        with self.lock:
            while len(window) > keep:
                self.outcome.acknowledged.update(window.popleft())
            left = session.unconfirmed  # what the client still awaits
            if left > len(window) and not self.miscounted:  # reported once
                self.miscounted = True  # it awaits requests we counted as confirmed
                self.outcome.errors.append(
                    f"producer: the client awaits {left} requests, the producer "
                    f"thought at most {len(window)}"
                )

    def consume(self) -> None:
        """Take part of what each broker holds; the rest stays for the next one."""
        rng = random.Random(self.scenario.seed + 1)
        while not self.stop.is_set():
            if (found := self.brokers.current()) is None:
                return
            incarnation, url = found
            quota = rng.randint(0, self.scenario.max_quota)
            try:
                with chute.connect(url) as conn, conn.session(ack="client") as session:
                    consumer = session.consumer(QUEUE, prefetch=self.scenario.prefetch)
                    self._take(consumer, incarnation, rng, quota)
                    # keep what is in flight (taken, not acked) and prefetched until the kill
                    self.brokers.wait_gone(incarnation)
            except LOST_CONNECTION as exc:
                self._disconnected("consumer", incarnation, exc)

    def _take(
        self, consumer: chute.Consumer, incarnation: int, rng: random.Random, quota: int
    ) -> None:
        """Receive ``quota`` messages, acking every few (client mode: all before it too)."""
        unacked: list[tuple[bytes, int]] = []
        batch = rng.randint(1, self.scenario.max_ack_batch)
        for _ in range(quota):
            message = None
            while message is None:
                if self.stop.is_set():
                    return
                message = consumer.receive(timeout=0.2)  # a poll of ``stop``, not a wait
            index = self.record(message.body, message.redelivered, incarnation)
            unacked.append((message.body, index))
            if len(unacked) >= batch:
                message.ack()
                self.acked(unacked, time.monotonic())
                unacked = []
                batch = rng.randint(1, self.scenario.max_ack_batch)

    def record(self, body: bytes, redelivered: bool, incarnation: int) -> int:
        """Note a delivery; returns its index among ``body``'s deliveries."""
        delivery = Delivery(redelivered, incarnation, time.monotonic(), None)
        with self.lock:
            got = self.outcome.deliveries.setdefault(body, [])
            got.append(delivery)
            return len(got) - 1

    def acked(self, settled: list[tuple[bytes, int]], at: float) -> None:
        with self.lock:
            for body, index in settled:
                got = self.outcome.deliveries[body]
                got[index] = dataclasses.replace(got[index], acked_at=at)

    def drain(self, url: str, incarnation: int) -> None:
        """Consume everything left: exactly as many messages as the broker says it holds."""
        with chute.connect(url) as conn, conn.session(ack="client") as session:
            left = sum(d["depth"] for d in conn.stat()["destinations"] if d["address"] == QUEUE)
            consumer = session.consumer(QUEUE, prefetch=100)
            for _ in range(left):
                message = consumer.receive(timeout=WAIT)
                if message is None:
                    raise AssertionError(f"the broker said it held {left} messages; a few were not")
                self.record(message.body, message.redelivered, incarnation)
                message.ack()
            extra = consumer.receive(timeout=0.2)
            if extra is not None:
                raise AssertionError(f"more messages than the broker said it held: {extra.body!r}")


def _recovery_warnings(server: ChuteServer) -> list[str]:
    return [line for line in server.lines if " WARNING " in line or "Traceback" in line]


def run_scenario(
    scenario: Scenario, data_dir: Path, progress: Callable[[str], None] = print
) -> Outcome:
    """Run the kill cycle of :class:`Scenario` on ``data_dir`` (a fresh one) and drain."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir.parent / f"{data_dir.name}.toml"
    config.write_text(f'[server]\nsegment_size = "{scenario.segment_size}"\n', encoding="utf-8")
    rng = random.Random(scenario.seed)
    brokers = Brokers(data_dir, "--config", str(config))
    run = CrashRun(scenario, brokers)
    outcome = run.outcome
    progress(
        f"crash run: seed {scenario.seed}, {scenario.kills} kills, producer mode "
        f"{scenario.mode}, data in {data_dir}"
    )
    brokers.start()
    threads = [
        run.guarded(f"producer-{i}", functools.partial(run.produce, i))
        for i in range(scenario.producers)
    ]
    if scenario.consume:
        threads.append(run.guarded("consumer", run.consume))
    try:
        for cycle in range(1, scenario.kills + 1):
            delay = rng.uniform(scenario.min_delay, scenario.max_delay)
            time.sleep(delay)  # the random moment of the kill: the point of the test
            at, dead = brokers.kill()
            with run.lock:
                outcome.killed_at[brokers.incarnation] = at
                outcome.kills = cycle
            started = time.monotonic()
            server = brokers.start()
            warnings = _recovery_warnings(server)  # its recovery, for the progress line
            with run.lock:
                outcome.recovery_warnings += _recovery_warnings(dead)  # its whole life
                counts = (
                    f"kill {cycle}/{scenario.kills} after {delay:.2f} s: "
                    f"acknowledged {len(outcome.acknowledged)}, "
                    f"unconfirmed {len(outcome.unconfirmed)}, "
                    f"delivered {len(outcome.deliveries)}; "
                    f"restarted in {time.monotonic() - started:.2f} s"
                )
            progress(counts + "".join(f"\n  {w}" for w in warnings))
    finally:
        run.stop.set()
        brokers.stop()  # wakes the threads waiting for a broker
        for thread in threads:
            thread.join(WAIT)
    last = brokers.server
    assert last is not None
    run.drain(last.url, brokers.incarnation)
    code = last.stop(signal.SIGTERM)
    if code != 0:
        outcome.errors.append(f"the last broker exited with {code} on SIGTERM")
    outcome.recovery_warnings += _recovery_warnings(last)
    return outcome


# -- the tests ------------------------------------------------------------------------------


def _crash_test(tmp_path: Path, mode: str) -> dict[str, Any]:
    """A few kills with the producer in ``mode``; asserts the guarantees, returns the summary."""
    scenario = Scenario(kills=5, seed=seed_from_env(), max_delay=1.2, mode=mode)
    print(f"crash test seed: {scenario.seed} (replay: CHUTE_CRASH_SEED={scenario.seed})")
    outcome = run_scenario(scenario, tmp_path / "data")
    summary = outcome.summary()
    print(summary)
    print(outcome.describe())
    assert not outcome.violations(), outcome.describe()
    assert outcome.kills == scenario.kills
    assert summary["acknowledged"] > 0
    assert summary["delivered"] >= summary["acknowledged"]
    return summary


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    _crash_test(tmp_path, "sync")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_kill_9_loses_nothing_a_confirm_window_confirmed(tmp_path: Path) -> None:
    _crash_test(tmp_path, "window")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_kill_9_keeps_windowed_transactions_whole(tmp_path: Path) -> None:
    summary = _crash_test(tmp_path, "tx-window")
    assert summary["transactions"] > 0
    assert summary["uncommitted_stored"] == 0
    assert summary["transactions_partial"] == 0


def _receive_all(url: str, count: int) -> list[chute.Received]:
    got: list[chute.Received] = []
    with chute.connect(url) as conn, conn.session(ack="client") as session:
        consumer = session.consumer(QUEUE, prefetch=100)
        for _ in range(count):
            message = consumer.receive(timeout=WAIT)
            assert message is not None, f"only {len(got)} of {count} messages came back"
            got.append(message)
        assert consumer.receive(timeout=0.2) is None
        got[-1].ack()
    return got


def test_sigterm_loses_nothing_and_marks_the_unacked_redelivered(tmp_path: Path) -> None:
    bodies = [b"t-%03d" % i for i in range(50)]
    srv = start_server(tmp_path)
    with chute.connect(srv.url) as conn, conn.session(ack="client") as session:
        for body in bodies:
            session.send(QUEUE, body, persistent=True)
        consumer = session.consumer(QUEUE, prefetch=1)
        taken = consumer.receive(timeout=WAIT)
        assert taken is not None
        assert (taken.body, taken.redelivered) == (bodies[0], False)
        # not acked: the broker stops with it in flight
        assert srv.stop(signal.SIGTERM) == 0
    assert "stopped" in srv.output

    srv = start_server(tmp_path)
    got = _receive_all(srv.url, len(bodies))
    assert srv.stop(signal.SIGTERM) == 0
    assert Counter(m.body for m in got) == Counter(bodies)
    flagged = {m.body for m in got if m.redelivered}
    assert bodies[0] in flagged
    # prefetch=1: besides the one taken, at most the next one was handed to the client
    assert flagged <= set(bodies[:2]), flagged


def _newest_written_segment(journal: Path) -> tuple[Path, int]:
    """The newest segment file holding records, and where its records end."""
    for path in sorted(journal.glob("*.seg"), reverse=True):
        end = len(path.read_bytes().rstrip(b"\x00"))
        if end > 16:  # more than the segment header
            return path, end
    raise AssertionError(f"no segment with records in {journal}")


def test_corrupt_record_is_skipped_and_reported(tmp_path: Path) -> None:
    bodies = [b"c-%03d-" % i + b"x" * 100 for i in range(200)]
    srv = start_server(tmp_path)
    with chute.connect(srv.url) as conn, conn.session() as session:
        for body in bodies:
            session.send(QUEUE, body, persistent=True)
    srv.stop(signal.SIGKILL)

    segment, end = _newest_written_segment(srv.data_dir / "journal")
    data = bytearray(segment.read_bytes())
    middle = 16 + (end - 16) // 2
    data[middle] ^= 0xFF
    segment.write_bytes(bytes(data))

    srv = start_server(tmp_path)  # raises if it does not come up
    number = int(segment.stem)
    assert re.search(rf"WARNING .*segment {number} offset \d+: .*skipped", srv.output), srv.output
    assert "skipped 1 corrupt records" in srv.output, srv.output
    with chute.connect(srv.url) as conn:
        depth = sum(d["depth"] for d in conn.stat()["destinations"] if d["address"] == QUEUE)
    got = _receive_all(srv.url, depth)
    assert srv.stop(signal.SIGTERM) == 0
    counts = Counter(m.body for m in got)
    assert set(counts.values()) == {1}
    assert set(counts) <= set(bodies)
    assert len(bodies) - len(counts) == 1, "exactly the corrupt record's message is gone"
