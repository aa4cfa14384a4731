"""Map, stream and object bodies DropboxMQ cannot read are refused at the dropbox, not
written: DropboxMQ reads such a body with Java's ObjectInputStream, and its receive()
throws on one that is not Java-serialized (the file goes to error/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import chute
from chute.client.received import Received
from chute.dropbox.transcoder import decode_filename
from chute.errors import InvalidMessage
from chute.message import BodyKind
from tests.integration.dropbox_bridge import WAIT, count, export_mount, serve, wait_until

# what a Java ObjectOutputStream writes first: magic, version, TC_OBJECT
SERIALIZED = b"\xac\xed\x00\x05sr\x00\x11java.util.HashMap\x05\x07\xda\xc1\xc3\x16`\xd1"


def test_an_export_dead_letters_bodies_dropboxmq_cannot_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    server = serve(tmp_path, export_mount(out, "queue:results"))
    unreadable = [
        (BodyKind.MAP, b'{"a": 1}'),
        (BodyKind.STREAM, b""),
        (BodyKind.OBJECT, b"\x80\x04\x95pickled"),
    ]
    readable = [(BodyKind.MAP, SERIALIZED), (BodyKind.BYTES, b"raw"), (BodyKind.TEXT, b"text")]
    try:
        with chute.connect(server.url) as conn, conn.session(ack="client") as session:
            for kind, body in unreadable + readable:
                session.send("results", body, kind=kind, type=kind.value)
            dead = session.consumer("queue:__sys__deadLetter")
            got: list[Received] = []
            while len(got) < len(unreadable) and (m := dead.receive(timeout=WAIT)) is not None:
                got.append(m)
                m.ack()
        target = out / "results" / "incoming" / "target"
        wait_until(lambda: target.is_dir() and count(target) == len(readable), "readable ones")
        assert {(m.kind, m.body) for m in got} == set(unreadable)  # nothing lost
        written = {decode_filename(n).type: (target / n).read_bytes() for n in os.listdir(target)}
        assert written == {"map": SERIALIZED, "bytes": b"raw", "text": b"text"}
        assert count(out / "results" / "incoming" / "working") == 0
    finally:
        server.stop()
    assert server.output.count("must be Java-serialized") == 1  # once, not per message
    assert "starts with 7B 22 61 22" in server.output  # says what it found


def test_a_serverless_send_refuses_a_body_dropboxmq_cannot_read(tmp_path: Path) -> None:
    with chute.connect(f"dropbox://{tmp_path}?client_id=app") as conn:
        with conn.session() as session:
            with pytest.raises(InvalidMessage, match="must be Java-serialized"):
                session.send("orders", b"a=1", kind=BodyKind.MAP)
            with pytest.raises(InvalidMessage, match="must be Java-serialized"):
                session.send("topic:news", b"", kind=BodyKind.OBJECT)
            session.send("orders", SERIALIZED, kind=BodyKind.STREAM)
        with conn.session(transacted=True) as session:
            with pytest.raises(InvalidMessage, match="must be Java-serialized"):
                session.send("orders", b"[1, 2]", kind=BodyKind.STREAM)  # at send, not commit
            session.commit()
    target = tmp_path / "orders" / "incoming" / "target"
    [name] = os.listdir(target)
    assert decode_filename(name).kind is BodyKind.STREAM
    assert count(tmp_path / "orders" / "incoming" / "working") == 0
