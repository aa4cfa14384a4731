"""Serverless contention: 2 producer and 4 consumer processes on one dropbox root.

20,000 messages, each consumed (acknowledged) exactly once, nothing left in
``processing/``; one consumer is SIGKILLed holding claimed files, and the
documented ``chute dropbox recover`` gives them back for the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from chute.dropbox.layout import init_queue
from chute.dropbox.names import split_claim_name

MESSAGES_PER_PRODUCER = 10_000
PRODUCERS = 2
VICTIM_RECEIVES, VICTIM_ACKS = 150, 100
DEADLINE = 120.0

PRODUCER = textwrap.dedent(
    """
    import sys, chute
    root, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with chute.connect(f"dropbox://{root}?client_id={name}&sync=false") as conn:
        session = conn.session()
        for i in range(count):
            session.send("queue:work", f"{name}-{i}")
    """
)

CONSUMER = textwrap.dedent(
    """
    import os, sys, threading, chute
    root, name, out, done, hold = sys.argv[1:6]
    hold = int(hold)
    with chute.connect(f"dropbox://{root}?client_id={name}&sync=false&poll_ms=50") as conn:
        session = conn.session(ack="client")
        consumer = session.consumer("queue:work")
        pending = []
        with open(out, "w") as log:
            def settle():
                if pending:
                    pending[-1].ack()  # cumulative
                    log.write("".join(m.text + "\\n" for m in pending))
                    log.flush()
                    pending.clear()
            received = 0
            while True:
                message = consumer.receive(timeout=0.5)
                if message is None:
                    if os.path.exists(done):
                        break
                    continue
                pending.append(message)
                received += 1
                if hold and received == hold:  # the victim: ack some, hold the rest
                    pending, held = pending[:-(hold // 3)], pending[-(hold // 3):]
                    settle()
                    print("holding", len(held), flush=True)
                    threading.Event().wait()
                if len(pending) >= 50:
                    settle()
            settle()
    """
)


def spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, err = process.communicate(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"a worker did not finish in time:\n{err}")
    assert process.returncode == 0, err
    return out


@pytest.mark.slow
def test_each_message_is_consumed_exactly_once_and_a_killed_consumer_is_recovered(
    tmp_path: Path,
) -> None:
    root = tmp_path / "mq"
    layout = init_queue(root, "work")
    done = tmp_path / "done"
    deadline = time.monotonic() + DEADLINE
    producers = [spawn(PRODUCER, root, f"p{n}", MESSAGES_PER_PRODUCER) for n in range(PRODUCERS)]
    consumers = {
        name: spawn(CONSUMER, root, name, tmp_path / f"{name}.log", done, hold)
        for name, hold in (("c1", 0), ("c2", 0), ("c3", 0), ("victim", VICTIM_RECEIVES))
    }
    victim = consumers.pop("victim")
    try:
        assert victim.stdout is not None
        line = victim.stdout.readline()  # blocks until the victim holds its files
        assert line.startswith("holding"), victim.stderr.read() if victim.stderr else ""
        held = int(line.split()[1])
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        claimed = [split_claim_name(n) for n in os.listdir(layout.processing)]
        assert sum(1 for owner, _ in claimed if owner == "victim") == held

        recovered = subprocess.run(
            [
                sys.executable,
                "-m",
                "chute.cli",
                "dropbox",
                "recover",
                "--root",
                str(root),
                "work",
                "--client",
                "victim",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert recovered.returncode == 0, recovered.stderr
        assert len(recovered.stdout.split()) == held
        assert f"{held} file(s) of victim back in target/" in recovered.stderr

        for producer in producers:
            finish(producer, deadline - time.monotonic())
        done.touch()
        for consumer in consumers.values():
            finish(consumer, deadline - time.monotonic())
    finally:
        for process in [*producers, victim, *consumers.values()]:
            if process.poll() is None:
                process.kill()
                process.wait()

    acked: Counter[str] = Counter()
    for name in ("c1", "c2", "c3", "victim"):
        acked.update((tmp_path / f"{name}.log").read_text().split())
    expected = {f"p{n}-{i}" for n in range(PRODUCERS) for i in range(MESSAGES_PER_PRODUCER)}
    assert set(acked) == expected
    assert max(acked.values()) == 1  # exactly once
    assert sum(1 for line in (tmp_path / "victim.log").read_text().split()) == VICTIM_ACKS
    assert os.listdir(layout.processing) == []
    assert os.listdir(layout.target) == []
    assert os.listdir(layout.working) == []
    processed = os.listdir(layout.processed)
    assert len(processed) == len(expected)
    assert sum("JMSXDeliveryCountI=2" in n for n in processed) == held  # the recovered ones
