"""Settings for the whole test suite.

Hypothesis judges time as well as behaviour by default (a per-example deadline,
a health check that fails when generating inputs is slow). On a shared 2-core
machine, under a broker subprocess and other tests, those judgements fail at
random, so this profile turns them off; every property still runs its examples
and asserts the same things. Speed is measured in ``bench/``, never in tests.
"""

from __future__ import annotations

import pytest
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
"""Markers whose tests run in a lane of their own under pytest-xdist."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` every test marked ``spark`` goes to one worker, one
    after another (each Spark session wants most of the machine's memory and CPU), and
    every ``crash`` test to one worker (they kill brokers mid-write and time their
    kills): the other workers share out the rest. Without xdist nothing changes."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        for lane in HEAVY_LANES:
            if item.get_closest_marker(lane) is not None:
                item.add_marker(pytest.mark.xdist_group(lane))
                break


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
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
