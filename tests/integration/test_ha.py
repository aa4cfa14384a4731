"""A node's live and backups (docs/ha.md): real etcd, real ``chute serve`` processes,
each with its own data directory, and the native client.

The live is whichever process holds the node's lease; a second process started with
the same ``--node`` becomes its backup, catches up and stays in sync; killed with
SIGKILL, the live's place is taken by the backup, with every message a producer had
confirmed; a live restarted after it was deposed rejoins as a backup."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chute.client.blocking import connect
from chute.errors import ChuteError, NotLive
from chute.protocol import Error, PacketCodec, SessionOpen, StatFetch, StatPage
from chute.protocol.wire import encode_packet
from tests.integration.conftest import ChuteServer, free_port
from tests.integration.etcd_fixture import EtcdProcess, start_etcd
from tests.integration.test_cluster_view import conforms

CLUSTER = "t"
DEADLINE = 30.0
QUEUE = "orders"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    process = start_etcd(tmp_path)
    yield process
    process.kill()


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
    ) -> ChuteServer:
        """Start a process of node ``a`` with its data in ``tmp_path/name``; returns at once.
        ``config``: its configuration file (default: the pair's)."""
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
    assert len(roles) == 2, roles
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


def test_stat_shows_the_role_the_epoch_and_the_backups(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    result = subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", "--json", "--url", live.url],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    cluster = json.loads(result.stdout)["cluster"]
    assert cluster["role"] == "live"
    assert isinstance(cluster["epoch"], int)
    assert cluster["epoch"] > 0
    assert [b["state"] for b in cluster["backups"]] == ["in-sync"]


def test_a_backup_restarted_is_listed_once_by_its_newest_link(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    kill(backup)
    line = live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
    backup = pair.spawn("two")
    live.wait_for_line("is in sync", start=live.lines.index(line), timeout=DEADLINE)
    backups = json.loads(_stat(live, "--json"))["cluster"]["backups"]
    assert [b["state"] for b in backups] == ["in-sync"]


def test_the_admin_api_and_metrics_of_the_live_show_its_role_and_backups(pair: Pair) -> None:
    http = free_port()
    live = pair.spawn("one", http_port=http)
    live.wait_for_line("chute listening", timeout=DEADLINE)
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    base = f"http://127.0.0.1:{http}"
    status, body = _get(f"{base}/api/cluster")
    assert status == 200
    cluster = json.loads(body)
    assert cluster["role"] == "live"
    assert cluster["epoch"] > 0
    [only] = cluster["backups"]
    assert only["state"] == "in-sync"
    conforms(cluster, "Cluster")
    status, body = _get(f"{base}/metrics")
    assert status == 200
    assert 'chute_ha_role{node="a",role="live"} 1.0' in body
    assert f'chute_ha_epoch{{node="a"}} {float(cluster["epoch"])}' in body
    assert f'chute_ha_backup_in_sync{{address="{only["address"]}",node="a"}} 1.0' in body
    kill(backup)
    live.wait_for_line("dropped from the in-sync set", timeout=DEADLINE)
    status, body = _get(f"{base}/metrics")
    assert f'chute_ha_backup_in_sync{{address="{only["address"]}",node="a"}} 0.0' in body


def test_a_backup_refuses_clients_naming_the_live(pair: Pair) -> None:
    live = pair.live("one")
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    refused = rf"backup .*its live is at 127\.0\.0\.1:{live.port}"
    with pytest.raises(NotLive, match=refused), connect(backup.url):
        pass
    # listed first, the backup gives way to the live: the connection works there
    both = f"chute://127.0.0.1:{backup.port},127.0.0.1:{live.port}?order=listed"
    with connect(both) as conn, conn.session() as session:
        session.send(QUEUE, "through the live")
    assert drain(live) == ["through the live"]


def _stat(server: ChuteServer, *flags: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "chute.cli", "stat", *flags, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    ).stdout


def test_chute_stat_on_a_backup_shows_its_role_its_live_and_its_position(pair: Pair) -> None:
    live = pair.live("one")
    send(live, ["before"])
    backup = pair.spawn("two")
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    stats = json.loads(_stat(backup, "--json"))
    assert stats["destinations"] == []
    cluster = stats["cluster"]
    assert (cluster["name"], cluster["node"], cluster["role"]) == (CLUSTER, "a", "backup")
    assert (cluster["live"], cluster["in_sync"]) == (f"127.0.0.1:{live.port}", True)
    live_epoch = json.loads(_stat(live, "--json"))["cluster"]["epoch"]
    assert cluster["epoch"] == live_epoch
    assert cluster["position"]["segment"] > 0
    assert cluster["position"]["offset"] > 0
    text = _stat(backup)
    assert f"this process is a backup (epoch {live_epoch}), in sync" in text
    assert f"its live at 127.0.0.1:{live.port}" in text
    # statistics first, then work: the work is refused, naming the live
    codec = PacketCodec()
    with socket.create_connection(("127.0.0.1", backup.port), timeout=DEADLINE) as sock:
        sock.sendall(encode_packet(StatFetch(), 1) + encode_packet(SessionOpen(1), 2))
        answers: list[object] = []
        while len(answers) < 2 and (data := sock.recv(65536)):
            codec.receive_data(data)
            answers += [packet for _, packet in codec.next_packets()]
    assert isinstance(answers[0], StatPage)
    assert isinstance(answers[1], Error)
    assert answers[1].code == "not-live"
    assert f"its live is at 127.0.0.1:{live.port}" in answers[1].reason


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
    assert "no longer live" in live.output
    assert len(confirmed) <= paused + 1, "the deposed live confirmed after its lease"
    got = set(drain(backup))
    lost = [body for body in confirmed if body not in got]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_backup_answers_health_and_metrics_and_refuses_the_rest(pair: Pair) -> None:
    live = pair.live("one")
    http = free_port()
    backup = pair.spawn("two", http_port=http)
    backup.wait_for_line("in sync with the live", timeout=DEADLINE)
    base = f"http://127.0.0.1:{http}"
    assert _get(f"{base}/healthz") == (200, '{"status": "alive", "role": "backup"}')
    status, body = _get(f"{base}/readyz")
    assert status == 503
    assert json.loads(body) == {
        "status": "backup",
        "live": f"127.0.0.1:{live.port}",
        "in_sync": True,
    }
    status, body = _get(f"{base}/metrics")
    assert status == 200
    assert 'chute_ha_role{role="backup"} 1' in body
    assert "chute_ha_in_sync 1" in body
    status, body = _get(f"{base}/api/cluster")
    assert status == 200
    cluster = json.loads(body)
    assert (cluster["name"], cluster["node"], cluster["nodes"]) == (CLUSTER, "a", [])
    assert (cluster["role"], cluster["live"], cluster["in_sync"]) == (
        "backup",
        f"127.0.0.1:{live.port}",
        True,
    )
    assert cluster["epoch"] > 0
    assert cluster["position"]["segment"] > 0
    conforms(cluster, "Cluster")
    assert _get(f"{base}/api/destinations") == (200, '{"destinations": [], "next": null}')
    for path in ("/api/v1/destinations", "/api/overview", "/api/destinations/queue:orders"):
        status, body = _get(f"{base}{path}")
        assert status == 503, path
        assert f"its live is at 127.0.0.1:{live.port}" in body
    kill(live)
    backup.wait_for_line("chute listening", timeout=DEADLINE)  # the port is the broker's now
    assert _get(f"{base}/healthz") == (200, '{"status": "alive"}')


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
        assert "no longer live" in live.output
        assert len(confirmed) == at_take_over, "the cut-off live confirmed after the take-over"
    finally:
        relay.heal()
        stop.set()
        producer.join(DEADLINE)
    got = set(drain(backup))
    lost = [body for body in confirmed if body not in got]
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost, first {lost[:5]}"
