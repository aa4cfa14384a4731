"""Settings for the whole test suite.

Hypothesis judges time as well as behaviour by default (a per-example deadline,
a health check that fails when generating inputs is slow). On a shared 2-core
machine, under a broker subprocess and other tests, those judgements fail at
random, so this profile turns them off; every property still runs its examples
and asserts the same things. Speed is measured in ``bench/``, never in tests.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "chute", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("chute")
