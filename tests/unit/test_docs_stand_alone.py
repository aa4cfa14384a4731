"""The documentation stands alone: it names only what a user of this repository has.

README.md and docs/ must not point at the notes chute was written from (design
notes, style notes, the source documents it calls "seeds") and their relative
links must reach files of the repository. What the ``chute`` command prints
(its help) and the package's text name the systems chute takes after
(DropboxMQ, XmlBlaster, Simple-message-queue, JBoss Messaging), never a
source-document number.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Final

import pytest

from chute import cli

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# what a user does not have: the project's private notes and source documents
FORBIDDEN: Final = re.compile(
    r"DESIGN\.md|STYLE\.md|shared notes|\.\./shared|\bseeds?\b|seed[ _-]?\d{3}",
    re.IGNORECASE,
)
SEED_NUMBER: Final = re.compile(r"seed[ _-]?00\d", re.IGNORECASE)
_INLINE_LINK: Final = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK: Final = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_EXTERNAL: Final = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)  # http:, mailto:, #x


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _lines_matching(path: Path, pattern: re.Pattern[str]) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{_name(path)}:{n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if pattern.search(line)
    ]


def relative_links(text: str) -> list[str]:
    """The link targets of ``[text](target)`` and ``[ref]: target`` that are not URLs
    or anchors within the page."""
    targets = _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)
    return [t for t in targets if not _EXTERNAL.match(t)]


def test_the_documentation_is_found() -> None:
    names = {_name(p) for p in DOCS}
    assert {"README.md", "docs/security.md", "docs/semantics.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_no_reference_to_notes_a_user_does_not_have(doc: Path) -> None:
    assert _lines_matching(doc, FORBIDDEN) == []


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_relative_links_reach_files_of_the_repository(doc: Path) -> None:
    broken = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    assert broken == [], f"{_name(doc)} links to what the repository does not hold"


def test_link_extraction() -> None:
    text = (
        "See [the client](client.md#api), [x](https://example.com/a.md), [top](#top),\n"
        '[mail](mailto:a@b.c) and [img](../bench/README.md "figures").\n'
        "[ref]: ../DESIGN.md\n"
    )
    assert relative_links(text) == ["client.md#api", "../bench/README.md", "../DESIGN.md"]


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    texts = [parser.format_help()]
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


def test_the_command_help_names_systems_not_source_documents() -> None:
    texts = _help_texts(cli._parser())  # the parser `chute` runs
    assert len(texts) > 5  # the subcommands were reached
    assert [t for t in texts if FORBIDDEN.search(t)] == []
    assert any("Simple-message-queue" in t for t in texts)


def test_the_package_names_systems_not_source_document_numbers() -> None:
    found = [
        hit
        for path in sorted((ROOT / "chute").rglob("*.py"))
        for hit in _lines_matching(path, SEED_NUMBER)
    ]
    assert found == []


def test_the_readme_names_every_environment_variable_the_command_reads() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "chute").rglob("*.py"))
    variables = set(re.findall(r"[\"'](CHUTE_[A-Z_]+)[\"']", source))
    assert {"CHUTE_URL", "CHUTE_LOGIN", "CHUTE_PASSCODE", "CHUTE_LOG_LEVEL"} <= variables
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert sorted(v for v in variables if f"${v}" not in readme) == []
