"""``/metrics`` of a real ``chute serve``: series that are there whatever the broker does.

A gauge that is absent at zero is no zero to a query or an alert
(``chute_connections == 0`` finds nothing), so each client protocol's
connection count is there from the start; and the process's own series
(``process_*``, as every Prometheus client library gives them) describe the
broker's process, checked against what the kernel says of it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_metrics import Broker, Samples, start, wait_for

PROTOCOLS = ("native", "native/WebSocket", "native/HTTP", "STOMP", "STOMP/WebSocket", "AMQP")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = start(tmp_path)
    yield running
    running.server.stop()


def connections(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["protocol"]: value
        for (name, labels), value in samples.items()
        if name == "chute_connections"
    }


def test_connections_are_counted_from_zero(broker: Broker) -> None:
    assert connections(broker.scrape()) == dict.fromkeys(PROTOCOLS, 0.0)
    with broker.connect():
        samples = wait_for(broker, "one connection", lambda m: connections(m)["native"] == 1)
        assert connections(samples) == {**dict.fromkeys(PROTOCOLS, 0.0), "native": 1.0}
    samples = wait_for(broker, "no connection", lambda m: connections(m)["native"] == 0)
    assert connections(samples) == dict.fromkeys(PROTOCOLS, 0.0)


def test_the_process_series_describe_the_broker_process(broker: Broker) -> None:
    before = time.time()
    samples = broker.scrape()
    pid = broker.server.process.pid
    started = samples[("process_start_time_seconds", ())]
    assert before - 120 < started <= before  # started by this test's fixture
    assert samples[("process_cpu_seconds_total", ())] > 0
    with open(f"/proc/{pid}/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    resident = samples[("process_resident_memory_bytes", ())]
    page = os.sysconf("SC_PAGE_SIZE")
    assert 0.5 * resident_pages * page < resident < 2 * resident_pages * page
    assert samples[("process_virtual_memory_bytes", ())] > resident
    with open(f"/proc/{pid}/limits") as limits:
        (line,) = [x for x in limits if x.startswith("Max open files")]
    assert samples[("process_max_fds", ())] == int(line.split()[3])
    assert 0 < samples[("process_open_fds", ())] < samples[("process_max_fds", ())]
