"""Heart-beat negotiation, STOMP 1.2 §Heart-beating."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chute.errors import RemoteProtocolError
from chute.stomp.heartbeat import format_value, negotiate, parse


@pytest.mark.parametrize(
    ("client", "server", "expected"),
    [
        # "if <cx> is 0 (the client cannot send heart-beats) or <sy> is 0 (the server does
        # not want to receive heart-beats) then there will be none"
        ((0, 0), (5000, 5000), (0, 0)),
        ((0, 1000), (5000, 5000), (5000, 0)),
        ((1000, 0), (5000, 5000), (0, 5000)),
        ((1000, 1000), (0, 0), (0, 0)),
        # "otherwise, there will be heart-beats every MAX(<cx>,<sy>) milliseconds"
        ((1000, 1000), (5000, 5000), (5000, 5000)),
        ((10_000, 20_000), (5000, 5000), (20_000, 10_000)),
        ((4000, 0), (0, 3000), (0, 4000)),
    ],
)
def test_negotiate(
    client: tuple[int, int], server: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert negotiate(client, server) == expected


@given(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
)
def test_negotiation_is_the_same_seen_from_both_sides(
    client: tuple[int, int], server: tuple[int, int]
) -> None:
    server_send, server_expect = negotiate(client, server)
    client_send, client_expect = negotiate(server, client)
    assert (server_send, server_expect) == (client_expect, client_send)


def test_parse() -> None:
    # §Heart-beating: a missing header is "heart-beat:0,0"
    assert parse(None) == (0, 0)
    assert parse("0,0") == (0, 0)
    assert parse("10000,5000") == (10_000, 5000)
    assert parse(" 100 , 200 ") == (100, 200)
    assert format_value((10_000, 5000)) == "10000,5000"


@pytest.mark.parametrize("value", ["", "1", "1,2,3", "-1,0", "a,b", "1.5,2", "\u0661,\u0662"])
def test_parse_rejects(value: str) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        parse(value)
    assert info.value.error_code == "bad-heart-beat"
