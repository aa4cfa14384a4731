"""``chute stat``: the broker's statistics as a table, once or redrawn (``--watch``).

One row per destination, its subscriptions indented under a topic, numbers
right-aligned with thousands separators, then a few broker-wide lines (once a
stream is listed, a ``KIND`` column and a stream's ``BYTES`` and ``OFFSETS``,
``first..head``, come too; what a stream does not count, ``READY``, ``ACKED``,
``EXPIRED``, ``DEAD-LETTERED``, stays blank on its row)::

    ADDRESS          DEPTH  READY  INFLIGHT  CONSUMERS  ENQUEUED  ACKED  EXPIRED  DEAD-LETTERED
    queue:orders     1,204  1,200         4          2    10,310  9,106        0              0
    topic:prices         3                0          1        30     27        0              0
      audit              3      3         0          1        30     27        0              0

    connections 3; destinations 5 (2 made by use: anonymous 2)
    memory 1.2 MiB held, paging at 64.0 MiB; producers waiting 0
    prepared transactions 0; up 2h 5m

From a node of a cluster the nodes come first (``*`` marks the node answering), a
destination's DEPTH and CONSUMERS are the cluster's (its ``total``), and each node
holding the destination has a row of its own under it (the other columns are the
answering node's, as its JSON row is)::

    cluster prod, seen from node a (*)
    NODE  ADDRESS        STATE                        LINKS
    a *   10.0.0.1:5445  up                           b
    b     10.0.0.2:5445  up                           a
    c     10.0.0.3:5445  down (no answer within 2 s)  -

    ADDRESS       DEPTH  READY  INFLIGHT  CONSUMERS  ENQUEUED  ACKED
    queue:orders  1,204  1,000         4          2    10,310  9,106
      node a      1,004                           2
      node b        200                           0

:func:`render` draws one statistics document (what ``Connection.stat``
returns); with the previous sample beside it, it adds per-second rates of what
came in and what was acked (``IN/S``, ``OUT/S``). :func:`watch` samples every
few seconds until interrupted: on a terminal it clears the screen between
draws, elsewhere (a pipe, a file) the tables follow one another, a blank line
between. Pure but for the stream it writes and the clock it reads.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final, TextIO

from chute.cli.output import json_text, sockets_line

_COLUMNS: Final = (
    ("depth", "DEPTH"),
    ("ready", "READY"),
    ("inflight", "INFLIGHT"),
    ("consumers", "CONSUMERS"),
    ("enqueued", "ENQUEUED"),
    ("delivered", "DELIVERED"),
    ("acked", "ACKED"),
    ("expired", "EXPIRED"),
    ("dead_lettered", "DEAD-LETTERED"),
)
_ALWAYS: Final = frozenset({"depth", "inflight", "consumers", "enqueued", "acked"})
"""Columns shown even when no row has them (the others only when a broker says them);
every counter, ``redelivered`` and ``bytes`` too, is in ``--json``."""
_RATES: Final = (("enqueued", "IN/S"), ("acked", "OUT/S"))
_STREAM_COLUMNS: Final = (("bytes", "BYTES"), ("offsets", "OFFSETS"))
"""Shown after DEPTH, with KIND after ADDRESS, once a row is a stream."""
_NOT_A_STREAMS: Final = frozenset({"ready", "acked", "expired", "dead_lettered"})
"""Columns left blank on a stream's row: it keeps its messages for every reader."""
_CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"
_TOTALS: Final = frozenset({"depth", "consumers"})
"""What a destination's row of a cluster shows for the whole cluster (``total``)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """A statistics document and when it was taken (seconds, monotonic)."""

    at: float
    stats: dict[str, Any]


def render(stats: dict[str, Any], previous: Sample | None = None, now: float = 0.0) -> str:
    """The table and the broker-wide lines of ``stats``; with ``previous`` (taken
    ``now - previous.at`` seconds before), the rates since then too."""
    rows = list(_rows(stats["destinations"]))
    shown = [
        (key, title)
        for key, title in _COLUMNS
        if key in _ALWAYS or any(key in row for _, _, row in rows)
    ]
    streams = any(row.get("kind") == "stream" for _, _, row in rows)
    if streams:  # KIND, then a stream's bytes and offsets next to its depth
        shown[1:1] = _STREAM_COLUMNS
        shown.insert(0, ("kind", "KIND"))
    rates = previous is not None
    before = _by_key(previous.stats) if previous is not None else {}
    elapsed = now - previous.at if previous is not None else 0.0
    header = ["ADDRESS", *(title for _, title in shown)]
    if rates:
        header += [title for _, title in _RATES]
    table = [header]
    for label, row_key, row in rows:
        cells = [label, *(_cell(row, key) for key, _ in shown)]
        if rates:
            cells += [_rate(row, before.get(row_key), key, elapsed) for key, _ in _RATES]
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = []
    for cells in table:
        left = 2 if streams else 1  # the address (and the kind) to the left
        first = [c.ljust(w) for c, w in zip(cells[:left], widths[:left], strict=True)]
        rest = (c.rjust(w) for c, w in zip(cells[left:], widths[left:], strict=True))
        lines.append("  ".join([*first, *rest]).rstrip())
    if len(table) == 1:
        lines.append("(no destinations)")
    lines.append("")
    lines += broker_lines(stats)
    if "cluster" in stats:
        lines = [*cluster_lines(stats["cluster"]), "", *lines]
    return "\n".join(lines) + "\n"


def cluster_lines(cluster: dict[str, Any]) -> list[str]:
    """The cluster's nodes as seen from the node answering: name, address, state (with
    why a node is down) and the nodes each is linked to."""
    table = [["NODE", "ADDRESS", "STATE", "LINKS"]]
    for node in cluster["nodes"]:
        state = node["state"]
        if node.get("reason"):
            state += f" ({node['reason']})"
        name = node["name"] + (" *" if node["name"] == cluster["node"] else "")
        table.append([name, node["address"], state, ", ".join(node["links"]) or "-"])
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    lines = [f"cluster {cluster['name']}, seen from node {cluster['node']} (*)"]
    for cells in table:
        first = (c.ljust(w) for c, w in zip(cells[:3], widths, strict=True))
        lines.append("  ".join([*first, cells[3]]).rstrip())
    return lines


def backup_text(stats: dict[str, Any]) -> str:
    """What ``chute stat`` prints for a backup (high availability): its role, the
    node's epoch, its live, whether it is in sync, where its copy of the journal ends."""
    ha = stats["cluster"]
    position = ha["position"]
    return (
        f"node {ha['node']} of cluster {ha['name']}: this process is a backup "
        f"(epoch {ha['epoch']}), {'in sync' if ha['in_sync'] else 'not in sync'} "
        f"with its live at {ha['live'] or '(not known yet)'}; its journal reaches "
        f"segment {position['segment']}, offset {position['offset']:,}\n"
    )


def broker_lines(stats: dict[str, Any]) -> list[str]:
    """The broker-wide figures under the table: connections and destinations; memory
    and producers waiting; prepared transactions and uptime; sockets."""
    count = stats.get("destination_count", len(stats["destinations"]))
    first = f"connections {stats.get('connections', 0):,}; destinations {count:,}"
    made = stats.get("made")
    if made and made.get("total"):
        mine = ", ".join(f"{user} {n:,}" for user, n in made.get("by_user", {}).items())
        first += f" ({made['total']:,} made by use{f': {mine}' if mine else ''})"
    lines = [first]
    memory, producers = stats.get("memory"), stats.get("producers")
    second = []
    if memory:
        limit = memory.get("paging_at", 0)
        paging = f", paging at {_bytes(limit)}" if limit else ", never pages"
        second.append(f"memory {_bytes(memory.get('held', 0))} held{paging}")
    if producers is not None:
        waiting = f"producers waiting {producers.get('waiting', 0):,}"
        if producers.get("blocked_by"):
            waiting += f" ({producers['blocked_by']})"
        second.append(waiting)
    if second:
        lines.append("; ".join(second))
    third = []
    if "prepared" in stats:
        third.append(f"prepared transactions {len(stats['prepared']):,}")
    if stats.get("discarded"):
        third.append(f"discarded {stats['discarded']:,}")
    if "uptime_s" in stats:
        third.append(f"up {_duration(stats['uptime_s'])}")
    if third:
        lines.append("; ".join(third))
    if stats.get("sockets"):
        lines.append(sockets_line(stats["sockets"]))
    return lines


@contextlib.contextmanager
def ctrl_c_between_draws() -> Iterator[Callable[[float], None]]:
    """A ``sleep`` for :func:`watch` under which Ctrl-C ends the watch between two draws.

    Python raises KeyboardInterrupt wherever the main thread is; raised inside the
    client's call (just after a lock was taken, before the block that releases it), it
    left the lock held, and closing the connection then waited for ever. So the first
    Ctrl-C only asks: the draw under way ends, then the sleep raises KeyboardInterrupt
    itself. A second Ctrl-C interrupts at once (a broker that does not answer)."""
    asked = threading.Event()

    def ask(signum: int, frame: FrameType | None) -> None:
        asked.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def sleep(seconds: float) -> None:
        if asked.wait(seconds):
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield sleep
    finally:
        signal.signal(signal.SIGINT, previous)


def watch(
    fetch: Callable[[], dict[str, Any]],
    out: TextIO,
    *,
    every: float = 2.0,
    count: int = 0,
    as_json: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Draw ``fetch()`` every ``every`` seconds, ``count`` times (0: until Ctrl-C,
    whose KeyboardInterrupt goes to the caller). ``as_json``: one JSON document a
    line instead of tables."""
    terminal = out.isatty() and not as_json
    previous: Sample | None = None
    drawn = 0
    while True:
        stats = fetch()
        now = clock()
        text = json_text(stats) + "\n" if as_json else render(stats, previous, now)
        if terminal:
            text = _CLEAR_SCREEN + text
        elif drawn and not as_json:
            text = "\n" + text
        out.write(text)
        out.flush()
        previous = Sample(now, stats)
        drawn += 1
        if count and drawn >= count:
            return
        sleep(every)


def _rows(destinations: Sequence[dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(label, key, counters) for each destination, followed in a cluster by its depth
    and consumers on each node, and a topic by its subscriptions (their labels indented;
    their keys the destination's and their name)."""
    for d in destinations:
        yield d["address"], d["address"], d
        for name, figures in d.get("nodes", {}).items():
            yield f"  node {name}", f"{d['address']} node {name}", figures
        for s in d.get("subscriptions", ()):
            yield f"  {s['name']}", f"{d['address']} {s['name']}", s


def _by_key(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: row for _, key, row in _rows(stats["destinations"])}


def _cell(row: dict[str, Any], key: str) -> str:
    """One row's cell of column ``key`` (a stream's offsets as ``first..head``; in a
    cluster, a destination's depth and consumers in the whole cluster)."""
    if key in _TOTALS and "total" in row:
        return _number(row["total"].get(key))
    stream = row.get("kind") == "stream"
    if stream and key in _NOT_A_STREAMS:
        return ""
    if key == "offsets":
        return f"{row['first']:,}..{row['head']:,}" if stream else ""
    if key == "bytes":
        return _bytes(row["bytes"]) if isinstance(row.get("bytes"), int) else ""
    if key == "kind":
        return str(row.get("kind", ""))
    return _number(row.get(key))


def _rate(row: dict[str, Any], before: dict[str, Any] | None, key: str, elapsed: float) -> str:
    if row.get("kind") == "stream" and key in _NOT_A_STREAMS:
        return ""
    if before is None or elapsed <= 0 or key not in row or key not in before:
        return ""
    change = max(0, row[key] - before[key])  # a counter restarts with its destination
    per_second = change / elapsed
    return f"{per_second:,.0f}" if per_second >= 10 or per_second == 0 else f"{per_second:.1f}"


def _number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


def _duration(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {s}s"
    return f"{s}s"
