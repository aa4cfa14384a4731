"""The admin API against its own OpenAPI document, with schemathesis.

A live ``chute serve`` (no users: anonymous may do everything) serves the
document at ``/api/openapi.json``; schemathesis loads it from there and, for
every operation, sends requests made from it, valid ones and invalid ones
(wrong types, missing fields, unknown methods), and checks each answer:
never a 5xx, a status code the document lists for the operation, the content
type and the body's schema it gives for that status, required headers.

Bounded and repeatable: a few examples per operation, derandomized (the same
requests every run), no deadline (the broker's first store sync may be slow
on a loaded CI machine).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.core.result import Ok

import chute
from chute.admin.openapi import document

from .conftest import ChuteServer, free_port, start_server

pytestmark = pytest.mark.acceptance

ACCEPTED_ANYWAY = [schemathesis.checks.positive_data_acceptance]
"""A request the document allows may still be refused (400): an address, a pattern or a
selector has a grammar of its own, checked by the broker, not by a JSON schema."""
EXAMPLES = 12
"""Per operation and mode: 24 operations, two modes, about 590 requests."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChuteServer, str]]:
    tmp = tmp_path_factory.mktemp("admin-schema")
    http = free_port()
    srv: ChuteServer = start_server(tmp, "--http-port", str(http))
    base = f"http://127.0.0.1:{http}"
    yield srv, base
    assert srv.stop() == 0, srv.output


def _some_state(srv: ChuteServer) -> None:
    """Things for the requests to find: messages, a topic, a stream."""
    with chute.connect(srv.url) as conn, conn.session() as session:
        for n in range(3):
            session.send("queue:a", f"m{n}", properties={"n": n})
            session.send("stream:s", f"s{n}")
        session.send("topic:t", "x")


@pytest.mark.timeout(300)  # ~570 generated requests: 25 s alone, over 60 s on a loaded CI
def test_every_answer_conforms_to_the_document(served: tuple[ChuteServer, str]) -> None:
    srv, base = served
    _some_state(srv)
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the document is valid OpenAPI
        operations.append(result.ok())
    assert len(operations) == 24  # every one in the document, each checked below
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @settings(
                max_examples=EXAMPLES,
                derandomize=True,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def check(case: Case[Any]) -> None:
                case.call_and_validate(base_url=base, excluded_checks=ACCEPTED_ANYWAY)

            try:
                check()
            except Unsatisfiable:
                # nothing invalid fits in this operation's request (a path parameter
                # that is any string): its valid requests were checked
                assert mode is GenerationMode.NEGATIVE
            except Exception as exc:
                exc.add_note(f"operation: {operation.label} ({mode.value})")
                raise
    assert "Traceback" not in srv.output  # nothing raised unexpectedly in the broker


def test_the_served_document_is_the_one_in_the_package(served: tuple[ChuteServer, str]) -> None:
    _, base = served
    with urllib.request.urlopen(f"{base}/api/openapi.json", timeout=10) as response:  # noqa: S310
        assert json.load(response) == document()
