"""Settings for the whole test suite.

Hypothesis judges time as well as behaviour by default (a per-example deadline,
a health check that fails when generating inputs is slow). On a shared 2-core
machine, under a broker subprocess and other tests, those judgements fail at
random, so this profile turns them off; every property still runs its examples
and asserts the same things. Speed is measured in ``bench/``, never in tests.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from _pytest.nodeid import NodeId
from hypothesis import HealthCheck, settings

from tests.tools import REQUIRE_ALL, missing_module

settings.register_profile(
    "chute", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("fast", parent=settings.get_profile("chute"), max_examples=20)
"""``make test-fast``'s profile (``--hypothesis-profile=fast``): every property, fewer
examples; ``make test`` runs each with its full count."""
settings.load_profile("chute")


HEAVY_LANES = ("spark", "crash")
"""Markers whose tests run in lanes of their own under pytest-xdist."""


def lane_of(item: pytest.Item) -> str | None:
    """The lane (xdist group) of a test marked with one of :data:`HEAVY_LANES`: the
    marker's name, or with a ``lane`` (``pytest.mark.spark(lane="streams")``) that name
    after it (``spark-streams``); ``None`` for any other test."""
    for lane in HEAVY_LANES:
        marker = item.get_closest_marker(lane)
        if marker is not None:
            name = marker.kwargs.get("lane")
            return lane if name is None else f"{lane}-{name}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` each lane's tests go to one worker, one after another:
    the Spark tests in three lanes (``spark``, ``spark-streams`` and ``spark-cluster``,
    each a SparkSession and a driver at a time: three fit the machine's memory side by
    side, and their time goes mostly on waiting for micro-batches), the ``crash`` tests
    in one (they kill brokers mid-write and time their kills); the other tests go to
    whichever worker is free.
    xdist schedules the biggest group first, so these lanes start at once and never hold
    up the end of the run. Without xdist nothing changes."""
    _scale_own_counts(items)
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers
        return
    for item in items:
        lane = lane_of(item)
        if lane is not None:
            _join_group(item, lane)


def _scale_own_counts(items: list[pytest.Item]) -> None:
    """Under a profile with fewer examples than Hypothesis's 100 (``fast``), a property
    that sets its own larger count (``@settings(max_examples=600)``, which a profile does
    not override) runs the same share of it: 600 becomes 120 in ``make test-fast``.
    ``make test`` (the ``chute`` profile) runs every count in full."""
    share = settings().max_examples  # the loaded profile's count
    if share >= 100:
        return
    scaled: set[int] = set()
    for item in items:
        test: Any = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if not isinstance(own, settings) or id(test) in scaled:
            continue
        scaled.add(id(test))
        if own.max_examples > share:
            count = max(share, own.max_examples * share // 100)
            test._hypothesis_internal_use_settings = settings(own, max_examples=count)


def _join_group(item: pytest.Item, group: str) -> None:
    """Put ``item`` in xdist group ``group``: loadgroup reads the group from the end of
    the test's id (``...::test_x@group``). xdist 3.8 writes it there from an
    ``xdist_group`` mark into ``Item._nodeid``, which pytest 9.2 no longer reads (the id
    is ``Item._id``, a ``NodeId``), so every group was silently ignored; this writes the
    id itself, where this pytest keeps it."""
    nodeid = f"{item.nodeid}@{group}"
    if isinstance(getattr(item, "_id", None), NodeId):
        item._id = NodeId.parse(nodeid)
    else:  # an older pytest: the id is a string
        item._nodeid = nodeid  # type: ignore[attr-defined]
    assert item.nodeid == nodeid, "this pytest keeps test ids elsewhere: update _join_group"


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A test module that cannot be imported because a package of the ``test`` extra is
    missing is skipped with that reason, not a collection error that stops the run;
    under ``CHUTE_TEST_REQUIRE_ALL`` (CI) it fails, and so does an ``importorskip`` of
    one of them (tests/tools.py)."""
    report: pytest.CollectReport = yield
    if not isinstance(collector, pytest.Module) or report.passed:
        return report
    name = missing_module(str(report.longrepr))
    if name is None:
        return report
    reason = f"needs the Python package {name!r} (`make install-test` installs it)"
    if REQUIRE_ALL:
        report.outcome = "failed"
        report.longrepr = f"{collector.path}: {reason}; CHUTE_TEST_REQUIRE_ALL is set"
    elif report.failed:
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")
    return report
