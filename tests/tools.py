"""Tools and packages the tests need beyond chute's own dependencies, and what a test
does when one is missing.

``make install-test`` installs all of them (the ``test`` extra, a JDK, Chromium,
tinyproxy). Where one is absent (a partial set-up on a developer's machine), the tests
that need it are skipped with the reason, the rest run. CI sets
``CHUTE_TEST_REQUIRE_ALL=1`` (``.ci/run``): there every tool must be there, and a
missing one fails the run instead of skipping what it would have tested.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

REQUIRE_ALL = os.environ.get("CHUTE_TEST_REQUIRE_ALL") == "1"
"""True in CI: a missing tool is a failure, never a skip."""

OPTIONAL_MODULES = frozenset(
    {"pyspark", "pyarrow", "stomp", "websocket", "trustme", "playwright", "schemathesis"}
)
"""Top-level modules of the ``test`` extra that test modules import when collected."""

_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")


def missing(message: str) -> None:
    """Skip the current test (fail it under :data:`REQUIRE_ALL`), saying what is missing."""
    if REQUIRE_ALL:
        pytest.fail(f"{message} (CHUTE_TEST_REQUIRE_ALL is set: CI needs every tool)")
    pytest.skip(message)


def need_tool(name: str, why: str) -> str:
    """The path of program ``name`` (a name on PATH or an absolute path), or a skip."""
    found = shutil.which(name) if not Path(name).is_absolute() else None
    if found is None and Path(name).is_absolute() and os.access(name, os.X_OK):
        found = name
    if found is None:
        missing(f"{why}: {name} is missing (`make install-test` installs it)")
    assert found is not None
    return found


def missing_module(text: str) -> str | None:
    """The optional module a failed or skipped collection names, if it is one."""
    match = _NO_MODULE.search(text) or _IMPORT_SKIP.search(text)
    if match is None:
        return None
    top = match.group(1).split(".")[0]
    return top if top in OPTIONAL_MODULES else None
