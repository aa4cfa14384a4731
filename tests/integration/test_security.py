"""Who may do what, over the wire: a real ``chute serve`` with three users and roles.

alice (role ``orders``: send/consume/browse/create on ``queue:orders.*``, and
consume on ``topic:prices``), bob
(role ``own``: the same on ``queue:bob.*``) and root (the built-in ``admin``).
alice tries, through the native protocol (the Python client) and STOMP
(stomp.py), each bypass an attacker would: every one is refused with a clear
error, and bob's messages stay where they are.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import chute
from chute.core.model.address import DEAD_LETTER, user_queue
from chute.errors import AccessDenied, AuthenticationFailed, ChuteError, ClientIdInUse
from chute.passwords import hash_password

from .conftest import ChuteServer, free_port, start_server
from .test_smq import wait_for_line
from .test_smq_client import MessageQueueWriter, QueueClosed
from .test_stomp import TIMEOUT, Client
from .test_stomp_websocket import WsClient

ACTIONS = '["queue:{0}.*"]'
CONFIG = f"""
[users.alice]
password = "{hash_password("alice-pw")}"
roles = ["orders"]

[users.bob]
password = "bob-pw"
roles = ["own"]

[users.root]
password = "root-pw"
roles = ["admin"]

[roles.orders]
send = {ACTIONS.format("orders")}
consume = ["queue:orders.*", "topic:prices"]
browse = {ACTIONS.format("orders")}
create = {ACTIONS.format("orders")}

[roles.own]
send = {ACTIONS.format("bob")}
consume = {ACTIONS.format("bob")}
browse = {ACTIONS.format("bob")}
create = {ACTIONS.format("bob")}
"""
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "root": "root-pw"}


@dataclass
class Broker:
    server: ChuteServer
    stomp_port: int
    http_port: int

    def native(self, user: str, client_id: str | None = None) -> chute.Connection:
        return chute.connect(
            f"chute://127.0.0.1:{self.server.port}",
            login=user,
            passcode=PASSWORDS[user],
            client_id=client_id,
        )

    def stomp(self, user: str, **headers: str) -> Client:
        return Client(self.stomp_port, username=user, passcode=PASSWORDS[user], headers=headers)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    home = tmp_path_factory.mktemp("security")
    config = home / "chute.toml"
    config.write_text(CONFIG)
    stomp_port, http_port = free_port(), free_port()
    server = start_server(
        home,
        "--config",
        str(config),
        "--stomp-port",
        str(stomp_port),
        "--http-port",
        str(http_port),
    )
    with (
        chute.connect(f"chute://127.0.0.1:{server.port}", login="bob", passcode="bob-pw") as bob,
        bob.session() as s,
    ):
        s.send("queue:bob.inbox", "bob's secret")
    with (
        chute.connect(f"chute://127.0.0.1:{server.port}", login="root", passcode="root-pw") as root,
        root.session() as s,
    ):
        s.send(user_queue("bob"), "for bob only")
    yield Broker(server, stomp_port, http_port)
    assert server.stop() == 0, server.output


def bobs_messages(broker: Broker) -> list[str]:
    with broker.native("bob") as bob, bob.session() as s:
        return [m.text for m in s.browse("queue:bob.inbox")]


# -- the native protocol ----------------------------------------------------------------


def test_a_wrong_password_an_unknown_user_and_no_login_are_refused_alike(broker: Broker) -> None:
    url = f"chute://127.0.0.1:{broker.server.port}"
    for login, passcode in (("alice", "bob-pw"), ("mallory", "x"), (None, None)):
        with pytest.raises(AuthenticationFailed, match="login or passcode rejected"):
            chute.connect(url, login=login, passcode=passcode)


@pytest.mark.parametrize(
    "address", ["queue:bob.inbox", DEAD_LETTER, "queue:__sys__expired", "topic:anything"]
)
def test_native_send_without_the_grant_is_refused(broker: Broker, address: str) -> None:
    with (
        broker.native("alice") as alice,
        alice.session() as s,
        pytest.raises(AccessDenied, match=r"may not (send|create)"),
    ):
        s.send(address, "intruder")
    assert bobs_messages(broker) == ["bob's secret"]


def test_native_consume_browse_and_cursor_of_anothers_queue_are_refused(broker: Broker) -> None:
    with broker.native("alice") as alice, alice.session() as s:
        with pytest.raises(AccessDenied):
            s.consumer("queue:bob.inbox")
        for address in ("queue:bob.inbox", DEAD_LETTER, user_queue("bob")):
            with pytest.raises(AccessDenied):
                s.browse(address)
            with pytest.raises(AccessDenied):
                alice.cursor_open(address, "steal")
    assert bobs_messages(broker) == ["bob's secret"]
    with broker.native("bob") as bob, bob.session() as s:
        assert [m.text for m in s.browse(user_queue("bob"))] == ["for bob only"]


def test_native_create_on_first_use_needs_create(broker: Broker) -> None:
    with broker.native("alice") as alice, alice.session() as s:
        s.send("queue:orders.new", "fine")  # granted: created
        with pytest.raises(AccessDenied, match=r"may not (send|create) queue:elsewhere"):
            s.send("queue:elsewhere", "no")
    with broker.native("root") as root:
        addresses = {d["address"] for d in root.stat()["destinations"]}
    assert "queue:orders.new" in addresses
    assert "queue:elsewhere" not in addresses


def test_native_stat_shows_only_what_the_user_may_see(broker: Broker) -> None:
    with broker.native("alice") as alice:
        seen = {d["address"] for d in alice.stat()["destinations"]}
    assert "queue:bob.inbox" not in seen
    assert DEAD_LETTER not in seen
    with broker.native("root") as root:
        assert "queue:bob.inbox" in {d["address"] for d in root.stat()["destinations"]}


def test_native_prepared_transactions_are_their_users(broker: Broker) -> None:
    with broker.native("bob") as bob:
        tx = bob.session(transacted=True)
        tx.send("queue:bob.inbox", "staged")
        tx.prepare("bob-xid")
        with broker.native("alice") as alice:
            assert "bob-xid" not in alice.prepared()
            with pytest.raises(ChuteError):
                alice.rollback_prepared("bob-xid")
        assert bob.prepared() == ["bob-xid"]
        bob.rollback_prepared("bob-xid")
    assert bobs_messages(broker) == ["bob's secret"]


def test_native_client_id_is_one_connection_at_a_time(broker: Broker) -> None:
    with broker.native("bob", client_id="bob-app"), pytest.raises(ClientIdInUse, match="in use"):
        broker.native("alice", client_id="bob-app")
    with broker.native("alice", client_id="bob-app"):
        pass  # free again once bob's connection ended


def test_native_durable_subscription_is_its_creators(broker: Broker) -> None:
    with broker.native("root", client_id="shared-id") as root, root.session() as s:
        s.consumer("topic:prices", subscription="s", durable=True).close()
    with broker.native("bob", client_id="shared-id") as bob, bob.session() as s:
        with pytest.raises(AccessDenied):
            s.consumer("topic:prices", subscription="s", durable=True)
        with pytest.raises(AccessDenied):
            s.unsubscribe("s")
    with broker.native("root", client_id="shared-id") as root, root.session() as s:
        s.unsubscribe("s")


def test_native_temporary_queue_is_its_connections(broker: Broker) -> None:
    with (
        broker.native("bob") as bob,
        bob.session() as mine,
        broker.native("alice") as alice,
        alice.session() as s,
    ):
        reply = mine.temporary_queue()
        s.send(reply, "a reply")  # anyone may answer
        with pytest.raises(AccessDenied):
            s.consumer(reply)
        with pytest.raises(AccessDenied):
            s.browse(reply)
        assert [m.text for m in mine.browse(reply)] == ["a reply"]


# -- STOMP ------------------------------------------------------------------------------


def stomp_error(client: Client) -> str:
    """The ERROR frame's message; the broker then ends the connection."""
    frame = client.errors.get(timeout=TIMEOUT)
    message: str = frame.headers.get("message", "")
    assert client.disconnected.wait(TIMEOUT)
    return message


def close(client: Client) -> None:
    if not client.disconnected.is_set():
        client.close()


@pytest.mark.parametrize("address", ["/queue/bob.inbox", "/queue/__sys__deadLetter"])
def test_stomp_send_without_the_grant_is_refused(broker: Broker, address: str) -> None:
    alice = broker.stomp("alice")
    try:
        alice.conn.send(address, b"intruder", receipt="r")
        assert "may not" in stomp_error(alice)
    finally:
        close(alice)
    assert bobs_messages(broker) == ["bob's secret"]


@pytest.mark.parametrize(
    "address", ["/queue/bob.inbox", "/queue/__sys__deadLetter", f"/queue/{user_queue('bob')[6:]}"]
)
def test_stomp_subscribe_to_anothers_queue_is_refused(broker: Broker, address: str) -> None:
    alice = broker.stomp("alice")
    try:
        alice.conn.subscribe(address, id="s", ack="client-individual", receipt="r")
        assert stomp_error(alice)
        with pytest.raises(queue.Empty):
            alice.messages.get(timeout=0.3)
    finally:
        close(alice)
    assert bobs_messages(broker) == ["bob's secret"]


def test_stomp_login_is_refused_alike_and_client_id_is_one_at_a_time(broker: Broker) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - stomp.py raises its own errors
        Client(broker.stomp_port, username="alice", passcode="wrong")
    with (
        broker.native("bob", client_id="stomp-app"),
        pytest.raises(Exception),  # noqa: B017, PT011
    ):
        broker.stomp("alice", **{"client-id": "stomp-app"})


# -- the seed-002 listeners: no login, a configured user, allowed client addresses -------


def smq_broker(tmp: Path, smq: str) -> tuple[ChuteServer, int]:
    source = free_port()
    config = tmp / "chute.toml"
    config.write_text(
        CONFIG + f"\n[smq]\nqueue = 'jobs'\nsource_port = {source}\nsink_port = 0\n{smq}"
    )
    return start_server(tmp, "--config", str(config)), source


def test_smq_sources_act_as_their_user(tmp_path: Path) -> None:
    server, source = smq_broker(tmp_path, 'user = "bob"\n')  # bob may not send to jobs
    try:
        writer = MessageQueueWriter("127.0.0.1", source)
        with pytest.raises((QueueClosed, OSError)):
            writer.write(b"from a legacy producer")
        wait_for_line(server, "may not send queue:jobs")
        with (
            chute.connect(
                f"chute://127.0.0.1:{server.port}", login="root", passcode="root-pw"
            ) as root,
            root.session() as s,
        ):
            assert s.browse("queue:jobs") == []  # nothing was stored
    finally:
        assert server.stop() == 0, server.output


def test_smq_refuses_clients_outside_its_allowed_addresses(tmp_path: Path) -> None:
    server, source = smq_broker(tmp_path, 'user = "root"\nallowed_clients = ["10.0.0.0/8"]\n')
    try:
        writer = MessageQueueWriter("127.0.0.1", source)
        with pytest.raises((QueueClosed, OSError)):
            writer.write(b"from outside")
        wait_for_line(server, "refused: not in smq.allowed_clients")
    finally:
        assert server.stop() == 0, server.output


def test_the_cli_stat_and_tx_show_a_user_only_their_own(broker: Broker) -> None:
    def cli(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chute.cli", *args, "--url", f"chute://127.0.0.1:{broker.server.port}",
             "--login", user, "--passcode", PASSWORDS[user]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    alice = cli("alice", "stat", "--json")
    assert alice.returncode == 0, alice.stderr
    seen = {d["address"] for d in json.loads(alice.stdout)["destinations"]}
    assert "queue:bob.inbox" not in seen
    assert DEAD_LETTER not in seen
    root = cli("root", "stat", "--json")
    assert "queue:bob.inbox" in {d["address"] for d in json.loads(root.stdout)["destinations"]}
    denied = cli("alice", "send", "queue:bob.inbox", "hi")
    assert denied.returncode == 1
    assert "may not send queue:bob.inbox" in denied.stderr


def test_stomp_over_websocket_obeys_the_same_rules(broker: Broker) -> None:
    alice = WsClient(broker.http_port, username="alice", passcode="alice-pw")
    try:
        alice.conn.subscribe("/queue/bob.inbox", id="s", ack="client-individual")
        assert "may not consume queue:bob.inbox" in stomp_error(alice)
        with pytest.raises(queue.Empty):
            alice.messages.get(timeout=0.3)
    finally:
        close(alice)
    assert bobs_messages(broker) == ["bob's secret"]


def test_failed_logins_lock_an_address_out_over_the_wire(tmp_path: Path) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(
        '[server]\nmax_login_failures = 2\n[users.bob]\npassword = "bob-pw"\nroles = ["admin"]\n'
    )
    server = start_server(tmp_path, "--config", str(config))
    url = f"chute://127.0.0.1:{server.port}"
    try:
        for _ in range(2):
            with pytest.raises(AuthenticationFailed, match="rejected"):
                chute.connect(url, login="bob", passcode="guess")
        with pytest.raises(AuthenticationFailed, match="too many failed logins"):
            chute.connect(url, login="bob", passcode="bob-pw")  # even the right one, for now
        wait_for_line(server, "failed logins from 127.0.0.1")
    finally:
        assert server.stop() == 0, server.output


def test_stomp_create_and_durable_subscriptions_obey_the_same_rules(broker: Broker) -> None:
    alice = broker.stomp("alice")
    try:
        alice.conn.send("/queue/nowhere.new", b"x")  # not granted: not created
        assert "may not send queue:nowhere.new" in stomp_error(alice)
    finally:
        close(alice)
    with broker.native("root", client_id="stomp-durable") as root, root.session() as s:
        s.consumer("topic:prices", subscription="d", durable=True).close()
    alice = broker.stomp("alice", **{"client-id": "stomp-durable"})
    try:
        alice.conn.subscribe(
            "/topic/prices", id="s", ack="client-individual", **{"durable-subscription-name": "d"}
        )
        assert "belongs to another user" in stomp_error(alice)
    finally:
        close(alice)
    with broker.native("root") as root:
        assert "queue:nowhere.new" not in {d["address"] for d in root.stat()["destinations"]}
