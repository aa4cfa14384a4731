"""A live and its backup linked through a relay (docs/ha.md, "Failure cases"): the
replication link cut (it stops passing bytes; etcd still sees both) or slow (every
byte delayed). Either way the backup is dropped from the in-sync set after
``drop_after_ms`` and producers go on; once bytes flow again it catches up and is in
sync again, and the live killed then, it takes over with every confirmed send."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import ChuteServer, free_port
from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.relay import Relay
from tests.integration.test_ha import DEADLINE, Pair, _produce, drain, kill

DROP_AFTER_MS = 1000


@pytest.fixture
def pair(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Pair]:
    made = Pair(tmp_path, etcd)
    made.config.write_text(f"[cluster]\nttl = 2\ndrop_after_ms = {DROP_AFTER_MS}\n")
    yield made
    made.stop()


def _live_behind(pair: Pair, relay_delay: float) -> tuple[ChuteServer, Relay]:
    """The live, whose backups reach its replication port through a relay."""
    port = free_port()
    relay = Relay(("127.0.0.1", port), delay=relay_delay)
    config = pair.tmp_path / "live.toml"
    config.write_text(
        f"[cluster]\nttl = 2\ndrop_after_ms = {DROP_AFTER_MS}\n"
        f'replication_port = {port}\nreplication_advertise = "{relay.address}"\n'
    )
    live = pair.spawn("one", config=config)
    live.wait_for_line("chute listening", timeout=DEADLINE)
    return live, relay


def _until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.01)


def test_a_backup_cut_off_from_the_live_is_dropped_and_catches_up_once_healed(
    pair: Pair,
) -> None:
    live, relay = _live_behind(pair, 0.0)
    try:
        backup = pair.spawn("two")
        backup.wait_for_line("in sync with the live", timeout=DEADLINE)
        assert relay.accepted == 1, "the backup did not come through the relay"
        confirmed: list[str] = []
        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(live.url, 0, confirmed, stop))
        producer.start()
        try:
            _until(lambda: len(confirmed) >= 100, "the producer did not get going")
            relay.freeze()
            line = live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
            at_drop = len(confirmed)
            _until(lambda: len(confirmed) >= at_drop + 200, "producers stalled after the drop")
            relay.thaw()
            live.wait_for_line("is in sync", start=live.lines.index(line), timeout=DEADLINE)
            _until(lambda: len(confirmed) >= at_drop + 400, "producers stalled after the heal")
        finally:
            relay.thaw()
            stop.set()
            producer.join(DEADLINE)
        kill(live)
        backup.wait_for_line("chute listening", timeout=DEADLINE)
        got = set(drain(backup))
        lost = [body for body in confirmed if body not in got]
        assert not lost, f"{len(lost)} of {len(confirmed)} confirmed lost, first {lost[:5]}"
    finally:
        relay.close()


def test_a_slow_backup_is_dropped_instead_of_stalling_producers(pair: Pair) -> None:
    """Every byte between the live and its backup takes longer than drop_after_ms: the
    backup is dropped, producers go on at the live's pace, and once they stop the
    backup catches up and is in sync again."""
    live, relay = _live_behind(pair, 0.0)
    try:
        backup = pair.spawn("two")
        backup.wait_for_line("in sync with the live", timeout=DEADLINE)
        relay.delay = 2 * DROP_AFTER_MS / 1000
        confirmed: list[str] = []
        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(live.url, 0, confirmed, stop))
        producer.start()
        try:
            line = live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
            assert "kept a confirmation waiting" in line
            at_drop = len(confirmed)
            # a synchronous producer, each send confirmed before the next: 300 more
            # would take 600 s if each waited for the slow backup
            _until(lambda: len(confirmed) >= at_drop + 300, "producers stalled on the slow backup")
        finally:
            stop.set()
            producer.join(DEADLINE)
        backup.wait_for_line("no longer in sync", timeout=DEADLINE)
        live.wait_for_line("is in sync", start=live.lines.index(line), timeout=DEADLINE)
        kill(live)
        backup.wait_for_line("chute listening", timeout=DEADLINE)
        got = set(drain(backup))
        lost = [body for body in confirmed if body not in got]
        assert not lost, f"{len(lost)} of {len(confirmed)} confirmed lost, first {lost[:5]}"
    finally:
        relay.close()
