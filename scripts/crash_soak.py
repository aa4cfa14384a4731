"""Crash soak: ``kill -9`` a real ``chute serve`` many times and count every message.

The long version of ``tests/integration/test_crash.py`` (same scenario, same
checks: see that module's docstring). One line per kill cycle, then a JSON
summary. Exit status 1 if an acknowledged message was lost, an unknown one
appeared, a duplicate came without ``redelivered``, an acked message came
back long after its ack, an uncommitted message appeared, a transaction was
delivered in part, or a worker hit an unexpected error; 0 otherwise.

    python scripts/crash_soak.py --kills 200 --seed 42
    python scripts/crash_soak.py --kills 200 --mode window   # a confirm window of 64 sends
    python scripts/crash_soak.py --kills 200 --mode tx-window  # 4 commits of 1..50 sends

The data directory is kept when the run fails (to look at the journal), and
removed otherwise unless ``--data-dir`` was given.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.test_crash import MODES, Scenario, run_scenario, seed_from_env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200, help="kill cycles (default 200)")
    parser.add_argument("--seed", type=int, help="seed of the kill delays (default: random)")
    parser.add_argument("--data-dir", type=Path, help="an empty or new directory (default: temp)")
    parser.add_argument("--min-delay", type=float, default=0.05, help="seconds (default 0.05)")
    parser.add_argument("--max-delay", type=float, default=1.0, help="seconds (default 1.0)")
    parser.add_argument("--producers", type=int, default=1, help="producer threads (default 1)")
    parser.add_argument("--no-consumer", action="store_true", help="nobody consumes until the end")
    parser.add_argument("--segment-size", default="256KiB", help="journal segment size")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="sync",
        help="sync: wait for each send; window: a confirm window of sends; "
        "tx-window: transactions with a confirm window of commits (default sync)",
    )
    parser.add_argument(
        "--send-window", type=int, default=64, help="sends in flight, --mode window (default 64)"
    )
    parser.add_argument(
        "--commit-window",
        type=int,
        default=4,
        help="commits in flight, --mode tx-window (default 4)",
    )
    parser.add_argument(
        "--max-transaction",
        type=int,
        default=50,
        help="each transaction sends 1..this many, --mode tx-window (default 50)",
    )
    args = parser.parse_args()

    seed = args.seed if args.seed is not None else seed_from_env()
    scenario = Scenario(
        kills=args.kills,
        seed=seed,
        min_delay=args.min_delay,
        max_delay=args.max_delay,
        producers=args.producers,
        consume=not args.no_consumer,
        segment_size=args.segment_size,
        mode=args.mode,
        send_window=args.send_window,
        commit_window=args.commit_window,
        max_transaction=args.max_transaction,
    )
    if args.data_dir is not None:
        data_dir: Path = args.data_dir
        if data_dir.exists() and any(data_dir.iterdir()):
            parser.error(f"--data-dir {data_dir} is not empty: its messages would be unknown")
        keep = True
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="chute-crash-")) / "data"
        keep = False

    started = time.monotonic()
    outcome = run_scenario(scenario, data_dir, progress=lambda line: print(line, flush=True))
    summary = outcome.summary()
    summary["seconds"] = round(time.monotonic() - started, 1)
    violations = outcome.violations()
    details = outcome.describe()  # the seed, then violations, known gaps, recovery warnings
    if "\n" in details:
        print(details)
    print(json.dumps(summary, indent=2))
    if violations:
        print(f"FAILED; the journal is kept in {data_dir}", file=sys.stderr)
        return 1
    if not keep:
        shutil.rmtree(data_dir.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
