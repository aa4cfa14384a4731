"""ClientProtocol, the pure client state machine, driven by packets fed directly."""

from __future__ import annotations

import time

import pytest

from chute.client import requests
from chute.client.outgoing import SendOptions
from chute.client.protocol import ClientProtocol
from chute.client.received import Received
from chute.client.sessions import ConsumerOptions
from chute.content import encode_content
from chute.errors import (
    AuthenticationFailed,
    ConnectError,
    ConsumerError,
    DestinationDeleted,
    DestinationFull,
    InvalidAddress,
    InvalidMessage,
    LocalProtocolError,
    NotFound,
    TransactionError,
    WrongProtocol,
)
from chute.message import BodyKind, Message
from chute.protocol import packets as p
from chute.protocol.codec import PacketCodec
from chute.protocol.splice import encode_deliver
from chute.protocol.wire import encode_packet


class Peer:
    """The broker's side of the conversation: decodes what the client sent."""

    def __init__(self, proto: ClientProtocol) -> None:
        self.proto = proto
        self.codec = PacketCodec()

    def sent(self) -> list[tuple[p.Header, p.Packet]]:
        data = self.proto.data_to_send()
        if data:
            self.codec.receive_data(data)
        return self.codec.next_packets()

    def packets(self) -> list[p.Packet]:
        return [x for _, x in self.sent()]


def connected() -> tuple[ClientProtocol, Peer]:
    proto = ClientProtocol()
    peer = Peer(proto)
    request = proto.connect("client-1", "alice", "pw", 0)
    corr = proto.start(request)
    [(header, connect)] = peer.sent()
    assert connect == p.Connect(1, p.PROTOCOL_VERSION, "client-1", "alice", "pw", 0)
    assert header.correlation_id == corr
    connected = p.Connected(p.PROTOCOL_VERSION, "c-1", 0, 1 << 20)
    progress = proto.receive_data(encode_packet(connected, corr))
    assert progress.completed == [corr]
    result = proto.result(corr)
    assert result is not None
    request.parse(result)
    return proto, peer


def deliver(consumer_id: int, seq: int, body: bytes = b"x") -> bytes:
    content = encode_content(Message(body, id=f"m{seq}", persistent=False))
    return encode_deliver(consumer_id, seq, 0, False, 1000, 0, content)


def test_handshake_sets_version_and_connection() -> None:
    proto, _ = connected()
    assert proto.connected is not None
    assert proto.connected.connection_id == "c-1"
    assert proto.codec.version == p.PROTOCOL_VERSION


def test_a_held_notice_is_kept_until_the_answer_and_is_no_answer() -> None:
    proto, _ = connected()
    corr = proto.start(requests.purge("queue:q"))
    notice = p.Held("the broker's queues hold 2 MiB in memory", 30_000)
    progress = proto.receive_data(encode_packet(notice, corr))
    assert (progress.held, progress.completed) == ([corr], [])
    assert proto.result(corr) is None  # still waiting
    first = proto.held(corr)
    assert first is not None
    assert first[1] == notice
    proto.receive_data(encode_packet(notice, corr))  # held again after a wake
    again = proto.held(corr)
    assert again is not None
    assert again[0] != first[0]  # a new notice: the waiter counts from it
    progress = proto.receive_data(encode_packet(p.Ok(), corr))
    assert progress.completed == [corr]
    assert proto.held(corr) is None
    assert proto.receive_data(encode_packet(notice, corr)).held == []  # nobody waits


def test_connect_refused_is_a_connect_error() -> None:
    proto = ClientProtocol()
    corr = proto.start(proto.connect())
    proto.receive_data(encode_packet(p.Error("unsupported-version", "too new"), corr))
    with pytest.raises(ConnectError, match="too new"):
        proto.result(corr)


def test_authentication_failure_keeps_its_code() -> None:
    proto = ClientProtocol()
    corr = proto.start(proto.connect(login="x"))
    proto.receive_data(encode_packet(p.Error("authentication-failed", "bad login"), corr))
    with pytest.raises(AuthenticationFailed, match="bad login"):
        proto.result(corr)


def test_session_and_consumer_ids_never_collide() -> None:
    proto, peer = connected()
    s1 = proto.open_session()
    c1, _ = proto.open_consumer(s1, "queue:a")
    s2 = proto.open_session("client", transacted=True)
    c2, _ = proto.open_consumer(s2, "b")
    assert len({s1, s2, c1, c2}) == 4
    sent = peer.sent()
    assert sent[0][1] == p.SessionOpen(s1, p.SessionAckMode.AUTO, False)
    assert sent[0][0].correlation_id == 0
    assert sent[1][1] == p.ConsumerOpen(s1, c1, "queue:a")
    assert sent[1][0].correlation_id != 0
    assert sent[2][1] == p.SessionOpen(s2, p.SessionAckMode.CLIENT, True)
    assert sent[3][1] == p.ConsumerOpen(s2, c2, "queue:b")  # canonical address


def test_bad_ack_mode() -> None:
    proto, _ = connected()
    with pytest.raises(ValueError, match="bogus"):
        proto.open_session("bogus")


def test_non_persistent_send_is_one_way_persistent_is_a_request() -> None:
    proto, peer = connected()
    sid = proto.open_session()
    assert proto.send(sid, "queue:a", b"x", SendOptions(persistent=False)) == 0
    corr = proto.send(sid, "queue:a", "text", SendOptions(priority=9, ttl=500, properties={"k": 1}))
    assert corr != 0
    _, (h1, s1), (h2, s2) = peer.sent()
    assert isinstance(s1, p.Send)
    assert isinstance(s2, p.Send)
    assert h1.correlation_id == 0
    assert h2.correlation_id == corr
    assert (s1.session_id, s1.address, s1.message.body, s1.message.persistent) == (
        sid,
        "queue:a",
        b"x",
        False,
    )
    assert s2.message.kind is BodyKind.TEXT
    assert s2.message.priority == 9
    assert s2.ttl_ms == 500
    assert s2.message.properties == {"k": 1}
    assert s2.message.id
    assert proto.result(corr) is None
    proto.receive_data(encode_packet(p.Ok(), corr))
    assert proto.result(corr) == p.Ok()


def test_transacted_sends_are_one_way() -> None:
    proto, _ = connected()
    sid = proto.open_session(transacted=True)
    assert proto.send(sid, "q", b"x", SendOptions(persistent=True)) == 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"priority": 10}, InvalidMessage),
        ({"priority": True}, InvalidMessage),
        ({"properties": {"x": object()}}, InvalidMessage),
        ({"id": ""}, InvalidMessage),
        ({"body": 5}, InvalidMessage),
        ({"address": "queue:../x"}, InvalidAddress),
        ({"ttl": -1}, ValueError),
    ],
)
def test_send_validates(kwargs: dict[str, object], error: type[Exception]) -> None:
    proto, _ = connected()
    sid = proto.open_session()
    args: dict[str, object] = {"address": "q", "body": b"x"} | kwargs
    address, body = args.pop("address"), args.pop("body")
    with pytest.raises(error):
        proto.send(sid, address, body, SendOptions(**args))  # type: ignore[arg-type]


def test_error_response_is_rebuilt_by_code() -> None:
    proto, _ = connected()
    sid = proto.open_session()
    corr = proto.send(sid, "q", b"x")
    proto.receive_data(encode_packet(p.Error("destination-full", "queue:q is full"), corr))
    with pytest.raises(DestinationFull, match="is full"):
        proto.result(corr)


def test_one_way_error_is_deferred_to_the_next_call_on_the_session() -> None:
    proto, _ = connected()
    sid = proto.open_session()
    other = proto.open_session()
    proto.send(sid, "q", b"x", SendOptions(persistent=False))
    proto.receive_data(encode_packet(p.Error("destination-full", "full"), target_id=sid))
    proto.send(other, "q", b"x", SendOptions(persistent=False))  # another session is unaffected
    with pytest.raises(DestinationFull):
        proto.send(sid, "q", b"y", SendOptions(persistent=False))
    proto.send(sid, "q", b"z", SendOptions(persistent=False))  # raised once


def test_connection_level_error_fails_everything() -> None:
    proto, _ = connected()
    sid = proto.open_session()
    cid, open_corr = proto.open_consumer(sid, "q")
    corr = proto.start(requests.stat_fetch())
    progress = proto.receive_data(encode_packet(p.Error("shutting-down", "bye")))
    assert progress.failed
    assert set(progress.completed) == {open_corr, corr}
    assert cid in progress.consumers
    for call in (
        lambda: proto.result(corr),
        lambda: proto.send(sid, "q", b""),
        lambda: proto.sessions.take(cid),
        lambda: proto.start(requests.stat_fetch()),
    ):
        with pytest.raises(ConnectError, match="bye"):
            call()


def test_eof_fails_everything() -> None:
    proto, _ = connected()
    corr = proto.start(requests.stat_fetch())
    progress = proto.receive_data(b"")
    assert progress.failed
    assert progress.completed == [corr]
    with pytest.raises(ConnectError, match="lost"):
        proto.result(corr)


def test_garbage_from_the_broker_fails_the_connection_and_reports_it() -> None:
    proto, peer = connected()
    progress = proto.receive_data(b"\x00\x00\x00\x0e\x01\xfa" + bytes(12))
    assert progress.failed
    assert peer.packets() == [p.Error("unknown-packet-type", "unknown packet type 250")]
    with pytest.raises(ConnectError, match="unknown-packet-type"):
        proto.start(requests.stat_fetch())


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (b"ERROR\nmessage:not a STOMP frame\n\n\x00", "'ERROR'"),
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "'HTTP/1.1 400 Bad Request'"),
    ],
)
def test_a_server_answering_in_another_protocol_is_named_as_such(answer: bytes, shown: str) -> None:
    proto = ClientProtocol()
    corr = proto.start(proto.connect())
    assert proto.receive_data(answer).failed
    with pytest.raises(
        WrongProtocol, match=f"does not speak chute's native protocol: it answered {shown}"
    ):
        proto.result(corr)


def test_garbage_after_the_handshake_is_no_other_protocol() -> None:
    proto, _ = connected()
    assert proto.receive_data(b"HTTP/1.1 200 OK\r\n\r\n").failed
    with pytest.raises(ConnectError, match="broke the protocol") as caught:
        proto.start(requests.stat_fetch())
    assert not isinstance(caught.value, WrongProtocol)


def test_broker_disconnect_fails_the_connection() -> None:
    proto, _ = connected()
    assert proto.receive_data(encode_packet(p.Disconnect())).failed
    with pytest.raises(ConnectError, match="closed"):
        proto.start(requests.stat_fetch())


def test_ping_is_answered_with_pong_of_the_same_correlation() -> None:
    proto, peer = connected()
    proto.receive_data(encode_packet(p.Ping(), 77))
    [(header, pong)] = peer.sent()
    assert pong == p.Pong()
    assert header.correlation_id == 77


def test_late_answer_after_forget_is_dropped() -> None:
    proto, _ = connected()
    corr = proto.start(requests.stat_fetch())
    proto.forget(corr)
    progress = proto.receive_data(encode_packet(p.StatPage("{}"), corr))
    assert progress.completed == []
    assert proto.result(corr) is None


def open_consumer(
    ack: str = "auto", prefetch: int = 4, transacted: bool = False
) -> tuple[ClientProtocol, Peer, int, int]:
    proto, peer = connected()
    sid = proto.open_session(ack, transacted)
    cid, corr = proto.open_consumer(sid, "q", ConsumerOptions(prefetch=prefetch))
    proto.receive_data(encode_packet(p.Ok(), corr))
    peer.sent()
    return proto, peer, sid, cid


def test_auto_mode_acks_and_returns_credit_every_half_window() -> None:
    proto, peer, _, cid = open_consumer("auto", prefetch=4)
    progress = proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2, 3, 4)))
    assert progress.consumers == {cid}
    first = proto.sessions.take(cid)
    assert first is not None
    assert first.seq == 1
    assert first.message.id == "m1"
    assert peer.packets() == []
    assert proto.sessions.take(cid) is not None
    assert peer.packets() == [p.Ack(cid, 2, cumulative=True, credit=2)]
    assert proto.sessions.take(cid) is not None
    proto.sessions.before_wait(cid)  # buffer not empty: nothing owed yet
    assert peer.packets() == []
    assert proto.sessions.take(cid) is not None
    assert peer.packets() == [p.Ack(cid, 4, cumulative=True, credit=2)]
    assert proto.sessions.take(cid) is None


def test_auto_mode_acks_in_delivery_order_whatever_the_seqs() -> None:
    # Priority reorders deliveries: seq 5 (priority 9) before seq 1. Each take must
    # still ack (cumulative means "in delivery order") and return its credit, or the
    # consumer's window never refills.
    proto, peer, _, cid = open_consumer("auto", prefetch=2)
    proto.receive_data(deliver(cid, 5) + deliver(cid, 1))
    assert proto.sessions.take(cid) is not None
    assert peer.packets() == [p.Ack(cid, 5, cumulative=True, credit=1)]
    assert proto.sessions.take(cid) is not None
    assert peer.packets() == [p.Ack(cid, 1, cumulative=True, credit=1)]


def test_before_wait_returns_what_is_owed() -> None:
    proto, peer, _, cid = open_consumer("auto", prefetch=10)
    proto.receive_data(deliver(cid, 1))
    assert proto.sessions.take(cid) is not None
    assert peer.packets() == []
    proto.sessions.before_wait(cid)
    assert peer.packets() == [p.Ack(cid, 1, cumulative=True, credit=1)]
    proto.sessions.before_wait(cid)
    assert peer.packets() == []


def test_client_mode_ack_is_cumulative_and_carries_credit() -> None:
    proto, peer, _, cid = open_consumer("client", prefetch=10)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2, 3)))
    for _ in range(3):
        assert proto.sessions.take(cid) is not None
    assert peer.packets() == []
    proto.sessions.ack(cid, 2)
    assert peer.packets() == [p.Ack(cid, 2, cumulative=True, credit=3)]
    proto.sessions.ack(cid, 3)
    assert peer.packets() == [p.Ack(cid, 3, cumulative=True, credit=0)]


def test_client_mode_returns_credit_without_acks_so_it_never_stalls() -> None:
    proto, peer, _, cid = open_consumer("client", prefetch=4)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2)))
    proto.sessions.take(cid)
    proto.sessions.take(cid)
    assert peer.packets() == [p.Credit(cid, 2)]


def test_individual_mode_and_nack() -> None:
    proto, peer, _, cid = open_consumer("individual", prefetch=10)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2)))
    proto.sessions.take(cid)
    proto.sessions.take(cid)
    proto.sessions.ack(cid, 2)
    proto.sessions.nack(cid, 1, requeue=False)
    assert peer.packets() == [p.Ack(cid, 2, False, 2), p.Nack(cid, 1, False)]


def test_transacted_commit_acks_what_was_taken_first() -> None:
    proto, peer, sid, cid = open_consumer("auto", prefetch=10, transacted=True)
    proto.receive_data(deliver(cid, 1))
    proto.sessions.take(cid)
    proto.sessions.ack(cid, 1)  # a no-op: commit acks
    corr = proto.commit(sid)
    sent = peer.sent()
    assert [x for _, x in sent] == [p.Ack(cid, 1, True, 1), p.Commit(sid)]
    assert sent[1][0].correlation_id == corr


def test_commit_outside_a_transaction() -> None:
    proto, _ = connected()
    sid = proto.open_session()
    with pytest.raises(TransactionError):
        proto.commit(sid)


def test_consumer_error_and_unknown_consumer_deliveries() -> None:
    proto, _, _, cid = open_consumer()
    assert proto.receive_data(deliver(999, 1)).consumers == set()
    proto.receive_data(encode_packet(p.Error("not-found", "queue deleted"), target_id=cid))
    with pytest.raises(NotFound):
        proto.sessions.take(cid)
    assert proto.sessions.take(cid) is None


def test_a_deleted_destination_closes_its_consumer_once_raised() -> None:
    proto, peer, _, cid = open_consumer("auto", prefetch=10)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2)))
    error = p.Error("destination-deleted", "queue:q was deleted by bob: this consumer is closed")
    assert proto.receive_data(encode_packet(error, target_id=cid)).consumers == {cid}
    assert not proto.sessions.is_open(cid)
    with pytest.raises(DestinationDeleted, match="deleted by bob"):
        proto.sessions.take(cid)  # what it buffered went with the queue
    with pytest.raises(ConsumerError, match="closed"):
        proto.sessions.take(cid)
    assert proto.close_consumer(cid) is None
    assert peer.packets() == []  # nothing owed: the broker forgot the consumer


def test_close_consumer_returns_credit_then_closes() -> None:
    proto, peer, _, cid = open_consumer("auto", prefetch=10)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2)))
    proto.sessions.take(cid)
    corr = proto.close_consumer(cid)
    assert corr
    assert peer.packets() == [p.Ack(cid, 1, True, 1), p.ConsumerClose(cid)]
    with pytest.raises(ConsumerError):
        proto.sessions.take(cid)
    with pytest.raises(ConsumerError):
        proto.sessions.ack(cid, 1)
    assert proto.close_consumer(cid) is None
    assert proto.receive_data(deliver(cid, 3)).consumers == set()


def test_close_session_closes_its_consumers() -> None:
    proto, peer, sid, cid = open_consumer()
    corr = proto.close_session(sid)
    assert corr
    assert peer.packets() == [p.SessionClose(sid)]
    with pytest.raises(ConsumerError):
        proto.sessions.take(cid)
    with pytest.raises(ConsumerError):
        proto.send(sid, "q", b"")
    assert proto.close_session(sid) is None


def test_consumer_arguments_are_checked() -> None:
    proto, _ = connected()
    sid = proto.open_session()
    with pytest.raises(ValueError, match="prefetch"):
        proto.open_consumer(sid, "q", ConsumerOptions(prefetch=0))
    with pytest.raises(ValueError, match="durable"):
        proto.open_consumer(sid, "topic:t", ConsumerOptions(durable=True))


def test_management_requests_and_results() -> None:
    proto, peer = connected()
    corrs = [
        proto.start(requests.browse_fetch("orders", "a = 1", 3, 9, 5)),
        proto.start(requests.stat_fetch("queue:o*", "queue:a", 10)),
        proto.start(requests.temporary_queue()),
        proto.start(requests.unsubscribe("sub")),
        proto.start(requests.callback("topic:t", "cb", "out")),
        proto.start(requests.delete("t", force=True)),
        proto.start(requests.purge("topic:t")),
        proto.disconnect(),
    ]
    sent = peer.sent()
    assert [x for _, x in sent] == [
        p.BrowseFetch("queue:orders", "a = 1", 3, 9, 5),
        p.StatFetch("queue:o*", "queue:a", 10),
        p.TempQueue(),
        p.Unsubscribe("sub"),
        p.CallbackCreate("topic:t", "cb", "queue:out"),
        p.DestinationDelete("queue:t", force=True),
        p.DestinationPurge("topic:t"),
        p.Disconnect(),
    ]
    assert [h.correlation_id for h, _ in sent] == corrs
    m = Message(b"b", id="i", timestamp=5)
    page = p.BrowsePage(1, 2, True, ((1, m),))
    assert requests.browse_fetch("orders").parse(page) == page
    assert requests.stat_fetch().parse(p.StatPage('{"a": 1}', "queue:x")) == ({"a": 1}, "queue:x")
    assert requests.temporary_queue().parse(p.TempQueueCreated("queue:t")) == "queue:t"
    assert requests.unsubscribe("sub").parse(p.Ok()) is None
    assert requests.delete("q").parse(p.Ok("12")) == 12
    assert requests.purge("q").parse(p.Ok("0")) == 0
    with pytest.raises(LocalProtocolError, match="a count was expected"):
        requests.purge("q").parse(p.Ok())
    with pytest.raises(Exception, match="expected"):
        requests.stat_fetch().parse(p.Ok())


# -- the hot paths: plain sends, generated ids, deliveries as Received -------------------


def test_plain_and_rich_sends_encode_the_same_fields() -> None:
    proto, peer = connected()
    sid = proto.open_session()
    proto.send(sid, "queue:a", b"plain", SendOptions(priority=0, ttl=7, persistent=False))
    proto.send(sid, "queue:a", b"rich", SendOptions(priority=0, ttl=7, persistent=False, type="t"))
    corr = proto.send(sid, "queue:a", b"persistent", SendOptions(priority=9))
    _, (_, plain), (_, rich), (header, persistent) = peer.sent()
    assert isinstance(plain, p.Send)
    assert isinstance(rich, p.Send)
    assert isinstance(persistent, p.Send)
    for packet in (plain, rich):
        assert (packet.session_id, packet.address, packet.ttl_ms) == (sid, "queue:a", 7)
        assert (packet.message.priority, packet.message.persistent) == (0, False)
        assert packet.message.kind is BodyKind.BYTES
    assert plain.message.body == b"plain"
    assert plain.message.properties == {}
    assert (plain.message.correlation_id, plain.message.reply_to, plain.message.type) == (
        None,
        None,
        None,
    )
    assert (persistent.message.priority, persistent.message.persistent) == (9, True)
    assert header.correlation_id == corr


def test_generated_ids_are_32_hex_time_ordered_and_unique() -> None:
    proto, peer = connected()
    other, other_peer = connected()
    sid = proto.open_session()
    other_sid = other.open_session()
    before = time.time_ns() // 1_000_000
    for _ in range(300):
        proto.send(sid, "q", b"x", SendOptions(persistent=False))
        other.send(other_sid, "q", b"x", SendOptions(persistent=False))
    general = SendOptions(persistent=False, properties={"k": 1})
    proto.send(sid, "q", "text", general)  # the general path
    after = time.time_ns() // 1_000_000
    ids = [x.message.id for x in peer.packets() if isinstance(x, p.Send)]
    ids += [x.message.id for x in other_peer.packets() if isinstance(x, p.Send)]
    assert len(ids) == len(set(ids)) == 601
    for message_id in ids:
        assert len(message_id) == 32
        assert int(message_id, 16) >= 0
        assert message_id == message_id.lower()
        assert before <= int(message_id[:12], 16) <= after
    mine = ids[:301]
    assert mine == sorted(mine)  # one connection: increasing


def test_send_values_the_wire_cannot_carry_are_invalid_messages() -> None:
    proto, peer = connected()
    sid = proto.open_session()
    peer.sent()
    with pytest.raises(InvalidMessage):
        proto.send(sid, "q", b"x", SendOptions(ttl=1 << 64, persistent=False))
    with pytest.raises(InvalidMessage):
        proto.send(sid, "q", b"x", SendOptions(ttl=1 << 64, type="t"))
    with pytest.raises(InvalidMessage):
        proto.send(sid, "q", b"x", SendOptions(kind="bogus"))  # type: ignore[arg-type]
    assert proto.outbox_size == 0
    assert proto.in_flight == 0  # no request left waiting for an answer


def test_send_many_values_the_wire_cannot_carry_leave_nothing_queued() -> None:
    proto, peer = connected()
    sid = proto.open_session()
    tx = proto.open_session(transacted=True)
    peer.sent()
    blocks = [encode_content(Message(b"x", id="m1"))]
    framed = b"".join(len(b).to_bytes(4, "big") + b for b in blocks)
    for session in (sid, tx):
        with pytest.raises(InvalidMessage, match="messages cannot be encoded"):
            proto.send_many(session, "q", blocks, ttl=1 << 64)
        with pytest.raises(InvalidMessage, match="messages cannot be encoded"):
            proto.send_many_framed(session, "q", 1, framed, ttl=1 << 64)
        with pytest.raises(InvalidMessage, match="1 to"):
            proto.send_many_framed(session, "q", 0, framed)
        with pytest.raises(ValueError, match="ttl"):
            proto.send_many(session, "q", blocks, ttl=-1)
        with pytest.raises(ValueError, match="ttl"):
            proto.send_many_framed(session, "q", 1, framed, ttl=-1)
    assert proto.outbox_size == 0
    assert proto.in_flight == 0  # no request left waiting for an answer
    corr = proto.send_many_framed(sid, "q", 1, framed)
    assert corr != 0
    assert proto.send_many(tx, "q", blocks) == 0  # transacted: one-way
    assert proto.last_packet == proto.data_to_send()[-len(proto.last_packet) :]


def test_take_hands_out_received_messages_that_ack_through_their_owner() -> None:
    proto, peer, _, cid = open_consumer("individual", prefetch=10)
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (1, 2)))
    first = proto.sessions.take(cid)
    assert isinstance(first, Received)
    assert (first.seq, first.body, first.id) == (1, b"x", "m1")
    first.ack()  # unbound: straight to the protocol
    assert peer.packets() == [p.Ack(cid, 1, cumulative=False, credit=1)]

    acked: list[tuple[str, int]] = []

    class Owner:
        def ack(self, seq: int) -> None:
            acked.append(("ack", seq))

        def nack(self, seq: int, requeue: bool) -> None:
            acked.append(("nack", seq))

    proto.bind(cid, Owner())  # from now on: what was received before keeps its owner
    proto.receive_data(b"".join(deliver(cid, seq) for seq in (3, 4)))
    for seq in (2, 3, 4):
        received = proto.sessions.take(cid)
        assert received is not None
        assert received.seq == seq
        received.nack() if seq == 4 else received.ack()
    assert acked == [("ack", 3), ("nack", 4)]
    assert peer.packets() == [p.Ack(cid, 2, cumulative=False, credit=1)]


def test_a_session_names_its_producer_to_a_broker_of_version_4_only() -> None:
    proto, peer = connected()
    proto.open_session("auto", False, "producer-1")
    assert peer.packets() == [p.SessionOpen(1, p.SessionAckMode.AUTO, False, "producer-1")]
    proto.codec.version = p.PRODUCER_VERSION - 1
    proto.open_session("auto", False, "producer-2")
    assert peer.packets() == [p.SessionOpen(2, p.SessionAckMode.AUTO, False)]


def test_a_send_is_resent_as_it_was_as_a_new_request_of_another_session() -> None:
    proto, peer = connected()
    first = proto.open_session()
    corr = proto.send(first, "queue:q", b"body", SendOptions(id="m-1"))
    packet = proto.last_packet
    [(header, sent)] = peer.sent()[1:]
    assert (header.correlation_id, header.target_id) == (corr, first)
    other, again = connected()
    second = other.open_session()
    second = other.open_session()  # another session id on the other connection
    corr2 = other.resend(second, packet)
    [(header2, resent)] = again.sent()[2:]
    assert (header2.correlation_id, header2.target_id) == (corr2, second)
    assert isinstance(resent, p.Send)
    assert isinstance(sent, p.Send)
    assert resent.message.id == sent.message.id == "m-1"
    assert resent.message.body == b"body"
