"""High-availability soak: ``kill -9`` a node's live many times while it works, and
count every message.

A real etcd and two ``chute serve`` processes of node ``a`` (own data directories,
``ttl = 2``). Each round: a producer (``--mode sync``: each send awaits its
confirmation; ``window``: 64 in flight; ``tx``: commits of 10 sends) and a consumer
(client acks) work against the live; after a random delay the live is killed; the
backup takes over; the producer and consumer move to it; the killed process is
started again on its data directory and rejoins as the backup. At the end the last
live is drained. One line per round, then a JSON summary. Exit status 1 if a
confirmed message is missing (never consumed, not left at the end), a message came
twice without ``redelivered``, or one came that was never sent; 0 otherwise.

    python scripts/ha_soak.py --kills 20 --mode sync --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ha import Etcd, Process
from chute.client.blocking import connect
from chute.errors import ChuteError

QUEUE = "soak.ha"
WINDOWS = {"sync": 0, "window": 64, "tx": 0}


class Ledger:
    """What was confirmed, what was received (and whether flagged redelivered)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent = 0
        self.confirmed: set[str] = set()
        self.received: dict[str, int] = {}
        self.unflagged_twice: list[str] = []

    def got(self, body: str, redelivered: bool) -> None:
        with self.lock:
            seen = self.received.get(body, 0)
            if seen and not redelivered:
                self.unflagged_twice.append(body)
            self.received[body] = seen + 1


def produce(url: str, mode: str, ledger: Ledger, stop: threading.Event) -> None:
    window = WINDOWS[mode]
    pending: list[str] = []
    try:
        with (
            connect(url) as conn,
            conn.session(transacted=mode == "tx", confirm_window=window) as session,
        ):
            while not stop.is_set():
                with ledger.lock:
                    body = f"m-{ledger.sent}"
                    ledger.sent += 1
                session.send(QUEUE, body)
                pending.append(body)
                if mode == "tx":
                    if len(pending) == 10:
                        session.commit()
                        with ledger.lock:
                            ledger.confirmed.update(pending)
                        pending.clear()
                elif len(pending) > window:  # all but the last ``window`` are confirmed
                    with ledger.lock:
                        ledger.confirmed.update(pending[: len(pending) - window])
                    del pending[: len(pending) - window]
    except (ChuteError, OSError):
        return


def consume(url: str, ledger: Ledger, stop: threading.Event) -> None:
    try:
        with connect(url) as conn, conn.session(ack="client") as session:
            consumer = session.consumer(QUEUE)
            while not stop.is_set():
                item = consumer.receive(timeout=0.2)
                if item is None:
                    continue
                body = item.body if isinstance(item.body, str) else item.body.decode()
                ledger.got(body, item.redelivered)
                item.ack()
    except (ChuteError, OSError):
        return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--mode", choices=sorted(WINDOWS), default="sync")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--min-delay", type=float, default=0.3)
    parser.add_argument("--max-delay", type=float, default=2.0)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)  # noqa: S311
    ledger = Ledger()
    run(args, random.Random(seed), ledger)  # noqa: S311 - a fault's timing, not a secret
    return report(args, seed, ledger)


def run(args: argparse.Namespace, rng: random.Random, ledger: Ledger) -> None:
    """The rounds of kills, then the last live drained into ``ledger``."""
    with tempfile.TemporaryDirectory(prefix="chute-ha-soak-") as tmp:
        directory = Path(tmp)
        config = directory / "chute.toml"
        config.write_text("[cluster]\nttl = 2\n")
        etcd = Etcd(directory)
        started: list[Process] = []
        try:
            live = Process(directory, "one", etcd, config)
            started.append(live)
            live.wait_for("chute listening")
            backup = Process(directory, "two", etcd, config)
            started.append(backup)
            backup.wait_for("in sync with the live")
            names = {id(live): "one", id(backup): "two"}
            for round_ in range(args.kills):
                stop = threading.Event()
                workers = [
                    threading.Thread(target=produce, args=(live.url, args.mode, ledger, stop)),
                    threading.Thread(target=consume, args=(live.url, ledger, stop)),
                ]
                for worker in workers:
                    worker.start()
                time.sleep(rng.uniform(args.min_delay, args.max_delay))  # the fault's timing
                mark = len(backup.lines)
                killed = time.monotonic()
                live.kill()
                stop.set()
                for worker in workers:
                    worker.join(30)
                backup.wait_for("chute listening", mark)
                took = time.monotonic() - killed
                again = Process(directory, names[id(live)], etcd, config)
                started.append(again)
                names[id(again)] = names[id(live)]
                again.wait_for("in sync with the live")
                live, backup = backup, again
                print(
                    f"round {round_ + 1}: sent {ledger.sent}, confirmed "
                    f"{len(ledger.confirmed)}, received {len(ledger.received)}, "
                    f"take-over {took:.2f} s",
                    flush=True,
                )
            stop = threading.Event()
            drainer = threading.Thread(target=consume, args=(live.url, ledger, stop))
            drainer.start()
            last = -1
            while last != len(ledger.received):  # until a second passes with nothing new
                last = len(ledger.received)
                time.sleep(1.0)
            stop.set()
            drainer.join(30)
        finally:
            for process in started:
                process.kill()
            etcd.stop()


def report(args: argparse.Namespace, seed: int, ledger: Ledger) -> int:
    """Print the summary; the exit status."""
    lost = sorted(ledger.confirmed - set(ledger.received))
    sent = {f"m-{i}" for i in range(ledger.sent)}
    unknown = sorted(set(ledger.received) - sent)
    summary = {
        "seed": seed,
        "mode": args.mode,
        "kills": args.kills,
        "sent": ledger.sent,
        "confirmed": len(ledger.confirmed),
        "received": len(ledger.received),
        "lost": len(lost),
        "lost_first": lost[:10],
        "unknown": len(unknown),
        "twice_without_redelivered": len(ledger.unflagged_twice),
        "duplicates_flagged": sum(1 for n in ledger.received.values() if n > 1),
    }
    print(json.dumps(summary, indent=2))
    return 1 if lost or unknown or ledger.unflagged_twice else 0


if __name__ == "__main__":
    sys.exit(main())
