"""chute's layers, as docs/architecture.md draws them: every import points down.

:data:`MAY_IMPORT` is the drawing as data: each part of the package (a
package or module under ``chute``, named without the ``chute.`` prefix; a
dotted name such as ``cli.dropbox`` is a part of its own, and a module belongs
to the longest name it starts with) and the parts it may import. Imports inside
a part are free. Every import anywhere in a module counts, those made only for
type checking or inside a function included (the arrows of
``test_import_cycles``). A module in no part fails too: a new part of the
package gets its row here, and its place on the drawing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from .test_import_cycles import ROOT, Arrow, import_arrows, module_name

EVERYTHING = frozenset({"*"})
"""An application's row: it may import any part."""

BASE = frozenset({"message", "content", "errors", "version"})
"""What every layer may use: the message, its binary content, the errors."""
CORE = frozenset({"core.model", "core.rules", "core.operations"})
"""The core's three floors, for a part above the core that may use all of it."""
CODEC = BASE | {"core.model", "sansio"}
"""The sans-IO codecs map their units onto the core's words (addresses, ack modes)."""
SERVER = (
    BASE
    | CORE
    | {
        "protocol",
        "stomp",
        "amqp",
        "smq",
        "sansio",
        "store",
        "config",
        "dropbox",
        "origins",
        "outbox",
        "passwords",
        "cluster",
        "ha",
        "refuse",
    }
)
"""The asyncio listeners and drivers: the codecs, the core, the journal they open."""

MAY_IMPORT: Mapping[str, frozenset[str]] = {
    # the bottom: a message and what every layer shares
    "errors": frozenset(),
    "version": frozenset(),
    "sansio": frozenset(),
    "message": frozenset({"errors"}),
    "content": frozenset({"errors", "message"}),
    "passwords": frozenset({"errors"}),
    "origins": frozenset({"errors"}),
    "outbox": frozenset({"errors"}),
    "refuse": frozenset(),  # asyncio: a refused connection answered once its client spoke
    # the core, pure, in three floors, each importing only those below it; never the
    # journal, a transport or the admin side
    "core": frozenset(),  # the package itself: its floors are its rows
    "core.model": BASE,  # what the broker holds: queues, topics, streams, the Store interface
    "core.rules": BASE | {"core.model", "passwords"},  # what it decides over them
    "core.operations": BASE | {"core.model", "core.rules"},  # what a client does through them
    # the journal, below the core's Store interface
    "store": BASE | {"core.model"},
    # sans-IO codecs: bytes in, units out
    "protocol": CODEC,
    "stomp": CODEC | {"core.operations"},  # its session adapter drives a core session
    # its channels drive core sessions; the exchanges' rules and the permissions are core's
    "amqp": CODEC | {"core.operations", "core.rules"},
    "smq": CODEC,
    # the server's configuration (what each listener, mount and limit is)
    "config": BASE
    | {"core.model", "core.rules", "dropbox", "origins", "passwords", "smq", "store", "cluster"},
    # asyncio listeners and thin drivers; never the admin side above them
    "server": SERVER,
    # the HTTP port's site: admin API, metrics, health, console, over the server
    "admin": SERVER | {"server"},
    # the clients: the wire's codec and the core's words, never a broker's insides
    "client": BASE | {"core.model", "protocol", "sansio", "outbox", "origins"},
    # a cluster's coordinator (etcd over HTTP) and membership, beside the server
    "cluster": BASE,
    # a node's live and backups: journal replication, election and fencing in etcd; a
    # backup's own native port answers statistics with the native codec
    "ha": BASE | {"core.model", "store", "cluster", "config", "protocol", "sansio", "refuse"},
    # DropboxMQ: the serverless client (the client's API) and the broker's bridge
    "dropbox": BASE | CORE | {"client"},
    # the applications on top; the dropbox commands stay serverless
    "cli.dropbox": BASE | {"core.model", "client", "dropbox", "cli"},
    "spark": BASE | {"core.model", "protocol", "client"},
    "aio": BASE | {"client"},
    "__init__": BASE | {"client", "dropbox"},
    "__main__": EVERYTHING,
    "cli": EVERYTHING,
}


def part_of(module: str, table: Iterable[str]) -> str | None:
    """The row of ``module`` (``chute.x.y``): the longest part it is or lies in."""
    name = module.partition(".")[2] or "__init__"
    matches = [part for part in table if name == part or name.startswith(part + ".")]
    return max(matches, key=len, default=None)


def against(arrows: Iterable[Arrow], table: Mapping[str, frozenset[str]]) -> list[str]:
    """Each arrow the table does not allow, as ``file:line: source -> target``."""
    wrong: list[str] = []
    for arrow in arrows:
        source, target = part_of(arrow.source, table), part_of(arrow.target, table)
        if source is None or target is None or source == target:
            continue  # a module in no part is reported once, by its own test
        allowed = table[source]
        if "*" not in allowed and target not in allowed:
            where = arrow.path.relative_to(ROOT.parent)
            wrong.append(
                f"{where}:{arrow.line}: {arrow.source} -> {arrow.target}"
                f" ({source} may not import {target})"
            )
    return list(dict.fromkeys(wrong))  # two names from one module: one arrow


def test_every_import_points_down_the_layers() -> None:
    wrong = against(import_arrows(), MAY_IMPORT)
    assert wrong == [], "imports against the layers of docs/architecture.md:\n" + "\n".join(wrong)


def test_every_module_has_a_place_in_the_layers() -> None:
    modules = sorted(module_name(path) for path in ROOT.rglob("*.py"))
    unplaced = [name for name in modules if part_of(name, MAY_IMPORT) is None]
    assert unplaced == [], "modules in no row of MAY_IMPORT: " + ", ".join(unplaced)


def test_the_table_names_only_its_own_parts() -> None:
    named = {part for allowed in MAY_IMPORT.values() for part in allowed} - {"*"}
    assert named <= set(MAY_IMPORT)


def test_the_checker_names_an_arrow_up_with_its_file_and_line() -> None:
    table = {"core": frozenset({"errors"}), "errors": frozenset(), "server": frozenset({"core"})}
    up = Arrow("chute.core.model.queue", "chute.server.http", ROOT / "core/model/queue.py", 12)
    down = Arrow("chute.server.http", "chute.core.model.queue", ROOT / "server" / "http.py", 3)
    inside = Arrow(
        "chute.core.model.queue", "chute.core.model.lanes", ROOT / "core/model/queue.py", 4
    )
    assert against([up, down, inside], table) == [
        "chute/core/model/queue.py:12: chute.core.model.queue -> chute.server.http"
        " (core may not import server)"
    ]


def test_a_dotted_part_is_its_own_row() -> None:
    table = {
        "dropbox": frozenset(),
        "dropbox.cli": frozenset({"dropbox", "cli"}),
        "cli": EVERYTHING,
    }
    assert part_of("chute.dropbox.cli", table) == "dropbox.cli"
    assert part_of("chute.dropbox.queue", table) == "dropbox"
    assert part_of("chute.dropboxes", table) is None
    assert part_of("chute", {"__init__": frozenset()}) == "__init__"
    helper = Arrow("chute.dropbox.cli", "chute.cli", Path("chute/dropbox/cli.py"), 1)
    assert against([helper], table) == []


def test_every_core_module_stands_on_a_floor() -> None:
    loose = sorted(
        module_name(path)
        for path in (ROOT / "core").rglob("*.py")
        if part_of(module_name(path), MAY_IMPORT) == "core" and path.name != "__init__.py"
    )
    assert loose == [], "core modules on no floor (model, rules, operations): " + ", ".join(loose)


def test_the_table_keeps_the_rules_of_the_drawing() -> None:
    floors = [part for part in MAY_IMPORT if part == "core" or part.startswith("core.")]
    for floor in floors:
        assert MAY_IMPORT[floor].isdisjoint({"server", "admin", "store"}), floor
    assert "admin" not in MAY_IMPORT["server"]
    assert MAY_IMPORT["core.model"].isdisjoint({"core.rules", "core.operations"})
    assert "core.operations" not in MAY_IMPORT["core.rules"]


def test_the_checker_names_an_arrow_up_the_floors_of_the_core() -> None:
    up = Arrow("chute.core.model.queue", "chute.core.rules.broker", ROOT / "core/model/queue.py", 7)
    skipping = Arrow(
        "chute.core.rules.broker",
        "chute.core.operations.session",
        ROOT / "core/rules/broker.py",
        9,
    )
    down = Arrow(
        "chute.core.operations.session",
        "chute.core.model.queue",
        ROOT / "core/operations/session.py",
        3,
    )
    out = Arrow("chute.core.rules.broker", "chute.store.journal", ROOT / "core/rules/broker.py", 5)
    assert against([up, skipping, down, out], MAY_IMPORT) == [
        "chute/core/model/queue.py:7: chute.core.model.queue -> chute.core.rules.broker"
        " (core.model may not import core.rules)",
        "chute/core/rules/broker.py:9: chute.core.rules.broker -> chute.core.operations.session"
        " (core.rules may not import core.operations)",
        "chute/core/rules/broker.py:5: chute.core.rules.broker -> chute.store.journal"
        " (core.rules may not import store)",
    ]
