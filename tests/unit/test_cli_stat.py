"""``chute stat``'s table: columns, subscriptions under their topic, rates, redraws."""

from __future__ import annotations

import io
import json
import os
import signal
from typing import Any

import pytest

from chute.cli.stat import Sample, ctrl_c_between_draws, render, watch


def stats(enqueued: int = 10_310, acked: int = 27) -> dict[str, Any]:
    sub = {"name": "audit", "depth": 3, "ready": 3, "inflight": 0, "consumers": 1}
    return {
        "destinations": [
            {
                "address": "queue:orders",
                "depth": 1204,
                "ready": 1200,
                "inflight": 4,
                "consumers": 2,
                "enqueued": enqueued,
                "acked": 9106,
                "dead_lettered": 0,
            },
            {
                "address": "topic:prices",
                "depth": 3,
                "inflight": 0,
                "consumers": 1,
                "enqueued": 30,
                "acked": acked,
                "subscriptions": [{**sub, "enqueued": 30, "acked": acked}],
            },
        ],
        "connections": 3,
        "destination_count": 2,
        "memory": {"held": 1_258_291, "paging_at": 64 << 20},
        "producers": {"waiting": 1, "blocked_by": "memory"},
        "prepared": ["x1"],
        "uptime_s": 7500,
    }


def test_a_row_per_destination_numbers_right_aligned_subscriptions_indented() -> None:
    lines = render(stats()).splitlines()
    assert lines[0].split() == [
        "ADDRESS",
        "DEPTH",
        "READY",
        "INFLIGHT",
        "CONSUMERS",
        "ENQUEUED",
        "ACKED",
        "DEAD-LETTERED",
    ]
    assert lines[1].split() == ["queue:orders", "1,204", "1,200", "4", "2", "10,310", "9,106", "0"]
    assert lines[1].index("10,310") + 6 == lines[0].index("ENQUEUED") + len("ENQUEUED")
    assert lines[2].startswith("topic:prices ")
    assert lines[3].startswith("  audit ")
    assert lines[4] == ""
    assert lines[5:] == [
        "connections 3; destinations 2",
        "memory 1.2 MiB held, paging at 64.0 MiB; producers waiting 1 (memory)",
        "prepared transactions 1; up 2h 5m",
    ]


def test_rates_come_from_two_samples() -> None:
    table = render(stats(enqueued=10_810, acked=30), Sample(10.0, stats()), 12.0)
    header, orders, topic, audit = table.splitlines()[:4]
    assert header.split()[-2:] == ["IN/S", "OUT/S"]
    assert orders.split()[-2:] == ["250", "0"]
    assert topic.split()[-2:] == ["0", "1.5"]
    assert audit.split()[-2:] == ["0", "1.5"]  # a subscription's own previous counters


def test_no_destinations_says_so() -> None:
    assert "(no destinations)" in render({"destinations": [], "connections": 0})


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_clears_a_terminal_and_separates_tables_elsewhere() -> None:
    samples = iter([stats(), stats(enqueued=10_410)])
    slept: list[float] = []
    times = iter([0.0, 2.0])
    piped = io.StringIO()
    watch(
        lambda: next(samples),
        piped,
        every=2,
        count=2,
        clock=lambda: next(times),
        sleep=slept.append,
    )
    first, second = piped.getvalue().split("\n\nADDRESS")
    assert "IN/S" not in first
    assert "IN/S" in second
    assert second.splitlines()[1].split()[-2:] == ["50", "0"]
    assert slept == [2]

    terminal = Terminal()
    watch(stats, terminal, count=2, sleep=lambda _: None)
    assert terminal.getvalue().count("\x1b[H\x1b[2J") == 2

    lines = io.StringIO()
    watch(stats, lines, count=2, as_json=True, sleep=lambda _: None)
    assert [json.loads(line) for line in lines.getvalue().splitlines()] == [stats(), stats()]


def test_ctrl_c_during_a_fetch_lets_the_draw_finish_then_ends_the_watch() -> None:
    """Ctrl-C must not land inside the client's call (it could leave the connection's
    lock held, and closing it would hang): the fetch under way ends, the draw is made,
    and the watch ends with KeyboardInterrupt; a second Ctrl-C interrupts at once."""
    fetched: list[int] = []

    def fetch() -> dict[str, Any]:
        if not fetched:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the call
        fetched.append(1)
        return stats()

    out = io.StringIO()
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), ctrl_c_between_draws() as sleep:
        watch(fetch, out, every=60, sleep=sleep)
    assert fetched == [1]
    assert out.getvalue().startswith("ADDRESS")
    assert signal.getsignal(signal.SIGINT) is before  # given back


def test_a_second_ctrl_c_interrupts_at_once() -> None:
    with ctrl_c_between_draws():
        os.kill(os.getpid(), signal.SIGINT)  # the first only asks
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
