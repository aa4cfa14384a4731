"""Temporary, login-name and callback queues across in-memory nodes: each keeps its
meaning (chute.core.rules.cluster_owned)."""

from __future__ import annotations

import pytest

from chute.core.model.consumer import AckMode, BrokerConsumer
from chute.core.operations.connection import BrokerConnection
from chute.core.rules.access import Action, Principal
from chute.errors import AccessDenied, ChuteError, NotFound
from chute.message import Message

from ..helpers import Recorder
from .mesh import Mesh


def _reply(mesh: Mesh, node: str, address: str, body: str) -> None:
    mesh[node].send(address, body)
    mesh.pump()


def test_a_reply_sent_on_another_node_reaches_the_temporary_queue_once() -> None:
    mesh = Mesh("a", "b", "c")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    consumer, recorder = mesh["a"].consume(temp)
    mesh.pump()
    _reply(mesh, "b", temp, "from b")
    _reply(mesh, "c", temp, "from c")
    assert sorted(mesh["a"].ack_all(consumer, recorder)) == ["from b", "from c"]
    for node in ("b", "c"):  # the stand-ins hold nothing once the owner confirmed
        assert mesh[node].broker.queues[temp].held == 0
    assert mesh.count("handover") == 2


def test_a_reply_before_the_requester_consumes_waits_on_the_owner() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    _reply(mesh, "b", temp, "early")
    assert mesh["a"].broker.queues[temp].held == 1
    consumer, recorder = mesh["a"].consume(temp)
    assert mesh["a"].ack_all(consumer, recorder) == ["early"]


def test_only_the_owner_consumes_a_temporary_queue_on_any_node() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    session = mesh["b"].session
    with pytest.raises(AccessDenied):
        session.consumer(99, temp, Recorder(), prefetch=10)
    with pytest.raises(AccessDenied):
        mesh["b"].connection.authorize_use(Action.CONSUME, temp)


def test_the_temporary_queue_is_gone_everywhere_with_its_connection() -> None:
    mesh = Mesh("a", "b")
    owner = BrokerConnection(mesh["a"].broker)
    temp = owner.temporary_queue()
    mesh.pump()
    assert temp in mesh["b"].broker.queues
    owner.close()
    mesh.pump()
    assert temp not in mesh["b"].broker.queues
    with pytest.raises(NotFound):  # the answer a send gets on one node
        mesh["b"].send(temp, "late")
    with pytest.raises(NotFound):
        mesh["a"].send(temp, "late")


def test_a_hand_over_reaching_a_closed_temporary_queue_is_dropped() -> None:
    mesh = Mesh("a", "b")
    owner = BrokerConnection(mesh["a"].broker)
    temp = owner.temporary_queue()
    mesh.pump()
    mesh["b"].send(temp, "in flight")  # on the wire, not yet at a
    owner.close()
    mesh.pump()
    assert temp not in mesh["a"].broker.queues
    assert temp not in mesh["b"].broker.queues
    assert mesh.count("refuse") == 1
    assert not mesh["b"].cluster.peers["a"].in_doubt


def test_a_node_that_leaves_takes_its_temporary_queues_from_the_others() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    mesh.cut("a", "b")
    mesh["b"].send(temp, "waits for the link")
    assert mesh["b"].broker.queues[temp].held == 1
    mesh["b"].cluster.node_gone("a")
    assert temp not in mesh["b"].broker.queues


def test_a_restarted_owner_announces_no_temporary_queue() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    mesh.crash("a")
    assert temp not in mesh["b"].broker.queues


def test_a_temporary_queue_made_while_a_link_is_down_is_announced_when_it_is_up() -> None:
    mesh = Mesh("a", "b")
    mesh.cut("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.connect("a", "b")
    consumer, recorder = mesh["a"].consume(temp)
    _reply(mesh, "b", temp, "after the link")
    assert mesh["a"].ack_all(consumer, recorder) == ["after the link"]


def _user(mesh: Mesh, node: str, login: str) -> BrokerConnection:
    return BrokerConnection(mesh[node].broker, Principal(login))


def test_a_login_name_queue_consumed_on_one_node_gets_what_another_sends() -> None:
    mesh = Mesh("a", "b")
    bob = _user(mesh, "a", "bob")
    recorder = Recorder()
    session = bob.session(AckMode.AUTO)
    session.consumer(1, "queue:__user__.bob", recorder, prefetch=10)
    mesh.pump()
    for i in range(3):
        mesh["b"].session.send("queue:__user__.bob", Message.create(f"m{i}".encode()))
    mesh.pump()
    assert [e.message.body for e in recorder.take()] == [b"m0", b"m1", b"m2"]
    assert mesh["b"].broker.queues["queue:__user__.bob"].held == 0


def test_a_login_name_queue_keeps_its_messages_until_its_user_consumes_somewhere() -> None:
    mesh = Mesh("a", "b")
    for i in range(2):
        mesh["b"].session.send("queue:__user__.bob", Message.create(f"m{i}".encode()))
    mesh.pump()
    assert mesh.count("handover") == 0
    bob = _user(mesh, "a", "bob")
    recorder = Recorder()
    bob.session(AckMode.AUTO).consumer(1, "queue:__user__.bob", recorder, prefetch=10)
    mesh.pump()
    assert [e.message.body for e in recorder.take()] == [b"m0", b"m1"]
    bob.close()
    mesh.pump()
    mesh["a"].session.send("queue:__user__.bob", Message.create(b"later"))
    mesh.pump()
    assert mesh["a"].broker.queues["queue:__user__.bob"].held == 1  # stays: no session
    assert mesh.count("handover") == 2


def test_only_its_user_consumes_a_login_name_queue_on_any_node() -> None:
    mesh = Mesh("a", "b")
    _user(mesh, "a", "bob").session(AckMode.AUTO).consumer(
        1, "queue:__user__.bob", Recorder(), prefetch=10
    )
    mesh.pump()
    eve = _user(mesh, "b", "eve").session(AckMode.AUTO)
    with pytest.raises(AccessDenied):
        eve.consumer(1, "queue:__user__.bob", Recorder(), prefetch=10)


def test_a_callback_forwards_what_another_node_publishes() -> None:
    mesh = Mesh("a", "b")
    mesh["a"].connection.callback("topic:news", "cb", "queue:inbox")
    mesh.pump()
    consumer, recorder = mesh["b"].consume("queue:inbox")
    mesh.pump()
    mesh["b"].send("topic:news", "hello")
    mesh.pump()
    assert mesh["b"].ack_all(consumer, recorder) == ["hello"]


def test_a_callback_may_forward_to_a_temporary_queue_of_another_node() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    mesh.pump()
    mesh["b"].connection.callback("topic:news", "cb", temp)
    consumer, recorder = mesh["a"].consume(temp)
    mesh.pump()
    mesh["b"].send("topic:news", "to the requester")
    mesh.pump()
    assert mesh["a"].ack_all(consumer, recorder) == ["to the requester"]


def test_a_reply_waiting_for_a_cut_link_goes_once_it_is_up() -> None:
    mesh = Mesh("a", "b")
    temp = mesh["a"].connection.temporary_queue()
    consumer, recorder = mesh["a"].consume(temp)
    mesh.pump()
    mesh.cut("a", "b")
    mesh["b"].send(temp, "waited")
    mesh.connect("a", "b")
    assert mesh["a"].ack_all(consumer, recorder) == ["waited"]
    assert mesh["b"].broker.queues[temp].held == 0


class _Told(Recorder):
    """A receiver the broker can tell its consumer was closed."""

    def cancelled(self, consumer: BrokerConsumer, error: ChuteError) -> None:
        pass


def test_a_queue_deleted_with_its_consumers_is_wanted_no_more() -> None:
    mesh = Mesh("a", "b")
    mesh["a"].session.consumer(1, "queue:work", _Told(), prefetch=10)
    mesh.pump()
    mesh["a"].connection.delete("queue:work")
    mesh.pump()
    mesh["b"].send("queue:work", "stays")
    mesh.pump()
    assert mesh.count("handover") == 0
    assert mesh["b"].broker.queues["queue:work"].held == 1
