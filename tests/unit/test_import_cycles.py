"""No import cycles among chute's modules, counting imports made only for type checking.

The layers of docs/architecture.md point one way. A cycle, even one hidden
behind ``if TYPE_CHECKING:`` or inside a function, means two modules cannot be
read (or changed) apart, so every ``import`` and ``from … import`` statement
anywhere in a module counts as an arrow to the module it names (or, for
``from package import name``, to ``package.name`` when that is a module).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import chute

ROOT = Path(chute.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Arrow(NamedTuple):
    """One import: ``source`` names ``target`` at ``path``:``line``."""

    source: str
    target: str
    path: Path
    line: int


def import_arrows() -> list[Arrow]:
    """Every import of a chute module by another, wherever it stands in the importer."""
    files = {module_name(path): path for path in ROOT.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    arrows: list[Arrow] = []
    for name, path in sorted(files.items()):
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                found = known(target)
                if found is not None and found != name:
                    arrows.append(Arrow(name, found, path, node.lineno))
    return arrows


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module_name(path): set() for path in ROOT.rglob("*.py")}
    for arrow in import_arrows():
        graph[arrow.source].add(arrow.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_chute_imports_itself_through_others() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles (each group imports itself through the others):\n" + (
        "\n".join(" <-> ".join(group) for group in found)
    )


def test_the_checker_sees_a_cycle_hidden_behind_type_checking() -> None:
    graph = {
        "a": {"b"},  # a imports b at run time
        "b": {"a"},  # b imports a under TYPE_CHECKING: still an arrow
        "c": {"a"},
    }
    assert cycles(graph) == [["a", "b"]]


def test_the_graph_counts_type_checking_and_function_level_imports() -> None:
    graph = import_graph()
    # chute.server.app imports the HTTP listener inside a function and for type checking
    assert "chute.server.http" in graph["chute.server.app"]
    assert "chute.core.rules.broker" in graph["chute.core.operations.session"]
