"""Who may do what, in the core (chute.core.rules.access and the connection's ownership rules).

Two users on one broker, as an attacker would try it: alice (role ``orders``:
everything on ``queue:orders.*`` and ``topic:prices``), bob (role ``own``:
everything on ``queue:bob.*``), and root (the built-in ``admin`` role). Each
refusal is AccessDenied, and nothing is delivered, changed or revealed.
"""

from __future__ import annotations

import re

import pytest

from chute.core.model.address import DEAD_LETTER, user_queue
from chute.core.model.consumer import AckMode
from chute.core.operations.connection import BrokerConnection, connect
from chute.core.rules.access import (
    ADMIN_ROLE,
    Access,
    Action,
    Grants,
    LoginThrottle,
    Role,
    User,
    peer_host,
)
from chute.core.rules.broker import Broker
from chute.errors import (
    AccessDenied,
    AuthenticationFailed,
    ClientIdInUse,
    NotFound,
    TransactionError,
)
from chute.passwords import hash_password
from chute.store.memory import MemoryStore

from .helpers import FakeClock, Recorder, make_broker, memory, msg, restart

ALL = tuple(Action)
ROLES = {
    "admin": ADMIN_ROLE,
    "orders": Role("orders", {a: ("queue:orders.*", "topic:prices") for a in ALL}),
    "own": Role("own", {a: ("queue:bob.*",) for a in ALL if a is not Action.MANAGE}),
}
ALICE_HASH = hash_password("alice-pw")
USERS = {
    "alice": User("alice", ALICE_HASH, ("orders",)),
    "bob": User("bob", "bob-pw", ("own",)),
    "root": User("root", "root-pw", ("admin",)),
}


@pytest.fixture
def broker(clock: FakeClock) -> Broker:
    b = make_broker(clock=clock)
    b.access = Access(USERS, ROLES)
    return b


def login(broker: Broker, user: str, client_id: str | None = None) -> BrokerConnection:
    password = {"alice": "alice-pw", "bob": "bob-pw", "root": "root-pw"}[user]
    return connect(broker, user, password, client_id=client_id, peer="127.0.0.1:5000")


# -- patterns -------------------------------------------------------------------------------


def test_a_wildcard_never_reaches_a_reserved_name_unless_it_names_it() -> None:
    grants = Grants({Action.CONSUME: ("*", "queue:*", "topic:*")})
    assert grants.allows(Action.CONSUME, "queue:orders")
    assert grants.allows(Action.CONSUME, "topic:news")
    for reserved in (DEAD_LETTER, "queue:__tmp__.abc", user_queue("bob")):
        assert not grants.allows(Action.CONSUME, reserved)
    sys_only = Grants({Action.CONSUME: ("queue:__sys__*",)})
    assert sys_only.allows(Action.CONSUME, DEAD_LETTER)
    assert not sys_only.allows(Action.CONSUME, "queue:orders")
    assert not grants.allows(Action.SEND, "queue:orders")  # another action


def test_star_reaches_every_kind_and_a_kind_pattern_only_its_own() -> None:
    star = Grants({Action.CONSUME: ("*",)})
    for address in ("queue:q", "topic:t", "stream:s"):
        assert star.allows(Action.CONSUME, address)
    streams = Grants({Action.CONSUME: ("stream:orders.*",)})
    assert streams.allows(Action.CONSUME, "stream:orders.eu")
    assert not streams.allows(Action.CONSUME, "queue:orders.eu")


def test_patterns_match_by_kind_and_prefix() -> None:
    grants = Grants({Action.SEND: ("orders.*", "/topic/prices.*")})
    assert grants.allows(Action.SEND, "queue:orders.eu")
    assert not grants.allows(Action.SEND, "queue:ordersX")
    assert not grants.allows(Action.SEND, "topic:orders.eu")
    assert grants.allows(Action.SEND, "topic:prices.eur")


# -- authentication -------------------------------------------------------------------------


def test_a_hashed_and_a_plain_password_log_in_and_anything_else_is_refused_alike(
    broker: Broker,
) -> None:
    assert login(broker, "alice").login == "alice"
    assert login(broker, "bob").login == "bob"
    refusals = []
    for user, password in (("alice", "wrong"), ("nobody", "alice-pw"), (None, None), ("bob", "")):
        with pytest.raises(AuthenticationFailed) as info:
            connect(broker, user, password, peer="10.0.0.9:1")
        refusals.append(info.value.reason)
    assert set(refusals) == {"login or passcode rejected"}


def test_a_certificate_names_its_user_and_a_login_beside_it_must_agree(broker: Broker) -> None:
    access = broker.access
    assert access.authenticate(None, None, certificate_user="bob").user == "bob"
    assert access.authenticate("bob", None, certificate_user="bob").user == "bob"
    with pytest.raises(AuthenticationFailed):
        access.authenticate("alice", "alice-pw", certificate_user="bob")
    with pytest.raises(AuthenticationFailed):
        access.authenticate(None, None, certificate_user="mallory")


def test_failed_logins_lock_the_address_out_for_the_window() -> None:
    now = [0.0]
    access = Access(USERS, ROLES, throttle=LoginThrottle(3, 60.0, clock=lambda: now[0]))
    for _ in range(3):
        with pytest.raises(AuthenticationFailed, match="rejected"):
            access.authenticate("bob", "guess", peer="10.0.0.9:4000")
    with pytest.raises(AuthenticationFailed, match=r"too many failed logins from 10\.0\.0\.9"):
        access.authenticate("bob", "bob-pw", peer="10.0.0.9:4001")  # even the right one
    assert access.authenticate("bob", "bob-pw", peer="10.0.0.10:4000").user == "bob"
    now[0] = 60.0
    assert access.authenticate("bob", "bob-pw", peer="10.0.0.9:4002").user == "bob"


def test_a_password_check_runs_apart_and_its_result_decides_the_login() -> None:
    access = Access(USERS, ROLES, throttle=LoginThrottle(2, 60.0))
    check = access.password_check("alice", "alice-pw", peer="10.0.0.1:1")
    assert check is not None
    assert check.slow  # an argon2 hash: the server runs it off its loop
    check.run()
    assert check.result is True
    assert access.authenticate("alice", "alice-pw", peer="10.0.0.1:1", check=check).user == "alice"
    # verified lately, a certificate, no users: nothing to run apart
    assert access.password_check("alice", "alice-pw", peer="10.0.0.1:2") is None
    assert access.password_check(None, None, certificate_user="bob") is None
    assert Access().password_check("alice", "x") is None
    # the check's result is what counts: a refusal it reached refuses the right password
    refused = access.password_check("alice", "alice-pw2", peer="10.0.0.2:1")
    assert refused is not None
    refused.run()
    assert refused.result is False
    denied = type(refused)(refused.stored, "alice-pw", result=False)
    access = Access(USERS, ROLES, throttle=LoginThrottle(2, 60.0))  # nothing remembered
    with pytest.raises(AuthenticationFailed):
        access.authenticate("alice", "alice-pw", peer="10.0.0.2:1", check=denied)
    # a check for another passcode or another user's hash is not believed
    forged = type(refused)(refused.stored, "anything", result=True)
    with pytest.raises(AuthenticationFailed):
        access.authenticate("alice", "wrong", peer="10.0.0.2:2", check=forged)
    # an unknown user's check is against a hash too (a refusal takes as long), and a
    # throttled address needs none
    unknown = access.password_check("nobody", "x", peer="10.0.0.3:1")
    assert unknown is not None
    assert unknown.slow
    assert access.password_check("alice", "x", peer="10.0.0.2:3") is None  # locked out


def test_peer_host_strips_the_port() -> None:
    assert peer_host("10.1.2.3:5445") == "10.1.2.3"
    assert peer_host("[::1]:5445") == "::1"
    assert peer_host("?") == "?"


def test_without_users_everyone_may_do_everything(clock: FakeClock) -> None:
    broker = make_broker(clock=clock)
    conn = connect(broker, "anyone", None)
    conn.session().send("queue:__sys__x", msg())
    assert conn.stats()["destinations"]


# -- each action ----------------------------------------------------------------------------


def test_send_needs_send_and_a_new_destination_needs_create(broker: Broker) -> None:
    alice = login(broker, "alice").session()
    alice.send("queue:orders.eu", msg("ok"))
    for address in ("queue:bob.inbox", DEAD_LETTER, "queue:__sys__expired", "topic:news"):
        with pytest.raises(AccessDenied, match=f"may not send {re.escape(address)}"):
            alice.send(address, msg("no"))
    assert "queue:bob.inbox" not in broker.queues  # nothing was created
    assert "topic:news" not in broker.topics
    limited = Role("limited", {Action.SEND: ("queue:orders.*",)})
    broker.access = Access({"carol": User("carol", "pw", ("limited",))}, {"limited": limited})
    carol = connect(broker, "carol", "pw").session()
    carol.send("queue:orders.eu", msg())  # exists: no create needed
    with pytest.raises(AccessDenied, match=r"may not create queue:orders\.us"):
        carol.send("queue:orders.us", msg())
    assert "queue:orders.us" not in broker.queues


def test_consume_and_browse_are_refused_and_reveal_nothing(broker: Broker) -> None:
    bob = login(broker, "bob")
    bob.session().send("queue:bob.inbox", msg("secret"))
    alice = login(broker, "alice")
    taker = Recorder()
    with pytest.raises(AccessDenied):
        alice.session().consumer(1, "queue:bob.inbox", taker)
    with pytest.raises(AccessDenied):
        alice.browse("queue:bob.inbox")
    with pytest.raises(AccessDenied):
        alice.browse(DEAD_LETTER)
    assert taker.entries == []
    assert [e.message.body for e in bob.browse("queue:bob.inbox")] == [b"secret"]


def test_a_login_name_queue_is_its_users_alone(broker: Broker) -> None:
    root = login(broker, "root")
    bobs = user_queue("bob")
    root.session().send(bobs, msg("for bob"))
    alice = login(broker, "alice")
    with pytest.raises(AccessDenied):
        alice.browse(bobs)
    with pytest.raises(AccessDenied):
        alice.session().consumer(1, bobs, Recorder())
    with pytest.raises(AccessDenied):
        alice.cursor_open(bobs, "steal")
    with pytest.raises(AccessDenied):
        root.browse(bobs)  # not even an admin
    got = Recorder()
    login(broker, "bob").session().consumer(1, bobs, got)
    assert got.bodies == [b"for bob"]


def test_a_temporary_queue_is_its_connections_alone_and_unguessable(broker: Broker) -> None:
    owner = login(broker, "bob")
    address = owner.temporary_queue()
    # 96 random bits and nothing else: not the connection's id (which a random name
    # may still contain by chance, so the name's whole shape is what is checked)
    assert re.fullmatch(r"queue:__tmp__\.[0-9a-f]{24}", address), address
    assert owner.temporary_queue() != address
    alice = login(broker, "alice")
    alice.session().send(address, msg("reply"))  # a reply-to: anyone may send
    with pytest.raises(AccessDenied):
        alice.browse(address)
    with pytest.raises(AccessDenied):
        alice.session().consumer(1, address, Recorder())
    with pytest.raises(AccessDenied):
        alice.cursor_open(address, "c")
    assert all(d["address"] != address for d in alice.stats()["destinations"])
    assert [e.message.body for e in owner.browse(address)] == [b"reply"]


def test_a_durable_subscription_is_its_users_and_one_connection_per_client_id(
    broker: Broker,
) -> None:
    alice = login(broker, "alice", client_id="app")
    s = alice.session()
    consumer = s.consumer(1, "topic:prices", Recorder(), subscription="s", durable=True)
    with pytest.raises(ClientIdInUse):
        login(broker, "bob", client_id="app")
    s.close_consumer(consumer)
    alice.close()
    mallory = login(broker, "bob", client_id="app")  # the client id is free again ...
    with pytest.raises(AccessDenied):  # ... but the subscription is alice's
        mallory.session().consumer(1, "topic:prices", Recorder(), subscription="s", durable=True)
    with pytest.raises(AccessDenied):
        mallory.unsubscribe("s", client_id="app")
    assert "durable:app.s" in broker.subscriptions
    mallory.close()
    login(broker, "root").unsubscribe("s", client_id="app")  # manage may
    assert "durable:app.s" not in broker.subscriptions


def test_the_owner_of_a_durable_subscription_survives_a_restart(broker: Broker) -> None:
    alice = login(broker, "alice", client_id="app")
    alice.session().consumer(1, "topic:prices", Recorder(), subscription="s", durable=True)
    again = restart(broker)
    assert again.subscriptions["durable:app.s"].owner == "alice"


def test_prepared_transactions_are_their_users(broker: Broker) -> None:
    alice = login(broker, "alice")
    tx = alice.session(AckMode.CLIENT, transacted=True)
    tx.send("queue:orders.eu", msg("staged"))
    tx.prepare("x1")
    assert alice.prepared() == ["x1"]
    bob = login(broker, "bob")
    assert bob.prepared() == []
    with pytest.raises(NotFound):
        bob.rollback_prepared("x1")
    assert bob.stats()["prepared"] == []
    root = login(broker, "root")
    assert root.prepared() == ["alice/x1"]
    root.rollback_prepared("alice/x1")
    assert alice.prepared() == []


def test_sink_batches_are_their_users(broker: Broker) -> None:
    alice = login(broker, "alice")
    tx = alice.session(AckMode.CLIENT, transacted=True)
    tx.send("queue:orders.eu", msg())
    tx.prepare("b1")
    assert alice.commit_batch("sink", 1, ("b1",), keep=True)
    bob = login(broker, "bob")
    btx = bob.session(AckMode.CLIENT, transacted=True)
    btx.send("queue:bob.x", msg())
    btx.prepare("b1")
    assert bob.commit_batch("sink", 1, ("b1",), keep=True)  # not alice's duplicate


def test_stat_shows_a_user_only_what_they_may_see(broker: Broker) -> None:
    login(broker, "bob").session().send("queue:bob.inbox", msg())
    alice = login(broker, "alice")
    alice.session().send("queue:orders.eu", msg())
    seen = {d["address"] for d in alice.stats()["destinations"]}
    assert seen == {"queue:orders.eu"}
    everything = {d["address"] for d in login(broker, "root").stats()["destinations"]}
    assert {"queue:orders.eu", "queue:bob.inbox", DEAD_LETTER} <= everything


def test_a_cursor_needs_consume_and_browse_and_its_lease_is_bounded(clock: FakeClock) -> None:
    broker = Broker(MemoryStore(), clock=clock, max_cursor_lease_ms=5_000)
    browse_only = Role("b", {Action.BROWSE: ("queue:q",), Action.SEND: ("queue:q",)})
    broker.access = Access(
        {"dan": User("dan", "pw", ("b",)), "root": User("root", "pw", ("admin",))},
        {"b": browse_only, "admin": ADMIN_ROLE},
    )
    root = connect(broker, "root", "pw")
    root.session().send("queue:q", msg())
    with pytest.raises(AccessDenied, match="may not consume"):
        connect(broker, "dan", "pw").cursor_open("queue:q", "c")
    root.cursor_open("queue:q", "c", lease_ms=24 * 24 * 3600 * 1000)  # 24 days asked
    root.close()
    clock.advance(4_999)
    assert broker.cursors.expire(clock()) == []
    clock.advance(1)
    assert broker.cursors.expire(clock()) == ["c"]  # released after the maximum


def test_the_listeners_act_as_their_configured_user(broker: Broker) -> None:
    smq = BrokerConnection(broker, broker.access.as_user("bob"), protocol="smq")
    with pytest.raises(AccessDenied):
        smq.session().send("queue:orders.eu", msg())
    with pytest.raises(AuthenticationFailed):
        broker.access.as_user("mallory")
    assert memory(broker).definitions.get("queue:orders.eu") is None


def test_a_refused_send_dooms_its_transaction(broker: Broker) -> None:
    alice = login(broker, "alice")
    tx = alice.session(AckMode.CLIENT, transacted=True)
    tx.send("queue:orders.eu", msg("first"))
    with pytest.raises(AccessDenied):
        tx.send("queue:bob.inbox", msg("refused"))
    tx.send("queue:orders.eu", msg("after"))
    with pytest.raises(TransactionError, match="rolled back: a send in this transaction"):
        tx.commit()  # a client that did not wait for the refusal must not lose it silently
    assert alice.browse("queue:orders.eu") == []
    tx.send("queue:orders.eu", msg("next"))
    tx.commit()  # the next transaction is a fresh one
    assert [e.message.body for e in alice.browse("queue:orders.eu")] == [b"next"]


def test_deleting_a_subscription_needs_delete_and_making_one_needs_create(
    clock: FakeClock,
) -> None:
    broker = make_broker(clock=clock)
    reader = Role("reader", {Action.CONSUME: ("topic:t",)})
    keeper = Role("keeper", {a: ("topic:t",) for a in (Action.CONSUME, Action.CREATE)})
    broker.access = Access(
        {"r": User("r", "pw", ("reader",)), "k": User("k", "pw", ("keeper",))},
        {"reader": reader, "keeper": keeper},
    )
    broker.destination("topic:t")
    r = connect(broker, "r", "pw", client_id="r")
    with pytest.raises(AccessDenied, match="may not create topic:t"):
        r.session().consumer(1, "topic:t", Recorder(), subscription="s", durable=True)
    r.session().consumer(1, "topic:t", Recorder())  # a plain subscription needs consume only
    k = connect(broker, "k", "pw", client_id="k")
    session = k.session()
    session.close_consumer(
        session.consumer(1, "topic:t", Recorder(), subscription="s", durable=True)
    )
    with pytest.raises(AccessDenied, match="may not delete topic:t"):
        k.unsubscribe("s")
    assert "durable:k.s" in broker.subscriptions
