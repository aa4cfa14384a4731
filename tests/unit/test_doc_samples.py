"""Every TOML sample in README.md and docs/ loads as `chute serve --config` loads it.

A user copies these first. A block whose first line is ``# partial sample`` shows a
fragment on purpose (a key out of its table); it must still be valid TOML. Prefer
complete samples: a block with no marker goes through :func:`chute.config.load`,
every check included (users, roles, who the listeners act as, ...).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from chute.config import load

ROOT: Final = Path(__file__).resolve().parents[2]
PARTIAL: Final = "# partial sample"
_FENCE: Final = re.compile(r"^```toml[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    doc: str  # path relative to the repository
    line: int  # the line of its opening fence
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def toml_samples() -> list[Sample]:
    samples = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            samples.append(Sample(str(path.relative_to(ROOT)), line, match.group(1)))
    return samples


SAMPLES: Final = toml_samples()


def test_the_readme_has_its_configuration_sample() -> None:
    assert any(s.doc == "README.md" and "[server." in s.text for s in SAMPLES)


@pytest.mark.parametrize("sample", SAMPLES, ids=str)
def test_sample_loads_with_the_config_loader(sample: Sample, tmp_path: Path) -> None:
    if sample.text.startswith(PARTIAL):
        tomllib.loads(sample.text)  # a fragment, on purpose: valid TOML at least
        return
    path = tmp_path / "chute.toml"
    path.write_text(sample.text, encoding="utf-8")
    load(path)  # raises ConfigError naming the key that is wrong
