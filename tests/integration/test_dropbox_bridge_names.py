"""Names as a real DropboxMQ 1.2 client writes and reads them, through a live broker's bridge."""

from __future__ import annotations

import os
import time
from pathlib import Path

import chute
from chute.dropbox.layout import init_queue
from chute.dropbox.transcoder import decode_filename
from tests.integration.dropbox_bridge import count, export_mount, import_mount, serve, wait_until


def test_files_dropboxmq_put_back_into_target_are_imported_as_their_messages(
    tmp_path: Path,
) -> None:
    mq = tmp_path / "mq"
    layout = init_queue(mq, "orders")
    past = int(time.time() * 1000) - 60_000
    # recovered by DropboxMQ's consumer javaC: back in target/ with its prefix and count
    for name in (
        "javaC~8.1700000000001000-2.T..corr-9.Qreplies..colorS=red&JMSXDeliveryCountI=1",
        f"javaC~9.1700000000002000-3.T.{past}.....JMSXDeliveryCountI=1",
    ):
        tmp = layout.working / "x"
        tmp.write_text("recovered")
        os.rename(tmp, layout.target / name)
    server = serve(tmp_path, import_mount(mq, "orders"))
    try:
        wait_until(lambda: count(layout.processed) + count(layout.expired) == 2, "both taken")
        assert count(layout.expired) == 1  # its expiration applies: never delivered
        with chute.connect(server.url) as conn, conn.session(ack="client") as session:
            message = session.consumer("queue:orders").receive(timeout=5.0)
            assert message is not None
            message.ack()
        assert (message.id, message.priority, message.timestamp) == (
            "ID:1700000000001000-2",
            8,
            1700000000001,
        )
        assert (message.correlation_id, message.reply_to) == ("corr-9", "queue:replies")
        assert message.properties == {"color": "red"}
    finally:
        server.stop()
    assert "Traceback" not in server.output


def test_an_export_writes_what_dropboxmq_can_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    server = serve(tmp_path, export_mount(out, "queue:results"))
    realistic = {
        "b": True,
        "r": "base",
        "s": "a.b&c=d~e%f/g+ é€",
        "d": 220.75,
        "f": 110.375,
        "h": 12671,
        "y": -13,
        "i": 883002649,
        "l": 883000006181,
        "n": 883,
    }
    try:
        with chute.connect(server.url) as conn, conn.session() as session:
            session.send(
                "results",
                "text",
                properties={"content-type": "text/plain", "x-trace": "t1", "after": 1},
            )
            session.send(
                "results",
                "long",
                reply_to="topic:news.eu",
                type="Order.v1",
                properties=realistic,
            )
        target = out / "results" / "incoming" / "target"
        wait_until(lambda: target.is_dir() and count(target) == 2, "both exported")
        decoded = {decode_filename(n).type: n for n in os.listdir(target)}
        text_name, long_name = decoded[None], decoded["Order.v1"]
        assert "content-type" not in text_name
        assert "trace" not in text_name
        assert decode_filename(text_name).properties == {"after": 1}
        assert len(long_name) > 200  # refused by a 172-byte limit before
        assert decode_filename(long_name).properties.keys() == realistic.keys()
    finally:
        server.stop()
    assert "not a Java identifier" in server.output
