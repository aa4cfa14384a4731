"""A node's live and backups (docs/ha.md): real etcd, real ``chute serve`` processes,
each with its own data directory, and the native client.

The live is whichever process holds the node's lease; a second process started with
the same ``--node`` becomes its backup, catches up and stays in sync; killed with
SIGKILL, the live's place is taken by the backup, with every message a producer had
confirmed; a live restarted after it was deposed rejoins as a backup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from chute.client.blocking import connect
from chute.errors import ChuteError
from tests.integration.conftest import ChuteServer, free_port
from tests.integration.etcd_fixture import EtcdProcess

CLUSTER = "t"
DEADLINE = 30.0
QUEUE = "orders"


class Pair:
    """The processes of node ``a`` started for one test (killed at its end)."""

    def __init__(self, tmp_path: Path, etcd: EtcdProcess) -> None:
        self.tmp_path = tmp_path
        self.url = f"etcd://{etcd.address}/{CLUSTER}"
        self.config = tmp_path / "ha.toml"
        self.config.write_text("[cluster]\nttl = 2\ndrop_after_ms = 5000\n")
        self.started: list[ChuteServer] = []

    def spawn(
        self,
        name: str,
        port: int | None = None,
        http_port: int = 0,
        etcd: str | None = None,
        config: Path | None = None,
        *,
        extra: Sequence[str] = (),
    ) -> ChuteServer:
        """Start a process of node ``a`` with its data in ``tmp_path/name``; returns at once.
        ``config``: its configuration file (default: the pair's); ``extra``: more flags
        (a later flag wins: ``--stomp-port``, say)."""
        port = port or free_port()
        data_dir = self.tmp_path / name
        cmd = [
            sys.executable,
            "-m",
            "chute.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--stomp-port",
            "0",
            "--http-port",
            str(http_port),
            "--config",
            str(config or self.config),
            "--cluster",
            self.url if etcd is None else f"etcd://{etcd}/{CLUSTER}",
            "--node",
            "a",
            *extra,
        ]
        process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        server = ChuteServer(process, port, data_dir)

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                with server.arrived:
                    server.lines.append(line.rstrip("\n"))
                    server.arrived.notify_all()

        threading.Thread(target=pump, daemon=True).start()
        self.started.append(server)
        return server

    def live(self, name: str, etcd: str | None = None) -> ChuteServer:
        server = self.spawn(name, etcd=etcd)
        server.wait_for_line("chute listening", timeout=DEADLINE)
        return server

    def stop(self) -> None:
        for server in self.started:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait(10)


@pytest.fixture
def pair(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Pair]:
    made = Pair(tmp_path, etcd)
    yield made
    made.stop()


def send(server: ChuteServer, bodies: list[str]) -> None:
    with connect(server.url) as conn, conn.session() as session:
        for body in bodies:
            session.send(QUEUE, body)


def drain(server: ChuteServer, within: float = 1.0) -> list[str]:
    """Every message of the queue, acked, until none came for ``within`` seconds."""
    got: list[str] = []
    with connect(server.url) as conn, conn.session() as session:
        consumer = session.consumer(QUEUE)
        while (item := consumer.receive(timeout=within)) is not None:
            got.append(item.body if isinstance(item.body, str) else item.body.decode())
            item.ack()
    return got


def kill(server: ChuteServer) -> None:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)


def test_a_second_process_of_a_node_is_its_backup_and_takes_over(pair: Pair) -> None:
    live = pair.live("one")
    send(live, [f"early-{i}" for i in range(200)])  # before the backup: it catches up
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    live.wait_for_line("is in sync", timeout=DEADLINE)
    send(live, [f"late-{i}" for i in range(200)])
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    # each change of role logged once: backup (its one link), then live
    roles = [x for x in backup.lines if "backup of the live at" in x or "is live here" in x]
    assert len(roles) == 2, "\n".join(backup.lines)
    assert "backup of the live at" in roles[0]
    assert "is live here" in roles[1]
    got = drain(backup)
    assert sorted(got) == sorted(
        [f"early-{i}" for i in range(200)] + [f"late-{i}" for i in range(200)]
    )


def _produce(server_url: str, window: int, confirmed: list[str], stop: threading.Event) -> None:
    """Send until the connection breaks. ``confirmed``: what the broker confirmed (with a
    window of ``window``, all but the last ``window`` sends that returned; with a
    negative one, transactions of ``-window`` sends, each confirmed by its commit)."""
    sent: list[str] = []
    try:
        if window < 0:
            with connect(server_url) as conn, conn.session(transacted=True) as session:
                while not stop.is_set():
                    batch = [f"m-{len(sent) + i}" for i in range(-window)]
                    for body in batch:
                        session.send(QUEUE, body)
                    session.commit()
                    sent += batch
                    confirmed[:] = sent
            return
        with connect(server_url) as conn, conn.session(confirm_window=window) as session:
            while not stop.is_set():
                body = f"m-{len(sent)}"
                session.send(QUEUE, body)
                sent.append(body)
                confirmed[:] = sent[: max(0, len(sent) - window)]
    except (ChuteError, OSError):
        return


@pytest.mark.parametrize("window", [0, 64, -10], ids=["synchronous", "windowed", "transacted"])
def test_kill_9_of_the_live_mid_stream_loses_nothing_confirmed(pair: Pair, window: int) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    confirmed: list[str] = []
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(live.url, window, confirmed, stop))
    producer.start()
    end = time.monotonic() + DEADLINE
    while len(confirmed) < 300:
        assert time.monotonic() < end, "the producer did not get going"
        time.sleep(0.01)
    kill(live)
    stop.set()
    producer.join(DEADLINE)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    got = drain(backup)
    assert len(got) == len(set(got)), "a message stored twice"
    lost = [body for body in confirmed if body not in set(got)]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"


@pytest.mark.parametrize("window", [0, 64], ids=["synchronous", "windowed"])
def test_a_backup_that_stalls_holds_confirmations_and_takes_over_with_all_of_them(
    pair: Pair, window: int
) -> None:
    """The backup stops (SIGSTOP) for less than drop_after_ms: the live confirms nothing
    it has not acked; the live killed, the backup resumed holds every confirmed send."""
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    confirmed: list[str] = []
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(live.url, window, confirmed, stop))
    producer.start()
    end = time.monotonic() + DEADLINE
    while len(confirmed) < 300:
        assert time.monotonic() < end, "the producer did not get going"
        time.sleep(0.01)
    backup.process.send_signal(signal.SIGSTOP)
    stalled = len(confirmed)
    end = time.monotonic() + 1.0  # well within drop_after_ms
    while time.monotonic() < end and len(confirmed) <= stalled + window + 10:
        time.sleep(0.01)
    assert len(confirmed) <= stalled + window + 10, "confirmed while the backup was stopped"
    kill(live)
    backup.process.send_signal(signal.SIGCONT)
    stop.set()
    producer.join(DEADLINE)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    got = set(drain(backup))
    lost = [body for body in confirmed if body not in got]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"


def test_a_live_stopped_cleanly_hands_over_to_its_backup(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    send(live, [f"n-{i}" for i in range(100)])
    assert live.stop() == 0
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    assert sorted(drain(backup)) == sorted(f"n-{i}" for i in range(100))


def test_a_deposed_live_rejoins_as_a_backup_and_can_take_over_again(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    send(live, ["first"])
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    send(backup, ["second"])
    again = pair.spawn("one")  # the old live's data directory, holding "first" only
    again.wait_for_line("in sync with the live", timeout=DEADLINE)
    send(backup, ["third"])
    kill(backup)
    again.wait_for_line("chute listening", timeout=DEADLINE)
    assert sorted(drain(again)) == ["first", "second", "third"]


def test_a_backup_whose_data_was_deleted_rebuilds_from_the_live(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    send(live, [f"x-{i}" for i in range(100)])
    kill(backup)
    shutil.rmtree(pair.tmp_path / "two")
    send(live, [f"y-{i}" for i in range(100)])  # with min_in_sync 1, the live goes on alone
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    got = drain(backup)
    assert sorted(got) == sorted([f"x-{i}" for i in range(100)] + [f"y-{i}" for i in range(100)])


def test_a_backup_that_stalls_too_long_is_dropped_and_producers_go_on(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    backup.process.send_signal(signal.SIGSTOP)
    try:
        send(live, ["while it stalls"])  # held, then confirmed without it after drop_after_ms
        line = live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
        assert "kept a confirmation waiting" in line
    finally:
        backup.process.send_signal(signal.SIGCONT)
    backup.wait_for_line("no longer in sync", timeout=DEADLINE)
    live.wait_for_line("is in sync", start=live.lines.index(line), timeout=DEADLINE)


def test_a_live_paused_past_its_lease_confirms_nothing_after_a_backup_took_over(
    pair: Pair,
) -> None:
    """SIGSTOP of the live for longer than its lease: the backup takes over; resumed, the
    old live confirms nothing more (it stops), and everything it confirmed is on the new."""
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    confirmed: list[str] = []
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(live.url, 0, confirmed, stop))
    producer.start()
    end = time.monotonic() + DEADLINE
    while len(confirmed) < 100:
        assert time.monotonic() < end, "the producer did not get going"
        time.sleep(0.01)
    live.process.send_signal(signal.SIGSTOP)
    paused = len(confirmed)
    backup.wait_for_line("chute listening", timeout=DEADLINE)
    send(backup, ["after the take-over"])
    live.process.send_signal(signal.SIGCONT)
    assert live.process.wait(DEADLINE) == 1  # it stepped down and stopped
    stop.set()
    producer.join(DEADLINE)
    assert (
        "no longer live (its lease in etcd expired while a backup was recorded in sync"
        in live.output
    )
    assert len(confirmed) <= paused + 1, "the deposed live confirmed after its lease"
    got = set(drain(backup))
    lost = [body for body in confirmed if body not in got]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"


class BlackHole:
    """A TCP relay (on a thread of its own) that can stop passing bytes without closing
    anything, and pass them again: a link cut off, then healed."""

    def __init__(self, target: str) -> None:
        self.host, _, port = target.rpartition(":")
        self.target_port = int(port)
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self._passing: asyncio.Event | None = None
        started = threading.Event()
        threading.Thread(target=self._run, args=(started,), daemon=True).start()
        assert started.wait(DEADLINE)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self._passing = asyncio.Event()
        self._passing.set()
        self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        started.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        passing = self._passing
        assert passing is not None

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    await passing.wait()
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        assert self._passing is not None
        self.loop.call_soon_threadsafe(self._passing.clear)

    def heal(self) -> None:
        assert self._passing is not None
        self.loop.call_soon_threadsafe(self._passing.set)


def test_a_live_cut_off_from_etcd_stops_confirming_and_loses_nothing_confirmed(
    pair: Pair, etcd: EtcdProcess
) -> None:
    """The live reaches etcd through a relay that stops passing bytes: it stops
    confirming within its lease, the backup takes over, and once the cut heals the old
    live stops; every send it confirmed is on the new live."""
    relay = BlackHole(etcd.address)
    live = pair.live("one", etcd=relay.address)
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    confirmed: list[str] = []
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(live.url, 0, confirmed, stop))
    producer.start()
    try:
        end = time.monotonic() + DEADLINE
        while len(confirmed) < 100:
            assert time.monotonic() < end, "the producer did not get going"
            time.sleep(0.01)
        relay.cut()
        backup.wait_for_line("chute listening", timeout=DEADLINE)
        at_take_over = len(confirmed)
        send(backup, ["after the take-over"])
        relay.heal()
        assert live.process.wait(DEADLINE) == 1, live.output  # it stepped down
        assert (
            "no longer live (its lease in etcd expired while a backup was recorded in sync"
            in live.output
        )
        assert len(confirmed) == at_take_over, "the cut-off live confirmed after the take-over"
    finally:
        relay.heal()
        stop.set()
        producer.join(DEADLINE)
    got = set(drain(backup))
    lost = [body for body in confirmed if body not in got]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"
