"""``chute serve --nodes``: what the parent plans for its nodes, and what a node makes of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute import passwords
from chute.config import ServerConfig
from chute.core.rules.access import Action, User
from chute.errors import ConfigError
from chute.server.supervisor import as_node, describe_exit, plan_nodes


def test_nodes_are_named_and_numbered_from_the_native_port() -> None:
    config = ServerConfig()
    planned = plan_nodes(config, 3, 0)
    assert [n.node for n in planned] == ["node-0", "node-1", "node-2"]
    assert [n.port for n in planned] == [5446, 5447, 5448]
    assert all(n.members == planned[0].members for n in planned)
    assert [n.port for n in plan_nodes(config, 2, 7000)] == [7000, 7001]
    assert all(not n.user and not n.password for n in planned)  # no users: no login


@pytest.mark.parametrize(("host", "dialed"), [("0.0.0.0", "127.0.0.1"), ("::", "[::1]")])  # noqa: S104
def test_links_dial_loopback_when_the_host_is_a_wildcard(host: str, dialed: str) -> None:
    config = ServerConfig()
    config.listen.host = host
    assert plan_nodes(config, 1, 7000)[0].members == {"node-0": f"{dialed}:7000"}


def test_with_users_the_links_log_in_as_a_user_of_this_run() -> None:
    config = ServerConfig()
    config.users = {"chute-nodes": User("chute-nodes", "pw", ("admin",))}
    first, second = plan_nodes(config, 2, 7000)
    assert first.user == "chute-nodes-2"  # the configured user keeps its name
    assert first.password == second.password
    assert len(first.password) >= 32
    assert passwords.verify(first.password_hash, first.password)
    assert plan_nodes(config, 2, 7000)[0].password != first.password  # one per run
    as_node(config, second)
    user = config.users["chute-nodes-2"]
    assert user.password == first.password_hash
    assert config.roles[user.roles[0]].grants == {Action.CLUSTER: ("*",)}
    assert config.cluster.user == "chute-nodes-2"
    assert config.cluster.password == first.password
    assert config.cluster.node == "node-1"
    assert config.nodes == second


def test_a_configured_cluster_user_is_used_as_it_is() -> None:
    config = ServerConfig()
    config.users = {"peer": User("peer", "peer-pw", ())}
    config.cluster.user, config.cluster.password = "peer", "peer-pw"
    planned = plan_nodes(config, 2, 7000)[0]
    assert (planned.user, planned.password, planned.password_hash) == ("peer", "peer-pw", "")


def test_a_node_keeps_its_data_in_its_own_directory_and_only_the_first_mounts_dropboxes() -> None:
    config = ServerConfig()
    config.storage.data_dir = Path("/srv/chute")
    config.dropbox = ["mount"]  # type: ignore[list-item]
    first, second = plan_nodes(config, 2, 7000)
    as_node(config, second)
    assert config.storage.data_dir == Path("/srv/chute/nodes/node-1")
    assert config.dropbox == []
    other = ServerConfig()
    other.dropbox = ["mount"]  # type: ignore[list-item]
    as_node(other, first)
    assert len(other.dropbox) == 1


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: setattr(c.cluster, "coordinator", "etcd://h:1"), "with no etcd"),
        (lambda c: setattr(c.cluster, "advertise", "h:1"), "leave out --node and --advertise"),
        (lambda c: setattr(c.cluster, "tls", True), "without TLS"),
        (lambda c: setattr(c.listen, "port", 0), "needs --node-port"),
        (lambda c: setattr(c.listen, "stomp_port", 5447), "take 5447, the stomp_port"),
    ],
)
def test_what_nodes_cannot_run_with_is_refused(change: object, said: str) -> None:
    config = ServerConfig()
    change(config)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=said):
        plan_nodes(config, 3, 0)


def test_too_many_nodes_for_the_ports_left_is_refused() -> None:
    with pytest.raises(ConfigError, match="leaves no room for 10 nodes"):
        plan_nodes(ServerConfig(), 10, 65530)


def test_an_exit_says_its_status_or_its_signal() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"
