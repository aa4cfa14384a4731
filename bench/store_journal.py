"""Journal micro-benchmarks: append cost, synchronous syncs/s, recovery time.

    PYTHONPATH=. python bench/store_journal.py [--dir DIR] [--recovery-messages N]
                                                [--skip-recovery] [--seconds S]

* append: the caller-thread cost of ``Journal.add`` for a 1 KiB message,
  with the wire encoding cached (``Message.encoded``, as a decoded Send has
  it) and without (the journal encodes the content block itself);
* sync: one thread adds a message, calls ``sync`` and waits for the callback,
  in a loop; compared with a bare ``write`` + ``fdatasync`` loop on a
  pre-allocated file in the same directory (the disk's ceiling); then 4 and
  16 such threads at once (group commit: one sync serves several);
* recovery: open a journal holding N 1 KiB adds (default 1,000,000) and
  replay it (``Journal(...)`` plus ``recover()``), page cache warm: the index
  of every add, one window of each queue read back, the rest left paged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

from chute.content import encode_content
from chute.core.model.store import AddOp, QueueDefinition, QueueKind
from chute.message import Message
from chute.store.disk import FaultyDisk
from chute.store.journal import Journal

BODY = os.urandom(1024)


def message(i: int, *, cached: bool) -> Message:
    m = Message(BODY, id=f"msg-{i:012d}", timestamp=1_700_000_000_000 + i)
    if cached:
        m.encoded = encode_content(m)
    return m


def bench_append(directory: str, *, cached: bool, n: int = 200_000) -> tuple[float, float]:
    """µs per add: the caller's own cost (writer held off), and caller + writer per add."""
    path = os.path.join(directory, f"append-{cached}")
    disk = FaultyDisk()
    with Journal(path, sync="never", disk=disk, preallocate=False) as journal:
        journal.define(QueueDefinition("q", QueueKind.QUEUE))
        journal.flush()
        ops = [AddOp("q", ("q",), i, message(i, cached=cached)) for i in range(1, n + 1)]
        # 1. The caller alone: rounds of 2,000 adds with the writer parked in a write.
        rounds = []
        for first in range(0, n // 2, 2000):
            held, release = threading.Event(), threading.Event()

            def hold(
                operation: str, held: threading.Event = held, release: threading.Event = release
            ) -> None:
                if operation == "write" and not release.is_set():
                    held.set()
                    release.wait()

            disk.hook = hold
            journal.add(ops[first])
            held.wait()
            started = time.perf_counter()
            for op in ops[first + 1 : first + 2000]:
                journal.add(op)
            rounds.append((time.perf_counter() - started) / 1999 * 1e6)
            release.set()
            journal.flush()
        disk.hook = None
        alone = statistics.median(rounds)
        # 2. Caller and writer together, to the end of the flush: the CPU an add costs.
        half = n // 2
        started = time.perf_counter()
        for op in ops[half:]:
            journal.add(op)
        journal.flush()
        together = (time.perf_counter() - started) / (n - half) * 1e6
    shutil.rmtree(path)
    return alone, together


def bench_sync(directory: str, *, seconds: float = 5.0) -> tuple[float, int]:
    """Synchronous add+sync round trips per second, and the data syncs done."""
    path = os.path.join(directory, "sync")
    disk = FaultyDisk()
    with Journal(path, disk=disk) as journal:
        journal.define(QueueDefinition("q", QueueKind.QUEUE))
        journal.flush()
        done = threading.Event()

        def callback(error: BaseException | None) -> None:
            done.set()

        syncs_before = disk.data_syncs
        count = 0
        m = message(0, cached=True)
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            count += 1
            journal.add(AddOp("q", ("q",), count, m))
            done.clear()
            journal.sync(callback)
            done.wait()
        rate = count / (time.perf_counter() - started)
        syncs = disk.data_syncs - syncs_before
    shutil.rmtree(path)
    return rate, syncs


def bench_sync_threads(directory: str, *, threads: int, seconds: float = 5.0) -> tuple[float, int]:
    """Like bench_sync with several producer threads: group commit shares the syncs."""
    path = os.path.join(directory, f"sync-{threads}")
    disk = FaultyDisk()
    with Journal(path, disk=disk) as journal:
        journal.flush()
        syncs_before = disk.data_syncs
        counts = [0] * threads
        stop = time.perf_counter() + seconds

        def producer(t: int) -> None:
            done = threading.Event()

            def callback(error: BaseException | None) -> None:
                done.set()

            queue = f"q{t}"
            m = message(t, cached=True)
            while time.perf_counter() < stop:
                counts[t] += 1
                journal.add(AddOp(queue, (queue,), counts[t], m))
                done.clear()
                journal.sync(callback)
                done.wait()

        started = time.perf_counter()
        workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rate = sum(counts) / (time.perf_counter() - started)
        syncs = disk.data_syncs - syncs_before
    shutil.rmtree(path)
    return rate, syncs


def bench_fdatasync(directory: str, *, seconds: float = 5.0) -> tuple[float, float]:
    """The ceilings: write ~1 KiB + fdatasync on a pre-zeroed file, in this thread,
    and on another thread with the two threads handing over as the journal's do."""
    path = os.path.join(directory, "raw")
    size = 64 << 20
    with open(path, "wb") as f:
        f.write(bytes(size))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_WRONLY)
    record = os.urandom(1100)
    offset = 0

    def one() -> None:
        nonlocal offset
        os.pwrite(fd, record, offset)
        os.fdatasync(fd)
        offset = (offset + len(record)) % (size - len(record))

    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        one()
        count += 1
    direct = count / (time.perf_counter() - started)

    ask, answer = threading.Event(), threading.Event()
    stop = False

    def syncer() -> None:
        while True:
            ask.wait()
            ask.clear()
            if stop:
                return
            one()
            answer.set()

    worker = threading.Thread(target=syncer)
    worker.start()
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        answer.clear()
        ask.set()
        answer.wait()
        count += 1
    handed = count / (time.perf_counter() - started)
    stop = True
    ask.set()
    worker.join()
    os.close(fd)
    os.unlink(path)
    return direct, handed


def bench_recovery(directory: str, n: int) -> tuple[float, float, str]:
    """Seconds to write N adds (sync never), seconds to reopen and recover them."""
    path = os.path.join(directory, "recovery")
    started = time.perf_counter()
    with Journal(path, sync="never") as journal:
        journal.define(QueueDefinition("q", QueueKind.QUEUE))
        for i in range(1, n + 1):
            journal.add(AddOp("q", ("q",), i, message(i, cached=True)))
            if i % 50_000 == 0:
                journal.flush()
    written = time.perf_counter() - started
    started = time.perf_counter()
    with Journal(path) as journal:
        recovered = journal.recover()
        elapsed = time.perf_counter() - started
        report = str(journal.report)
        # a window is read back; the rest is left paged (chute.store.recovery.recover_lazily)
        held = len(recovered.messages["q"]) + recovered.paged.get("q", (0, 0))[0]
    if held != n:
        raise SystemExit(f"recovered {held} messages, expected {n}")
    shutil.rmtree(path)
    return written, elapsed, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", default=None, help="where to put the journals (default: a temp dir)"
    )
    parser.add_argument("--recovery-messages", type=int, default=1_000_000)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="chute-bench-", dir=args.dir)
    try:
        for cached in (True, False):
            alone, together = bench_append(directory, cached=cached)
            label = "wire encoding cached" if cached else "encoded by the journal"
            print(
                f"append 1 KiB add ({label}): {alone:.2f} µs on the caller's thread, "
                f"{together:.2f} µs per add with the writer's share"
            )
        direct, handed = bench_fdatasync(directory, seconds=args.seconds)
        print(f"raw pwrite 1.1 KiB + fdatasync, pre-zeroed file: {direct:,.0f}/s")
        print(f"same, on a second thread, handed over by events: {handed:,.0f}/s")
        rate, syncs = bench_sync(directory, seconds=args.seconds)
        print(
            f"add + sync + wait, one thread: {rate:,.0f}/s ({rate / direct:.0%} of the raw "
            f"rate, {rate / handed:.0%} of the handed-over one; {syncs:,} data syncs)"
        )
        for threads in (4, 16):
            rate, syncs = bench_sync_threads(directory, threads=threads, seconds=args.seconds)
            print(
                f"add + sync + wait, {threads} threads: {rate:,.0f} msgs/s "
                f"with {syncs / args.seconds:,.0f} data syncs/s"
            )
        if not args.skip_recovery:
            n = args.recovery_messages
            written, elapsed, report = bench_recovery(directory, n)
            print(f"write {n:,} 1 KiB adds (sync never): {written:.1f} s")
            print(f"recover {n:,} 1 KiB adds: {elapsed:.1f} s ({report})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
