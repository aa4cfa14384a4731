"""A fixed membership (``chute serve --nodes``): what a node is told, and the joins it emits."""

from __future__ import annotations

import asyncio

import pytest

from chute.cluster.fixed import FixedMembership, FixedNodes
from chute.cluster.membership import EventKind, MembershipEvent, NodeState
from chute.errors import ConfigError

MEMBERS = {"node-0": "127.0.0.1:5446", "node-1": "127.0.0.1:5447", "node-2": "[::1]:5448"}


def test_a_description_goes_through_json_whole() -> None:
    secret, hashed = "secret", "$argon2x"
    nodes = FixedNodes("node-1", MEMBERS, user="u", password=secret, password_hash=hashed)
    again = FixedNodes.from_json(nodes.to_json())
    assert again == nodes
    assert again.port == 5447
    assert FixedNodes("node-2", MEMBERS).port == 5448
    assert "secret" not in repr(nodes)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"node": "node-9", "members": {"node-0": "h:1"}, "cluster": "local"}',
        '{"node": "node-0", "members": {"node-0": "h:port"}, "cluster": "local"}',
        '{"node": "bad name", "members": {"bad name": "h:1"}, "cluster": "local"}',
        '{"node": "node-0", "members": ["node-0"], "cluster": "local"}',
    ],
)
def test_anything_else_is_a_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="not a description of a node"):
        FixedNodes.from_json(text)


def test_every_member_joins_at_start_and_none_ever_leaves() -> None:
    async def run() -> list[MembershipEvent]:
        membership = FixedMembership(FixedNodes("node-1", MEMBERS))
        seen: list[MembershipEvent] = []
        membership.add_listener(seen.append)
        states = [membership.state]
        await membership.start()
        states.append(membership.state)
        await asyncio.wait_for(membership.wait_for(lambda m: m.state is NodeState.REGISTERED), 1)
        await membership.stop()
        states.append(membership.state)
        assert states == [NodeState.STARTING, NodeState.REGISTERED, NodeState.STOPPED]
        assert set(membership.members) == set(MEMBERS)
        return seen

    seen = asyncio.run(run())
    assert [e.kind for e in seen] == [EventKind.JOIN] * 3
    assert {e.member.name: e.member.address for e in seen} == MEMBERS
