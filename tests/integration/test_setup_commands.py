"""The README's two commands install into the project's virtual environment, so they
work on a Debian python that refuses system-wide installs (PEP 668)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ensure_venv_makes_a_venv_that_pip_installs_into(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # pip refuses any install outside a virtual environment, as an externally
    # managed python does
    env = {**os.environ, "PIP_REQUIRE_VIRTUALENV": "true"}
    made = subprocess.run(
        ["sh", str(ROOT / "scripts/ensure-venv.sh"), sys.executable, str(venv)],
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    pip = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert str(venv) in pip.stdout  # the venv's own pip
    again = subprocess.run(
        ["sh", str(ROOT / "scripts/ensure-venv.sh"), sys.executable, str(venv)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr  # a second run keeps it


def test_the_makefile_installs_only_with_the_venvs_python() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PY := \$\(VENV\)/bin/python$", makefile, re.MULTILINE)
    installs = [line for line in makefile.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        assert line.strip().startswith("$(PY) -m pip install"), line
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme
    assert "make test" in readme
