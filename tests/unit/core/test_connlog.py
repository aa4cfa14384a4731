"""Connect and disconnect lines: a client that reconnects over and over does not flood
the log at INFO (the Spark connector connects per micro-batch), and still shows up."""

from __future__ import annotations

import itertools
import logging

import pytest

from chute.core.operations.connection import connect
from chute.core.operations.connlog import CONNECTIONS, ConnectionLog
from chute.core.rules.broker import Broker

SESSION = logging.getLogger("chute.session")
SERVER = logging.getLogger("chute.server")
_ports = itertools.count(40000)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def info_lines(caplog: pytest.LogCaptureFixture, host: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.INFO and host in r.getMessage()
    ]


def cycle(log: ConnectionLog, conn_id: str, *, host: str = "10.0.0.1", user: str = "spark") -> None:
    peer = f"{host}:{next(_ports)}"  # a new source port each time, as a real client has
    log.connected(SESSION, conn_id, protocol="native", peer=peer, user=user, client_id=None)
    log.disconnected(SERVER, conn_id, protocol="native", peer=peer)


def test_fifty_connect_close_cycles_of_one_client_give_two_info_lines(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    host = "10.99.0.50"  # this test's own: CONNECTIONS is the process's
    for _ in range(50):
        peer = f"{host}:{next(_ports)}"
        conn = connect(broker, None, None, protocol="native", peer=peer)
        conn.close()
        CONNECTIONS.disconnected(SERVER, conn.id, protocol="native", peer=peer)
    info = info_lines(caplog, host)
    assert len(info) == 2, info  # the first connect, and its disconnect
    assert "connected from" in info[0]
    assert "disconnected" in info[1]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and host in r.getMessage()]
    assert len(debug) == 98  # every other line is still there, at DEBUG


def test_reconnections_are_summarized_at_info_once_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    log = ConnectionLog(quiet_s=60, summary_s=60, clock=clock)
    for n in range(120):  # one every 2 s: the first, then 119 reconnections
        cycle(log, f"c{n}")
        clock.now += 2
    info = info_lines(caplog, "10.0.0.1")
    summaries = [line for line in info if "reconnection" in line]
    assert len(info) == 2 + len(summaries)
    assert 3 <= len(summaries) <= 4  # 240 s: one per 60 s
    assert "native client from 10.0.0.1 (user=spark, client_id=None):" in summaries[0]
    counted = sum(int(s.split(": ")[1].split(" ")[0]) for s in summaries)
    assert 119 - 30 <= counted <= 119  # all but those since the last summary


def test_after_a_quiet_time_a_connection_is_info_again_and_what_came_before_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    log = ConnectionLog(quiet_s=60, summary_s=600, clock=clock)
    for n in range(5):
        cycle(log, f"a{n}")
        clock.now += 1
    clock.now += 61
    cycle(log, "b")
    info = info_lines(caplog, "10.0.0.1")
    assert len(info) == 5, info  # a0 in and out, the summary of 4, b in and out
    assert ": 4 reconnection(s) in the last" in info[2]
    assert "client b connected" in info[3]


def test_other_users_hosts_and_open_connections_are_not_reconnections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    log = ConnectionLog(clock=clock)
    cycle(log, "c1")
    cycle(log, "c2", user="alice")  # another user
    cycle(log, "c3", host="10.0.0.2")  # another machine
    for conn_id, peer in (("c4", "10.0.0.3:1"), ("c5", "10.0.0.3:2")):  # both open: no close
        log.connected(SESSION, conn_id, protocol="native", peer=peer, user="bob", client_id=None)
    log.disconnected(SERVER, "c9", protocol="stomp", peer="10.0.0.3:9")  # not seen connecting
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(info) == 9, info  # every line: none of these reconnects
