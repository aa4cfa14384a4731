"""etcd's JSON gateway bodies, built and parsed without an etcd (answers as etcd 3.4 sends them)."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.cluster import etcd_wire as wire
from chute.cluster.errors import EtcdAuthError, EtcdError, EtcdUnavailable, LeaseNotFound

HEADER = {"cluster_id": "1", "member_id": "2", "revision": "7", "raft_term": "2"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_prefix_end_increments_the_last_byte_that_can_be() -> None:
    assert wire.prefix_end(b"/c/nodes/") == b"/c/nodes0"
    assert wire.prefix_end(b"a\xff") == b"b"
    assert wire.prefix_end(b"\xff\xff") == b"\0"


def test_a_range_by_prefix_and_its_answer() -> None:
    path, body = wire.range_request(b"/c/", prefix=True)
    assert path == "/v3/kv/range"
    assert body == {"key": b64("/c/"), "range_end": b64("/c0")}
    answer = {
        "header": HEADER,
        "kvs": [
            {"key": b64("/c/a"), "create_revision": "3", "mod_revision": "5", "version": "2"},
            {"key": b64("/c/b"), "value": b64("x"), "lease": "7587", "create_revision": "6"},
        ],
        "count": "2",
    }
    result = wire.parse_range(answer)
    assert result.revision == 7
    # fields at their zero value are left out: no value, no lease
    assert result.kvs == (
        wire.KeyValue(b"/c/a", b"", 3, 5, 2, 0),
        wire.KeyValue(b"/c/b", b"x", 6, 0, 0, 7587),
    )
    assert wire.parse_range({"header": HEADER}).kvs == ()  # an empty range has no "kvs"


def test_a_create_if_absent_transaction() -> None:
    path, body = wire.txn_request(
        [wire.Compare(b"k", wire.Target.CREATE, 0)],
        [wire.Put(b"k", b"v", lease=12)],
        [wire.Get(b"k")],
    )
    assert path == "/v3/kv/txn"
    assert body == {
        "compare": [
            {"key": b64("k"), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        ],
        "success": [{"request_put": {"key": b64("k"), "value": b64("v"), "lease": "12"}}],
        "failure": [{"request_range": {"key": b64("k")}}],
    }
    won = wire.parse_txn({"header": HEADER, "succeeded": True, "responses": [{"response_put": {}}]})
    assert won == wire.TxnResult(True, 7, ())
    # a failed transaction has no "succeeded" at all
    lost = wire.parse_txn(
        {
            "header": HEADER,
            "responses": [
                {"response_range": {"kvs": [{"key": b64("k"), "lease": "99", "value": b64("o")}]}}
            ],
        }
    )
    assert not lost.succeeded
    assert lost.kvs[0].lease == 99
    assert lost.kvs[0].value == b"o"


def test_a_compare_and_swap_compares_the_mod_revision() -> None:
    _, body = wire.txn_request([wire.Compare(b"k", wire.Target.MOD, 41)], [wire.Put(b"k", b"v")])
    assert body["compare"] == [
        {"key": b64("k"), "result": "EQUAL", "target": "MOD", "mod_revision": "41"}
    ]
    assert body["success"] == [{"request_put": {"key": b64("k"), "value": b64("v")}}]


def test_leases() -> None:
    assert wire.lease_grant_request(5) == ("/v3/lease/grant", {"TTL": "5"})
    assert wire.parse_lease({"header": HEADER, "ID": "7587", "TTL": "5"}) == wire.Lease(7587, 5)
    alive = {"result": {"header": HEADER, "ID": "7587", "TTL": "5"}}
    assert wire.parse_keepalive(alive, 7587) == 5
    # an expired lease's keep-alive answer has no TTL: the lease is gone
    with pytest.raises(LeaseNotFound):
        wire.parse_keepalive({"result": {"header": HEADER, "ID": "7587"}}, 7587)


def test_watch_lines() -> None:
    path, body = wire.watch_request(b"/c/", start_revision=8)
    assert path == "/v3/watch"
    assert body == {
        "create_request": {"key": b64("/c/"), "range_end": b64("/c0"), "start_revision": "8"}
    }
    with pytest.raises(ValueError, match="revision >= 1"):
        wire.watch_request(b"/c/", start_revision=0)
    created = wire.parse_watch_line(
        json.dumps({"result": {"header": HEADER, "created": True}}).encode()
    )
    assert created.created
    assert created.events == ()
    line = {
        "result": {
            "header": HEADER,
            "events": [
                {"kv": {"key": b64("/c/a"), "create_revision": "8", "mod_revision": "8"}},
                {"type": "DELETE", "kv": {"key": b64("/c/a"), "mod_revision": "9"}},
            ],
        }
    }
    events = wire.parse_watch_line(json.dumps(line).encode()).events
    assert [(e.type, e.kv.mod_revision) for e in events] == [
        (wire.EventType.PUT, 8),
        (wire.EventType.DELETE, 9),
    ]
    compacted = wire.parse_watch_line(
        b'{"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"3"}}'
    )
    assert compacted.canceled
    assert compacted.compact_revision == 3


def test_bad_answers_are_etcd_errors_not_crashes() -> None:
    with pytest.raises(EtcdError, match="not JSON"):
        wire.parse_watch_line(b"{half")
    with pytest.raises(EtcdError, match="not an integer"):
        wire.parse_range({"header": {"revision": "x"}})
    with pytest.raises(EtcdError, match="not base64"):
        wire.parse_range({"kvs": [{"key": "!!"}]})


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"error": "etcdserver: user name is empty", "code": 3}, EtcdAuthError),
        (
            {"error": "etcdserver: authentication failed, invalid user ID or password", "code": 3},
            EtcdAuthError,
        ),
        ({"error": "etcdserver: invalid auth token", "code": 16}, EtcdAuthError),
        ({"error": "etcdserver: permission denied", "code": 7}, EtcdAuthError),
        ({"error": "etcdserver: requested lease not found", "code": 5}, LeaseNotFound),
        ({"error": "etcdserver: no leader", "code": 14}, EtcdUnavailable),
        ({"error": "etcdserver: too many operations in txn request", "code": 3}, EtcdError),
        ({"error": {"grpc_code": 16, "message": "etcdserver: invalid auth token"}}, EtcdAuthError),
    ],
)
def test_error_answers_map_to_typed_errors(body: dict[str, object], kind: type[EtcdError]) -> None:
    error = wire.error_from_body(400, body)
    assert type(error) is kind
    assert "etcdserver" in str(error)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
FIELDS = st.sampled_from(
    [
        "header",
        "kvs",
        "responses",
        "response_range",
        "result",
        "events",
        "kv",
        "key",
        "value",
        "revision",
        "create_revision",
        "TTL",
        "ID",
        "lease",
        "succeeded",
        "created",
        "canceled",
        "compact_revision",
        "error",
        "message",
        "code",
        "grpc_code",
        "token",
        "type",
    ]
)
# objects shaped like etcd's answers, with any value in any field
ANSWERS = st.recursive(
    st.dictionaries(FIELDS, JSON, max_size=5),
    lambda inner: st.dictionaries(FIELDS, inner | st.lists(inner, max_size=3) | JSON, max_size=5),
    max_leaves=10,
)


@given(body=ANSWERS)
def test_any_answer_parses_or_is_an_etcd_error(body: dict[str, object]) -> None:
    """What an etcd of another version, or something else on its port, sends never
    raises anything but EtcdError (the client's callers handle exactly that)."""
    parsers: list[Callable[[dict[str, object]], object]] = [
        wire.parse_range,
        wire.parse_txn,
        wire.parse_lease,
        wire.parse_revision,
        wire.parse_token,
        lambda b: wire.parse_keepalive(b, 1),
        lambda b: wire.parse_watch_line(json.dumps(b).encode()),
    ]
    for parse in parsers:
        with contextlib.suppress(EtcdError):
            parse(body)
    assert isinstance(wire.error_from_body(500, body), EtcdError)


@given(line=st.binary(max_size=200))
def test_any_watch_line_parses_or_is_an_etcd_error(line: bytes) -> None:
    with contextlib.suppress(EtcdError):
        wire.parse_watch_line(line)
