"""AMQP's routing rules (chute.core.rules.exchanges) and the name mapping."""

from __future__ import annotations

import datetime
import decimal

import pytest

from chute.amqp import names
from chute.core.model.store import QueueDefinition, QueueKind
from chute.core.rules.exchanges import (
    ExchangeError,
    Exchanges,
    QueueDeclaration,
    headers_match,
    topic_matches,
)
from chute.errors import AccessDenied, InvalidAddress, NotFound
from chute.store.memory import MemoryStore


@pytest.mark.parametrize(
    ("pattern", "key", "hit"),
    [
        ("*.orange.*", "quick.orange.rabbit", True),
        ("*.orange.*", "quick.orange.male.rabbit", False),
        ("*.*.rabbit", "lazy.pink.rabbit", True),
        ("lazy.#", "lazy", True),
        ("lazy.#", "lazy.orange.male.rabbit", True),
        ("#", "", True),
        ("#", "a.b.c", True),
        ("#.b", "b", True),
        ("#.b", "a.b", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("a.*", "a", False),
        ("a", "a", True),
        ("a", "b", False),
        ("*", "", True),
    ],
)
def test_topic_patterns(pattern: str, key: str, hit: bool) -> None:
    assert topic_matches(pattern, key) is hit


def test_headers_matching() -> None:
    assert headers_match({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3})
    assert not headers_match({"x-match": "all", "a": 1, "b": "x"}, {"a": 1})
    assert headers_match({"x-match": "any", "a": 1, "b": "x"}, {"a": 1})
    assert not headers_match({"x-match": "any", "a": 2}, {"a": 1})
    assert headers_match({}, {"anything": 1})


def test_declare_bind_route_delete() -> None:
    ex = Exchanges()
    ex.declare("logs", "fanout")
    ex.bind("logs", "queue:a", "")
    ex.bind("logs", "queue:b", "ignored")
    assert ex.route("logs", "whatever") == ["queue:a", "queue:b"]
    ex.declare("direct", "direct", durable=True)
    ex.bind("direct", "queue:a", "error")
    ex.bind("direct", "queue:a", "info")
    assert ex.route("direct", "error") == ["queue:a"]
    assert ex.route("direct", "debug") == []
    removed = ex.unbind_queue("queue:a")
    assert [(e.name, b.key) for e, b in removed] == [
        ("logs", ""),
        ("direct", "error"),
        ("direct", "info"),
    ]
    assert ex.route("logs", "k") == ["queue:b"]
    assert ex.route("direct", "error") == []
    with pytest.raises(NotFound):
        ex.route("missing", "k")


def test_refusals() -> None:
    ex = Exchanges()
    with pytest.raises(AccessDenied):
        ex.declare("", "direct")
    with pytest.raises(AccessDenied):
        ex.declare("amq.mine", "direct")
    with pytest.raises(AccessDenied):
        ex.delete("amq.topic")
    with pytest.raises(AccessDenied):
        ex.bind("", "queue:a", "a")
    with pytest.raises(ExchangeError):
        ex.declare("x", "nonsense")
    ex.declare("x", "direct")
    with pytest.raises(ExchangeError):
        ex.declare("x", "fanout")
    with pytest.raises(NotFound):
        ex.declare("y", "direct", passive=True)
    ex.bind("x", "queue:a", "k")
    with pytest.raises(ExchangeError):
        ex.delete("x", if_unused=True)
    assert ex.delete("x") is not None
    assert ex.delete("x") is None  # a missing exchange's delete succeeds


def test_auto_delete_goes_with_its_last_binding() -> None:
    ex = Exchanges()
    ex.declare("tmp", "direct", auto_delete=True)
    ex.bind("tmp", "queue:a", "k")
    ex.unbind("tmp", "queue:a", "k")
    assert "tmp" not in ex.exchanges


@pytest.mark.parametrize(
    "name",
    ["hello", "task_queue", "celery@host.celery.pidbox", "a:b", "a..b", "ünï cödé/x", "x" * 60],
)
def test_names_round_trip(name: str) -> None:
    chute_name = names.to_chute(name)
    assert names.to_amqp(chute_name) == name


def test_plain_names_are_unchanged() -> None:
    assert names.to_chute("celery") == "celery"
    assert names.to_chute("celery@host") == "celery:40host"


def test_names_too_long_are_refused() -> None:
    with pytest.raises(InvalidAddress):
        names.to_chute("x" * 256)
    with pytest.raises(InvalidAddress):
        names.to_chute("@" * 100)


def test_a_durable_queues_declaration_is_kept_in_the_store_whole() -> None:
    """What a declare of a durable queue said comes back from the store equal, whatever
    its arguments hold (tables, arrays, bytes, decimals, times); an exclusive queue's is
    not kept, and a forgotten one leaves the store."""
    store = MemoryStore()
    exchanges = Exchanges(lambda: store)
    arguments = (
        ("x-custom", (("bytes", b"\x00\xff"), ("list", (1, "two", None, 2.5)))),
        ("x-decimal", decimal.Decimal("3.14")),
        ("x-max-length", 10),
        ("x-time", datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)),
    )
    kept = QueueDeclaration(durable=True, auto_delete=True, arguments=arguments, stream=True)
    exchanges.declare_queue("celery", kept)
    exchanges.declare_queue("mine", QueueDeclaration(owner="conn-1", arguments=arguments))
    exchanges.declare_queue("transient", QueueDeclaration(durable=False))
    exchanges.declare_queue("gone", QueueDeclaration())
    assert exchanges.forget_queue("gone") == QueueDeclaration()
    again = Exchanges(lambda: store)
    again.restore(store.recover().definitions)
    assert again.queues == {"celery": kept}


def test_a_stored_declaration_it_cannot_read_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    store.define(QueueDefinition("amqp-queue:x", QueueKind.DECLARATION, selector="{not json"))
    exchanges = Exchanges(lambda: store)
    with caplog.at_level("WARNING", logger="chute.broker"):
        exchanges.restore(store.recover().definitions)
    assert exchanges.queues == {}
    assert "skipped a stored AMQP declaration" in caplog.text
